"""What every biometric encoder is: metadata readable without weights, and one `encode` verb."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

TIMM_PREFIX = "timm:"  # registry names of timm models, created on demand (modalities.timm_encoder)


@dataclass(frozen=True)
class EncoderInfo:
    """Static facts about an encoder, known before any weight is loaded."""

    name: str  # registry name, also the `modality` key of templates and probes
    kind: str  # "face" | "palm" | "iris" | "other"
    dim: int
    default_threshold: float  # cosine τ used until a calibrated one is stored
    threshold_source: str  # where the default τ comes from
    weights: str  # weight source ("pip:face-recognition-models", "hf-hub:org/repo/file", "none")
    license: str  # licence of the weights
    description: str = ""
    step_up_threshold: float | None = None  # stricter τ for destructive actions (None: the gate's τ)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Availability:
    """Whether an encoder can be created here now, found without loading its weights or downloading anything.

    `ready` means create() is expected to succeed: the weights are on this machine, or they come from
    the Hugging Face Hub, HF_HUB_OFFLINE is not set and the Hub answers a TCP connection (then
    create() downloads them first, and `reason` says so). Not ready: `reason` says what is missing.
    """

    name: str
    ready: bool
    reason: str  # one line for people: where the weights are, or what is missing and how to fix it
    source: str = ""  # the weight source create() uses or would download from, as in EncoderInfo.weights


class Encoder(ABC):
    """A biometric encoder: image in, L2-normalised 1-d float32 embedding out.

    Subclasses set the class attribute `info` and load weights in `__init__`, so the
    registry can list them without loading anything; those with weights override the
    classmethod `availability` to say, as cheaply, whether `__init__` would find them.
    """

    info: EncoderInfo

    @classmethod
    def availability(cls) -> Availability:
        """Whether create() can load this encoder here, checked cheaply; ready unless a subclass checks its weights."""
        return Availability(cls.info.name, True, "ready (the encoder declares no weights to check)", cls.info.weights)

    @abstractmethod
    def encode(self, image: Any) -> np.ndarray:
        """Embed one capture (path, bytes, numpy array or PIL image) of exactly one subject."""

    def capture(self, image: Any, quality: str = "probe") -> np.ndarray:
        """Embed a live capture held to the quality bar `quality` ("probe", or the stricter "enrol"):
        PoorCaptureError with a hint when it falls short. Encoders without a quality gate embed as `encode`."""
        return self.encode(image)

    @property
    def name(self) -> str:
        return self.info.name


def l2_normalise(vector: np.ndarray) -> np.ndarray:
    """Return `vector` as float32 with unit Euclidean norm (cosine becomes a dot product)."""
    v = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(v))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError("cannot normalise a zero or non-finite embedding")
    return v / norm
