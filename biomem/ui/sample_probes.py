"""The sample captures this page handed out, recognised when they come back as probes.

A sample person's capture (a sample button's photo or palm) is public: it proves nothing about the
visitor and tells an attacker nothing new. A probe whose pixels are exactly those of a capture the
page made is therefore no attempt of the visitor's (it spends nobody's attempt limits), and after a
Compare the page can show a fresh capture of the same sample person instead of an empty box. A photo
of the visitor's own never matches: only pixels the page produced are known.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np

from modalities.images import load_image

MAX_HANDED = 4096  # captures remembered, most recent kept: a visitor uses a sample within minutes


def pixels_digest(image: np.ndarray) -> str:
    """A digest of an image's RGB pixels and shape, as load_image reads them from any source."""
    return hashlib.sha256(repr(image.shape).encode() + image.tobytes()).hexdigest()


class SampleProbes:
    """Digest of each sample capture handed out -> (sample person, encoder it was made for)."""

    def __init__(self, limit: int = MAX_HANDED) -> None:
        self.limit = limit
        self._handed: OrderedDict[str, tuple[str, str | None]] = OrderedDict()
        self._lock = threading.Lock()

    def hand_out(self, person: str, encoder: str | None, capture: np.ndarray) -> np.ndarray:
        """Remember `capture` as sample person `person`'s, and return it for the probe box."""
        digest = pixels_digest(load_image(capture))
        with self._lock:
            self._handed[digest] = (person, encoder)
            self._handed.move_to_end(digest)
            while len(self._handed) > self.limit:
                self._handed.popitem(last=False)
        return capture

    def which(self, image: np.ndarray) -> tuple[str, str | None] | None:
        """(sample person, encoder) when `image` (as load_image read it) is a capture handed out, else None."""
        with self._lock:
            return self._handed.get(pixels_digest(image))
