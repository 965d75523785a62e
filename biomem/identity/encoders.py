"""The biometric encoders one BioMemory uses, created on first use, one per modality name."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import modalities


@dataclass
class EncoderCache:
    """Lazily created biometric encoders, one per modality name (one lock per name, so a slow
    first load of one encoder never holds up requests that use another)."""

    encoders: dict[str, modalities.Encoder] = field(default_factory=dict)
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def info(self, name: str) -> modalities.EncoderInfo:
        """Metadata of a loaded encoder instance, else the registry's (UnknownEncoderError, an
        UnknownModalityError, for a name it does not know)."""
        encoder = self.encoders.get(name)
        return encoder.info if encoder is not None else modalities.info(name)

    def get(self, name: str) -> modalities.Encoder:
        """The encoder of `name`, created on first use (UnknownModalityError for a name the registry lacks)."""
        encoder = self.encoders.get(name)
        if encoder is not None:
            return encoder
        modalities.info(name)  # an unknown name is a typed error before any lock is held
        with self.lock:
            lock = self.locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self.encoders:
                self.encoders[name] = modalities.create(name)
            return self.encoders[name]
