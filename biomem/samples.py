"""Sample faces from the photos shipped in the `insightface` package: 7 distinct people.

Used by the demo, the tests and the benchmarks; nothing here is a model.

The package is located with importlib.util.find_spec and never imported (importing it is
slow and pulls onnxruntime). Crops are cached per process; callers get copies.
"""

from __future__ import annotations

import functools
import importlib.util
import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

CROP_SIZE = 256
# dlib HOG boxes (left, top, right, bottom) of the six faces in t1.jpg, left to right.
T1_FACE_BOXES = [
    (65, 284, 169, 388),
    (275, 179, 362, 266),
    (452, 300, 577, 424),
    (734, 365, 837, 469),
    (883, 89, 987, 192),
    (1114, 284, 1217, 388),
]
_MARGIN = 1.1  # half the crop side, in face-box sides: the face fills ~45% of the crop width


@functools.cache
def insightface_images_dir() -> Path:
    """`insightface/data/images`, or a clear error saying how to get it."""
    spec = importlib.util.find_spec("insightface")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("test faces need the insightface package: pip install insightface==0.7.3")
    return Path(spec.origin).parent / "data" / "images"


def group_photo_path() -> Path:
    """t1.jpg: a group photo of six people."""
    return insightface_images_dir() / "t1.jpg"


def face_crops() -> list[np.ndarray]:
    """Seven CROP_SIZE² RGB crops, one distinct person each: t1.jpg's six faces then Tom Hanks."""
    return [crop.copy() for crop in _face_crops()]


@functools.cache
def _face_crops() -> tuple[np.ndarray, ...]:
    group = Image.open(group_photo_path()).convert("RGB")
    crops = [_square_crop(group, box) for box in T1_FACE_BOXES]
    # Tom_Hanks_54745.png is a tight 112x112 aligned face: pad its edges out to give it a margin.
    tom = np.asarray(Image.open(insightface_images_dir() / "Tom_Hanks_54745.png").convert("RGB"))
    pad = tom.shape[0] // 2
    padded = np.pad(tom, ((pad, pad), (pad, pad), (0, 0)), mode="edge")
    crops.append(np.asarray(Image.fromarray(padded).resize((CROP_SIZE, CROP_SIZE), Image.Resampling.LANCZOS)))
    for crop in crops:
        crop.setflags(write=False)
    return tuple(crops)


def _square_crop(image: Image.Image, box: tuple[int, int, int, int]) -> np.ndarray:
    left, top, right, bottom = box
    cx, cy = (left + right) / 2, (top + bottom) / 2
    half = _MARGIN * max(right - left, bottom - top)
    square = (round(cx - half), round(cy - half), round(cx + half), round(cy + half))
    return np.asarray(image.crop(square).resize((CROP_SIZE, CROP_SIZE), Image.Resampling.LANCZOS))


def augment(img: np.ndarray, seed: int) -> np.ndarray:
    """Another "capture" of the same face: small rotation, scale, shift, lighting, then blur or JPEG."""
    rng = np.random.default_rng(seed)
    height, width = img.shape[:2]
    angle = np.deg2rad(rng.uniform(-8.0, 8.0))
    scale = rng.uniform(0.9, 1.1)
    shift = rng.uniform(-0.05, 0.05, size=2) * (width, height)
    # PIL's AFFINE maps each output pixel to an input pixel: invert rotate-scale-shift about the centre.
    cos, sin = np.cos(angle) / scale, np.sin(angle) / scale
    cx, cy = width / 2, height / 2
    ox, oy = cx + shift[0], cy + shift[1]
    coeffs = (cos, sin, cx - cos * ox - sin * oy, -sin, cos, cy + sin * ox - cos * oy)
    fill = tuple(int(v) for v in img.reshape(-1, 3).mean(axis=0))
    moved = Image.fromarray(img).transform(
        (width, height), Image.Transform.AFFINE, coeffs, Image.Resampling.BICUBIC, fillcolor=fill
    )
    pixels = np.asarray(moved, dtype=np.float32)
    contrast, brightness = rng.uniform(0.8, 1.2), rng.uniform(-20.0, 20.0)
    pixels = (pixels - pixels.mean()) * contrast + pixels.mean() + brightness
    out = Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))
    if rng.random() < 0.5:
        out = out.filter(ImageFilter.GaussianBlur(radius=rng.uniform(0.3, 1.0)))
    else:
        buffer = io.BytesIO()
        out.save(buffer, format="JPEG", quality=int(rng.integers(40, 81)))
        out = Image.open(buffer).convert("RGB")
    return np.asarray(out)
