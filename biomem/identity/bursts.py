"""A burst: several frames of one person from one camera, fused into one probe.

`Burst([frame1, frame2, frame3])` is a probe anywhere a sample is (`identify(Burst(frames))`), and in a
`{modality: ...}` probe a list or tuple of frames is a burst of that modality:
`{"face-arcface-s": [frame1, frame2, frame3]}`. Each frame is encoded at the probe's quality bar; frames
with a poor capture or no face are skipped (all of them: the hint of the frame the detector was surest
of); the rest must all show one person (every pair at τ), and their mean, L2-normalised, is the probe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidInputError, MixedBurstError, NoFaceError, PoorCaptureError

MAX_FRAMES = 10  # frames of one burst: a webcam's second or two


@dataclass(frozen=True)
class Burst:
    """Frames (paths, bytes, arrays, PIL images) of one person, fused into one probe of one modality."""

    frames: tuple[Any, ...]

    def __init__(self, frames: Iterable[Any]) -> None:
        object.__setattr__(self, "frames", tuple(frames))
        if not 1 <= len(self.frames) <= MAX_FRAMES:
            raise InvalidInputError(f"a burst holds 1 to {MAX_FRAMES} frames, got {len(self.frames)}")


def fuse_frames(burst: Burst, encode: Callable[[Any], np.ndarray], tau: float) -> np.ndarray:
    """The burst's one embedding: the mean of its usable frames' embeddings, L2-normalised; PoorCaptureError
    (the best frame's hint) or NoFaceError when no frame is usable, MixedBurstError when they show
    different people (some pair below τ)."""
    vectors: list[np.ndarray] = []
    refused: list[Exception] = []
    for frame in burst.frames:
        try:
            vectors.append(np.asarray(encode(frame), dtype=np.float32))
        except (PoorCaptureError, NoFaceError) as exc:
            refused.append(exc)
    if not vectors:
        poor = [e for e in refused if isinstance(e, PoorCaptureError)]
        if poor:
            raise max(poor, key=lambda e: getattr(e.quality, "score", float("-inf")))
        raise refused[0]
    matrix = np.stack(vectors)
    if len(vectors) > 1 and float((matrix @ matrix.T).min()) < tau:
        raise MixedBurstError("the frames show different people: one person at a time, please")
    mean = matrix.mean(axis=0)
    return mean / np.linalg.norm(mean)
