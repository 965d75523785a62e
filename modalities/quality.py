"""Capture quality of a face, measured from the detector's own output and held to a bar before any match.

Four measures, each with the hint a person can act on: the face box's shorter side in pixels ("move
closer"), the head's yaw and roll from the 5 keypoints ("face the camera"), the sharpness of the aligned
crop ("hold still") and the detector's confidence ("more light"). A probe must clear QUALITIES' "probe"
bar, an enrolment capture the stricter "enrol" one; the numbers are measured in benchmarks/quality.py.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .errors import InvalidInputError, PoorCaptureError

QUALITIES = ("probe", "enrol")  # the bars a capture can be held to, loosest first
HINTS = {"size": "move closer", "pose": "face the camera", "blur": "hold still", "detection": "more light"}


@dataclass(frozen=True)
class FaceQuality:
    """What a capture's face measures: box side (px), yaw and roll (degrees), sharpness, detector score."""

    size: float
    yaw: float
    roll: float
    sharpness: float
    score: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QualityBar:
    """The least a capture must measure to be matched or enrolled."""

    min_size: float
    max_yaw: float
    max_roll: float
    min_sharpness: float
    min_score: float

    def check(self, quality: FaceQuality, bar: str = "probe") -> None:
        """PoorCaptureError naming the first measure that falls short (size, pose, blur, detection), with its hint."""
        what = "an enrolment capture" if bar == "enrol" else "a probe"
        failures = [
            ("size", quality.size < self.min_size,
             f"the face is {quality.size:.0f} px, {what} needs {self.min_size:.0f}"),
            ("pose", abs(quality.yaw) > self.max_yaw or abs(quality.roll) > self.max_roll,
             f"the head is turned {abs(quality.yaw):.0f}° and tilted {abs(quality.roll):.0f}°, {what} takes at "
             f"most {self.max_yaw:.0f}° and {self.max_roll:.0f}°"),
            ("blur", quality.sharpness < self.min_sharpness,
             f"the face is blurred (sharpness {quality.sharpness:.3f}, {what} needs {self.min_sharpness:.3f})"),
            ("detection", quality.score < self.min_score,
             f"the face is faint (detector confidence {quality.score:.2f}, {what} needs {self.min_score:.2f})"),
        ]
        for criterion, failed, detail in failures:
            if failed:
                raise PoorCaptureError(f"{detail}: {HINTS[criterion]}", HINTS[criterion], criterion=criterion,
                                       quality=quality)


def bar_of(bars: dict[str, QualityBar], quality: str) -> QualityBar:
    """The bar named `quality`; InvalidInputError for a name outside QUALITIES."""
    if quality not in bars:
        raise InvalidInputError(f"capture quality must be one of {QUALITIES}, got {quality!r}")
    return bars[quality]


def pose(left_eye: np.ndarray, right_eye: np.ndarray, nose: np.ndarray) -> tuple[float, float]:
    """(yaw, roll) in degrees from the eye centres and the nose: roll is the eye line's angle; yaw the nose's
    sideways offset from the eyes' midpoint, in half eye-distances, read as tan(yaw) once the roll is undone."""
    dx, dy = (np.asarray(right_eye, dtype=np.float64) - np.asarray(left_eye, dtype=np.float64))
    roll = math.atan2(dy, dx)
    half = math.hypot(dx, dy) / 2 or 1.0
    offset = np.asarray(nose, dtype=np.float64) - (np.asarray(left_eye) + np.asarray(right_eye)) / 2
    along = offset[0] * math.cos(roll) + offset[1] * math.sin(roll)
    return math.degrees(math.atan(along / half)), math.degrees(roll)


def sharpness(crop: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian of the aligned crop over the crop's own variance: blur lowers it,
    and dim light (which scales both) does not."""
    gray = np.asarray(crop, dtype=np.float64)
    if gray.ndim == 3:
        gray = gray.mean(axis=2)
    laplacian = (gray[:-2, 1:-1] + gray[2:, 1:-1] + gray[1:-1, :-2] + gray[1:-1, 2:] - 4 * gray[1:-1, 1:-1])
    spread = float(gray.var())
    return float(laplacian.var()) / spread if spread > 0 else 0.0
