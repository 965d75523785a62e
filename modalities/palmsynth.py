"""Seeded synthetic palmprint ROIs (128x128 uint8 grayscale) for calibration, tests and demos.

An identity (its seed) fixes the palm: the three principal lines (heart, head, life), a few
secondary lines, a few dozen creases, all as quadratic or cubic Bezier curves with their own
width and depth, plus a skin tone and skin texture. A capture (its seed) fixes what changes
between two placements of one hand on a scanner: a shift of up to 4 px, a rotation of up
to 5 degrees, an illumination gain and gradient, a slight blur and sensor noise. Capture 0
is the canonical, unperturbed rendering.

    palm_capture(7, 0)                 # identity 7, canonical
    render(palm_identity(7), 3)        # identity 7, capture 3
    write_dataset("palms", 100, 5, 0)  # palms/id_0000/0000.png ... palms/id_0099/0004.png

Lines are drawn once per identity at 2x with PIL's ImageDraw (10-15 ms); each capture
moves that drawing and box-downsamples it (cheap antialiasing) in about 3 ms. Same seeds
give identical bytes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from scipy.ndimage import gaussian_filter

ROI_SIZE = 128
SUPERSAMPLE = 2
MARGIN = 12  # px around the ROI, so a shifted and rotated capture never shows the canvas edge
CANVAS = ROI_SIZE + 2 * MARGIN
MAX_SHIFT = 4.0  # px
MAX_ROTATION = 5.0  # degrees
_BEZIER_STEPS = 16
_IDENTITY_STREAM = 0x9A1  # keeps identity and capture random streams apart
_CAPTURE_STREAM = 0xCA9


@dataclass(frozen=True, eq=False)
class Curve:
    """One palm line: Bezier control points in ROI pixels, peak width in px, peak depth in grey levels."""

    points: np.ndarray  # (3 or 4, 2) x, y
    width: float
    depth: float


@dataclass(frozen=True, eq=False)
class PalmIdentity:
    """One synthetic palm: its lines and skin tone, and the canonical drawing every capture starts from."""

    seed: int
    curves: tuple[Curve, ...]
    skin: float  # base grey level
    canvas: np.ndarray  # read-only float32 (CANVAS*SUPERSAMPLE)^2: skin + texture - lines, drawn once


def palm_identity(identity_seed: int) -> PalmIdentity:
    """The palm of identity `identity_seed`: principal lines, secondary lines, creases, texture."""
    rng = np.random.default_rng([_IDENTITY_STREAM, identity_seed])
    u = rng.uniform
    curves = [
        # heart line: enters at the right edge, arcs up towards the index finger
        Curve(np.array([[140, u(20, 42)], [u(70, 95), u(28, 52)], [u(35, 58), u(18, 40)], [u(0, 25), u(-6, 18)]]),
              u(2.2, 3.2), u(60, 95)),
        # head line: from the left edge across the palm, sloping down
        Curve(np.array([[-10, u(40, 58)], [u(30, 55), u(44, 66)], [u(75, 100), u(58, 86)], [u(112, 140), u(72, 108)]]),
              u(2.0, 3.0), u(55, 90)),
        # life line: from near the head line's start, around the thenar eminence to the wrist
        Curve(np.array([[-8, u(44, 60)], [u(28, 48), u(56, 74)], [u(48, 70), u(92, 116)], [u(40, 72), 140]]),
              u(2.2, 3.4), u(60, 100)),
    ]
    for _ in range(rng.integers(1, 4)):  # secondary lines (fate, sun): long, mostly vertical
        curves.append(_random_curve(rng, u(40, 80), math.pi / 2 + u(-0.5, 0.5), u(1.4, 2.2), u(35, 60)))
    for _ in range(rng.integers(30, 46)):  # creases and wrinkles, half of them near-vertical
        angle = math.pi / 2 + u(-0.6, 0.6) if rng.random() < 0.5 else u(0, math.pi)
        curves.append(_random_curve(rng, u(8, 40), angle, u(0.8, 1.8), u(18, 50)))
    skin = u(150, 190)
    texture = _smooth_noise(rng, 2, 1.2, 5.0) + _smooth_noise(rng, 16, 2.5, 8.0)  # pores + blotches
    return PalmIdentity(identity_seed, tuple(curves), skin, _draw_palm(curves, skin, texture))


def _random_curve(rng: np.random.Generator, length: float, angle: float, width: float, depth: float) -> Curve:
    """A quadratic or cubic Bezier of about `length` px at `angle`, bent sideways at random."""
    centre = rng.uniform(-4, ROI_SIZE + 4, size=2)
    direction = np.array([math.cos(angle), math.sin(angle)])
    normal = np.array([-direction[1], direction[0]])
    degree = int(rng.integers(2, 4))
    along = np.linspace(-0.5, 0.5, degree + 1) * length
    bend = rng.uniform(-0.25, 0.25, size=degree + 1) * length
    bend[[0, -1]] = 0.0
    points = centre + along[:, None] * direction + bend[:, None] * normal
    return Curve(points, width, depth)


def _smooth_noise(rng: np.random.Generator, cell: int, sigma: float, amplitude: float) -> np.ndarray:
    """Noise smoothed over `sigma` cells of `cell` supersampled px, upscaled to the canvas, std `amplitude`."""
    side = CANVAS * SUPERSAMPLE
    small = gaussian_filter(rng.standard_normal((side // cell, side // cell), dtype=np.float32), sigma)
    noise = np.asarray(Image.fromarray(small).resize((side, side), Image.Resampling.BICUBIC))
    return noise * (amplitude / noise.std())


def render(identity: PalmIdentity, capture_seed: int) -> np.ndarray:
    """One 128x128 uint8 capture of `identity`; capture_seed 0 is the canonical rendering."""
    if capture_seed == 0:
        return _to_uint8(_downsample(_crop_roi(identity.canvas)))
    rng = np.random.default_rng([_CAPTURE_STREAM, identity.seed, capture_seed])
    shift = rng.uniform(-MAX_SHIFT, MAX_SHIFT, size=2)
    rotation = math.radians(rng.uniform(-MAX_ROTATION, MAX_ROTATION))
    image = _downsample(_place(identity.canvas, shift, rotation))
    gain = rng.uniform(0.85, 1.15)
    slope = rng.uniform(-20, 20, size=2) / ROI_SIZE  # grey levels per px, x and y
    grid = np.arange(ROI_SIZE, dtype=np.float32) - ROI_SIZE / 2
    image = image * gain + slope[0] * grid[None, :] + slope[1] * grid[:, None] + rng.uniform(-10, 10)
    image = gaussian_filter(image, rng.uniform(0.3, 0.9))
    image = image + rng.normal(0.0, rng.uniform(1.5, 3.5), size=image.shape)
    return _to_uint8(image)


def palm_capture(identity_seed: int, capture_seed: int) -> np.ndarray:
    """Capture `capture_seed` of identity `identity_seed` (0 = canonical), as 128x128 uint8."""
    return render(palm_identity(identity_seed), capture_seed)


def write_dataset(folder: str | Path, identities: int, captures: int, seed: int = 0) -> Path:
    """Write `identities` x `captures` PNGs as folder/id_0007/0003.png; identity k uses seed + k."""
    root = Path(folder)
    for k in range(identities):
        identity = palm_identity(seed + k)
        person = root / f"id_{k:04d}"
        person.mkdir(parents=True, exist_ok=True)
        for c in range(captures):
            Image.fromarray(render(identity, c)).save(person / f"{c:04d}.png")
    return root


def _draw_palm(curves: list[Curve], skin: float, texture: np.ndarray) -> np.ndarray:
    """Skin minus line depth on the supersampled canvas (float32), lines softened into valleys."""
    side = CANVAS * SUPERSAMPLE
    canvas = Image.new("L", (side, side), 0)
    draw = ImageDraw.Draw(canvas)
    profile = np.sin(np.linspace(0.0, np.pi, _BEZIER_STEPS + 1)) ** 0.5  # lines taper and fade at both ends
    mid = (profile[:-1] + profile[1:]) / 2
    for curve in sorted(curves, key=lambda c: c.depth):  # shallow first: deeper lines win at crossings
        points = ((_bernstein(len(curve.points) - 1) @ curve.points + MARGIN) * SUPERSAMPLE).tolist()
        widths = (curve.width * SUPERSAMPLE * (0.35 + 0.65 * mid)).tolist()
        fills = np.rint(curve.depth * (0.4 + 0.6 * mid)).astype(int).tolist()
        for (x0, y0), (x1, y1), width, fill in zip(points, points[1:], widths, fills):
            draw.line((x0, y0, x1, y1), fill=fill, width=max(1, round(width)))
            r = width / 2
            if r >= 1.0:  # round joints so wide lines do not crack at bends
                draw.ellipse((x1 - r, y1 - r, x1 + r, y1 + r), fill=fill)
    depth = gaussian_filter(np.asarray(canvas, dtype=np.float32), 0.8 * SUPERSAMPLE)
    palm = (skin + texture - depth).astype(np.float32)
    palm.flags.writeable = False  # shared by every capture of the identity
    return palm


@functools.cache
def _bernstein(degree: int) -> np.ndarray:
    """(_BEZIER_STEPS + 1, degree + 1) weights that turn control points into points along the curve."""
    t = np.linspace(0.0, 1.0, _BEZIER_STEPS + 1)
    return np.stack([math.comb(degree, i) * (1 - t) ** (degree - i) * t**i for i in range(degree + 1)], axis=1)


def _crop_roi(palm: np.ndarray) -> np.ndarray:
    """The supersampled ROI in the middle of the canvas, unmoved."""
    m = MARGIN * SUPERSAMPLE
    return palm[m:-m, m:-m]


def _place(palm: np.ndarray, shift: np.ndarray, rotation: float) -> np.ndarray:
    """The supersampled ROI after moving the palm by `shift` px and rotating it by `rotation` rad."""
    side, out = palm.shape[0], ROI_SIZE * SUPERSAMPLE
    c, s = math.cos(rotation), math.sin(rotation)
    sx, sy = shift * SUPERSAMPLE
    # PIL maps each output pixel to an input position: input = R^-1 (output - out/2 - shift) + side/2.
    ox, oy = -out / 2 - sx, -out / 2 - sy
    coeffs = (c, s, c * ox + s * oy + side / 2, -s, c, -s * ox + c * oy + side / 2)
    moved = Image.fromarray(palm).transform((out, out), Image.Transform.AFFINE, coeffs,
                                            resample=Image.Resampling.BILINEAR)
    return np.asarray(moved, dtype=np.float32)


def _downsample(image: np.ndarray) -> np.ndarray:
    """Box-average SUPERSAMPLE x SUPERSAMPLE blocks: the 128x128 ROI."""
    s = SUPERSAMPLE
    return image.reshape(ROI_SIZE, s, ROI_SIZE, s).mean(axis=(1, 3))


def _to_uint8(image: np.ndarray) -> np.ndarray:
    """Round and clip to 8-bit grey levels."""
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)
