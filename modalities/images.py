"""Turn whatever a caller hands us (path, bytes, array, PIL image) into one safe RGB uint8 array.

Decoding is bounded. The size is read from the header and checked before any pixel is decoded:
over MAX_PIXELS is too large, and a large image claimed by a file far too small to hold it is a
bomb, never decoded. A photo over WORK_PIXELS (a phone's 48-50 Mpx photo) is decoded downscaled:
a JPEG at 1/2, 1/4 or 1/8 scale inside its decoder (draft mode), anything else whole and then
reduced by an integer factor, so no encoder ever gets more than WORK_PIXELS. Every refusal is an
InvalidImageError subclass that names its reason (modalities.errors).
"""

from __future__ import annotations

import io
import math
import os
import warnings
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import (
    CorruptImageError,
    ImageBombError,
    ImageTooLargeError,
    ImageTooSmallError,
    InvalidImageError,
    UnsupportedImageFormatError,
)

MAX_PIXELS = 64_000_000  # the largest image taken: 8000 x 8000; phones' 48-50 Mpx photos fit
WORK_PIXELS = 16_000_000  # the most an encoder gets: a larger image is decoded downscaled
MIN_SIDE = 32  # pixels; a shorter side cannot hold a usable face or palm
BOMB_RATIO = 1_000  # pixels per file byte past which a large image is a bomb (a phone photo has < 10)
MAX_FILE_BYTES = 32 * 1024 * 1024  # the largest image file the page and the API take (a 50 Mpx JPEG: 10-25 MB)
_REDUCIBLE = ("L", "LA", "RGB", "RGBA")  # modes Image.reduce averages correctly (not palettes, not 1-bit)
_WHITE = (255, 255, 255)
_HEAD = 1024  # bytes sniffed for a format Pillow does not read
# Photo formats only: Pillow's other plugins (EPS runs Ghostscript, PSD, ICNS, ...) never see a probe.
FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "TIFF", "GIF")
Image.init()  # every plugin registered now: Pillow's lazy first registration races between threads
_FTYP_BRANDS = {b"heic": "HEIC", b"heix": "HEIC", b"hevc": "HEIC", b"hevx": "HEIC", b"heim": "HEIC",
                b"heis": "HEIC", b"mif1": "HEIF", b"msf1": "HEIF", b"avif": "AVIF", b"avis": "AVIF"}


def load_image(src: Any, *, max_pixels: int = MAX_PIXELS, min_side: int = MIN_SIDE) -> np.ndarray:
    """Return `src` as a C-contiguous HxWx3 uint8 RGB array of at most WORK_PIXELS pixels, or raise
    InvalidImageError (a subclass when the reason is size, format or a bomb) saying why."""
    if isinstance(src, Image.Image):
        return _from_pil(src, max_pixels, min_side, "the image", owned=False)
    if isinstance(src, np.ndarray):
        return _from_array(src, max_pixels, min_side)
    if isinstance(src, (bytes, bytearray, memoryview)):
        if len(src) == 0:
            raise InvalidImageError("the file is empty")
        return _decode(io.BytesIO(bytes(src)), len(src), "the file", max_pixels, min_side)
    if isinstance(src, (str, os.PathLike)):
        path = Path(src)
        if not path.is_file():
            raise InvalidImageError(f"image file not found: {path}")
        with path.open("rb") as handle:
            return _decode(handle, path.stat().st_size, f"image file {path.name}", max_pixels, min_side)
    raise InvalidImageError(
        f"unsupported image type {type(src).__name__}: give a path, bytes, a numpy array or a PIL image"
    )


def _decode(stream: BinaryIO, size: int, what: str, max_pixels: int, min_side: int) -> np.ndarray:
    """Open lazily (header only), refuse a bomb or an unreadable format, then decode within bounds."""
    try:
        with warnings.catch_warnings():
            # We enforce our own pixel limit below; PIL's warning would only be noise.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(stream, formats=FORMATS)
    except Image.DecompressionBombError:
        raise ImageBombError(f"{what} claims more than {2 * Image.MAX_IMAGE_PIXELS:,} pixels; it was not decoded "
                             f"(the limit is {max_pixels / 1e6:g} Mpx)") from None
    except (OSError, SyntaxError, ValueError) as exc:  # UnidentifiedImageError is an OSError
        stream.seek(0)
        kind = _unreadable_format(stream.read(_HEAD))
        if kind:
            raise UnsupportedImageFormatError(f"{what} is a {kind} image, a format this decoder does not read") \
                from None
        if isinstance(exc, UnidentifiedImageError):
            raise InvalidImageError(f"{what} is not an image of a kind taken here "
                                    f"({', '.join(FORMATS[:-1])} or {FORMATS[-1]})") from None
        raise InvalidImageError(f"{what} cannot be opened as an image: {exc}") from None
    with image:
        pixels = image.width * image.height
        if pixels > WORK_PIXELS and pixels > BOMB_RATIO * size:
            raise ImageBombError(f"{what} claims {image.width}×{image.height} pixels in only {size:,} bytes; "
                                 "it was not decoded")
        return _from_pil(image, max_pixels, min_side, what, owned=True)


def _unreadable_format(head: bytes) -> str | None:
    """The name of an image format Pillow does not read here, from a file's first bytes; None if not one."""
    if head[4:8] == b"ftyp":
        return _FTYP_BRANDS.get(head[8:12])
    if head.startswith((b"\xff\x0a", b"\x00\x00\x00\x0cJXL \r\n\x87\n")):
        return "JPEG XL"
    return "SVG" if b"<svg" in head.lower() else None


def _from_pil(image: Image.Image, max_pixels: int, min_side: int, what: str, *, owned: bool) -> np.ndarray:
    """Check the declared size, decode within WORK_PIXELS, apply EXIF orientation and flatten to RGB.
    An image we own is drafted, released and turned in place; a caller's is only loaded."""
    _check_size(image.width, image.height, max_pixels, min_side, what)
    try:
        decoded = _decoded(image, owned)
        if owned and decoded is not image:
            image.close()  # the full-size pixels go before the reduced ones are copied out
        if owned or decoded is not image:
            ImageOps.exif_transpose(decoded, in_place=True)
            image = decoded
        else:
            image = ImageOps.exif_transpose(decoded)
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise CorruptImageError(f"{what} is corrupt or truncated: {exc}") from None
    if _has_alpha(image):
        rgba = image.convert("RGBA")
        flat = Image.new("RGB", rgba.size, _WHITE)
        flat.paste(rgba, mask=rgba.getchannel("A"))
        image = flat
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return np.ascontiguousarray(np.asarray(rgb, dtype=np.uint8))


def _decoded(image: Image.Image, owned: bool) -> Image.Image:
    """The image's pixels, at most WORK_PIXELS of them: a JPEG of ours downscaled by its own decoder
    (draft; a no-op for other formats), anything still too large reduced by an integer factor."""
    scale = 1
    while owned and scale < min(_reduction(image.size), 8):
        scale *= 2
    if scale > 1:
        image.draft(None, (image.width // scale, image.height // scale))
    image.load()
    factor = _reduction(image.size)
    if factor == 1:
        return image
    if image.mode not in _REDUCIBLE:
        image = image.convert("RGBA" if _has_alpha(image) else "RGB")
    return image.reduce(factor)


def _has_alpha(image: Image.Image) -> bool:
    """Whether the image has transparency (flattened onto white: a transparent pixel reads as white)."""
    return image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)


def _reduction(size: tuple[int, int]) -> int:
    """The smallest integer factor that brings an image of `size` within WORK_PIXELS."""
    width, height = size
    factor = max(1, math.ceil(math.sqrt(width * height / WORK_PIXELS)))
    while math.ceil(width / factor) * math.ceil(height / factor) > WORK_PIXELS:
        factor += 1
    return factor


def _from_array(array: np.ndarray, max_pixels: int, min_side: int) -> np.ndarray:
    """Accept HxW, HxWx1, HxWx3 or HxWx4 arrays of uint8, or of floats in [0, 1]."""
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if not (array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (3, 4))):
        raise InvalidImageError(
            f"image array has shape {array.shape}; expected HxW, HxWx3 (RGB) or HxWx4 (RGBA)"
        )
    _check_size(array.shape[1], array.shape[0], max_pixels, min_side, "the image array")
    if array.dtype == np.uint8:
        pixels = array
    elif np.issubdtype(array.dtype, np.floating):
        if not np.isfinite(array).all() or array.min() < 0.0 or array.max() > 1.0:
            raise InvalidImageError("float image array must hold finite values in [0, 1]")
        pixels = np.rint(array * 255.0).astype(np.uint8)
    else:
        raise InvalidImageError(f"image array has dtype {array.dtype}; expected uint8 or float in [0, 1]")
    if pixels.ndim == 3 and pixels.shape[2] == 3 and pixels.shape[0] * pixels.shape[1] <= WORK_PIXELS:
        return np.ascontiguousarray(pixels)
    return _from_pil(Image.fromarray(np.ascontiguousarray(pixels)), max_pixels, min_side, "the image array",
                     owned=True)


def _check_size(width: int, height: int, max_pixels: int, min_side: int, what: str) -> None:
    """Refuse images over the pixel budget or with a side too short to hold a usable face or palm."""
    if width * height > max_pixels:
        raise ImageTooLargeError(f"{what} is {width}×{height} ({width * height / 1e6:.1f} Mpx), "
                                 f"over the limit of {max_pixels / 1e6:g} Mpx")
    if min(width, height) < min_side:
        raise ImageTooSmallError(f"{what} is {width}×{height}; both sides must be at least {min_side} pixels")
