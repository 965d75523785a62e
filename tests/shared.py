"""Helpers several test files share: an image as PNG bytes, and an upload where Gradio would put it."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


def png(image: np.ndarray) -> bytes:
    """`image` (an RGB or grey array) encoded as PNG."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def upload(cache: Path, image: np.ndarray, name: str) -> str:
    """A file where Gradio would put an upload of `image`: its own folder inside the upload cache."""
    folder = cache / name
    folder.mkdir()
    Image.fromarray(image).save(folder / f"{name}.png")
    return str(folder / f"{name}.png")
