"""Degraded copies of a face capture, for measuring and testing the quality gate (modalities.quality):
smaller, blurred, rolled, turned, dimmed or cut. benchmarks/quality.py tabulates them, tests/test_quality.py
checks each is refused with its hint."""

from __future__ import annotations

import cv2
import numpy as np
from PIL import Image, ImageFilter


def downscale(img: np.ndarray, factor: float) -> np.ndarray:
    """The crop shrunk by `factor`: the same face in fewer pixels."""
    side = round(img.shape[0] * factor)
    return np.asarray(Image.fromarray(img).resize((side, side), Image.Resampling.LANCZOS))


def blur(img: np.ndarray, radius: float) -> np.ndarray:
    """A Gaussian blur of `radius` pixels: a moving head or an unfocused camera."""
    return np.asarray(Image.fromarray(img).filter(ImageFilter.GaussianBlur(radius)))


def roll(img: np.ndarray, degrees: float) -> np.ndarray:
    """The frame rotated in its plane: a tilted head (or camera)."""
    fill = tuple(int(v) for v in img.reshape(-1, 3).mean(axis=0))
    return np.asarray(Image.fromarray(img).rotate(degrees, Image.Resampling.BICUBIC, fillcolor=fill))


def yaw(img: np.ndarray, degrees: float) -> np.ndarray:
    """The face turned by `degrees` about the vertical axis: each pixel moved by its depth on a head-shaped
    surface (an ellipsoid with a nose) times sin(yaw), and the width foreshortened by cos(yaw)."""
    height, width = img.shape[:2]
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    cx, cy, a, b = width / 2, height / 2, width * 0.25, height * 0.33
    inside = np.clip(1 - ((x - cx) / a) ** 2 - ((y - cy) / b) ** 2, 0, None)
    nose = np.exp(-(((x - cx) / (0.12 * a)) ** 2 + ((y - cy - 0.1 * b) / (0.35 * b)) ** 2))
    depth = a * np.sqrt(inside) + 0.35 * a * nose
    theta = np.deg2rad(degrees)
    source_x = (cx + ((x - cx) - depth * np.sin(theta)) / np.cos(theta)).astype(np.float32)
    return cv2.remap(img, source_x, y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def dark(img: np.ndarray, factor: float, seed: int = 0) -> np.ndarray:
    """Dim light: the pixels scaled down, with the sensor noise a dark frame has."""
    noise = np.random.default_rng(seed).normal(0.0, 4.0, img.shape)
    return np.clip(img.astype(np.float64) * factor + noise, 0, 255).astype(np.uint8)


def cut(img: np.ndarray, keep: float) -> np.ndarray:
    """The frame cut through the face: only the left `keep` of the width is kept."""
    return np.ascontiguousarray(img[:, : round(img.shape[1] * keep)])


# (name, degrade): the copies benchmarks/quality.py tabulates
DEGRADATIONS = [
    *[(f"downscaled x{f}", lambda i, f=f: downscale(i, f)) for f in (0.5, 0.35, 0.25)],
    *[(f"blur r={r}", lambda i, r=r: blur(i, r)) for r in (1.5, 2.0, 3.0, 4.0)],
    *[(f"roll {d}°", lambda i, d=d: roll(i, d)) for d in (15, 25, 35)],
    *[(f"yaw {d}°", lambda i, d=d: yaw(i, d)) for d in (20, 35, 50)],
    *[(f"dark x{f}", lambda i, f=f: dark(i, f)) for f in (0.2, 0.1, 0.05)],
    *[(f"cut at {k}", lambda i, k=k: cut(i, k)) for k in (0.6, 0.5)],
]
