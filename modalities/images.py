"""Turn whatever a caller hands us (path, bytes, array, PIL image) into one safe RGB uint8 array.

Decoding is bounded: the pixel count is read from the header and checked before any pixel
is decoded, so a small file that claims a huge image cannot exhaust memory.
"""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import InvalidImageError

DEFAULT_MAX_PIXELS = 40_000_000
DEFAULT_MIN_SIDE = 32
_WHITE = (255, 255, 255)


def load_image(
    src: Any, *, max_pixels: int = DEFAULT_MAX_PIXELS, min_side: int = DEFAULT_MIN_SIDE
) -> np.ndarray:
    """Return `src` as a C-contiguous HxWx3 uint8 RGB array, or raise InvalidImageError saying why."""
    if isinstance(src, Image.Image):
        return _from_pil(src, max_pixels, min_side)
    if isinstance(src, np.ndarray):
        return _from_array(src, max_pixels, min_side)
    if isinstance(src, (bytes, bytearray, memoryview)):
        if len(src) == 0:
            raise InvalidImageError("image bytes are empty")
        return _decode(io.BytesIO(bytes(src)), "image bytes", max_pixels, min_side)
    if isinstance(src, (str, os.PathLike)):
        path = Path(src)
        if not path.is_file():
            raise InvalidImageError(f"image file not found: {path}")
        with path.open("rb") as handle:
            return _decode(handle, f"image file {path}", max_pixels, min_side)
    raise InvalidImageError(
        f"unsupported image type {type(src).__name__}: give a path, bytes, a numpy array or a PIL image"
    )


def _decode(stream: Any, what: str, max_pixels: int, min_side: int) -> np.ndarray:
    """Open lazily (header only), check the size, then decode."""
    try:
        with warnings.catch_warnings():
            # We enforce our own pixel limit below; PIL's warning would only be noise.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(stream)
    except UnidentifiedImageError:
        raise InvalidImageError(f"{what} is not an image in a format Pillow can read") from None
    except Image.DecompressionBombError as exc:
        raise InvalidImageError(f"{what} is over Pillow's decompression-bomb limit: {exc}") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise InvalidImageError(f"{what} cannot be opened as an image: {exc}") from None
    with image:
        return _from_pil(image, max_pixels, min_side, what)


def _from_pil(image: Image.Image, max_pixels: int, min_side: int, what: str = "image") -> np.ndarray:
    """Check the declared size, decode, apply EXIF orientation and flatten to RGB."""
    _check_size(image.width, image.height, max_pixels, min_side, what)
    try:
        image.load()
        image = ImageOps.exif_transpose(image)
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise InvalidImageError(f"{what} is corrupt or truncated: {exc}") from None
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        flat = Image.new("RGB", rgba.size, _WHITE)
        flat.paste(rgba, mask=rgba.getchannel("A"))
        image = flat
    return np.ascontiguousarray(np.asarray(image.convert("RGB"), dtype=np.uint8))


def _from_array(array: np.ndarray, max_pixels: int, min_side: int) -> np.ndarray:
    """Accept HxW, HxWx1, HxWx3 or HxWx4 arrays of uint8, or of floats in [0, 1]."""
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if not (array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (3, 4))):
        raise InvalidImageError(
            f"image array has shape {array.shape}; expected HxW, HxWx3 (RGB) or HxWx4 (RGBA)"
        )
    _check_size(array.shape[1], array.shape[0], max_pixels, min_side, "image array")
    if array.dtype == np.uint8:
        pixels = array
    elif np.issubdtype(array.dtype, np.floating):
        if not np.isfinite(array).all() or array.min() < 0.0 or array.max() > 1.0:
            raise InvalidImageError("float image array must hold finite values in [0, 1]")
        pixels = np.rint(array * 255.0).astype(np.uint8)
    else:
        raise InvalidImageError(f"image array has dtype {array.dtype}; expected uint8 or float in [0, 1]")
    if pixels.ndim == 2:
        return np.ascontiguousarray(np.repeat(pixels[:, :, None], 3, axis=2))
    if pixels.shape[2] == 4:
        return _from_pil(Image.fromarray(np.ascontiguousarray(pixels)), max_pixels, min_side)
    return np.ascontiguousarray(pixels)


def _check_size(width: int, height: int, max_pixels: int, min_side: int, what: str) -> None:
    """Refuse images over the pixel budget or with a side too short to hold a usable face."""
    if width * height > max_pixels:
        raise InvalidImageError(
            f"{what} is {width}x{height} = {width * height:,} pixels, over the limit of {max_pixels:,}"
        )
    if min(width, height) < min_side:
        raise InvalidImageError(f"{what} is {width}x{height}; both sides must be at least {min_side} pixels")
