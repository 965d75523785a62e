"""Turn whatever a caller hands us (path, bytes, array, PIL image) into one safe RGB uint8 array.

A file or bytes are decoded within a memory budget known before any pixel is decoded. The header is read
first: over MAX_PIXELS is too large, and a large image claimed by a file far too small to hold it is a bomb.
Then the peak memory the decode will take is worked out from the header (size, mode, format; for a JPEG its
frame and first scan) and a file over PEAK_BYTES is refused, not decoded. A JPEG over WORK_PIXELS is decoded
at 1/2, 1/4 or 1/8 scale inside libjpeg (draft mode); every other format is decoded whole, then turned into
RGB and reduced by an integer factor a band of rows at a time, so no full-size copy is made beside it. At
most DECODES_AT_ONCE images are decoded at one time in the process. Every refusal is an InvalidImageError
subclass that names its reason (modalities.errors).

The budget. PEAK_BYTES (250 MB) is what one upload may cost the shared demo process at its peak, every copy
included; with DECODES_AT_ONCE (2, one per core) decodes at a time, a crowd of uploads costs at most 500 MB.
The encoders need far less than a photo holds: SCRFD detects on a 640 px input and a face of 80 px is enough
for dlib's detector, so WORK_PIXELS (16 Mpx, room for a small face in a large photo) is the most any encoder
gets. Pillow holds RGB and RGBA at 4 bytes a pixel (L and P at 1), and has no reduced decode but JPEG's, so an
8000 x 8000 RGBA PNG is 256 MB in its first buffer alone: refused. The largest RGB(A) PNG taken is ~47 Mpx
(7936 x 5952: 189 MB decoded, 35 MB of reduced RGB beside it, a band's copies; 232 MB measured). A baseline
JPEG of 64 Mpx costs 64 MB decoded at 1/2 scale; a progressive one also holds its full-size coefficients (2
bytes a sample), which scaling does not shrink: it is taken up to ~56 Mpx at 4:2:0, ~32 Mpx at 4:4:4. libwebp
and libtiff hold copies of their own (_BUFFERS): a WebP or TIFF is taken up to ~14 Mpx.
Images and arrays that code in this process hands in are its memory already: they are only loaded and
converted, in bands, under the same bound on decodes at once.
"""

from __future__ import annotations

import io
import math
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from PIL import Image, UnidentifiedImageError

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
PEAK_BYTES = 250_000_000  # the most memory decoding one file may take at its peak, every copy included
DECODES_AT_ONCE = 2  # images decoded at one time in this process (one per core); the others wait their turn
MIN_SIDE = 32  # pixels; a shorter side cannot hold a usable face or palm
BOMB_RATIO = 1_000  # pixels per file byte past which a large image is a bomb (a phone photo has < 10)
MAX_FILE_BYTES = 32 * 1024 * 1024  # the largest image file the page and the API take (a 50 Mpx JPEG: 10-25 MB)
_WHITE = (255, 255, 255)
_HEAD = 1024  # bytes sniffed for a format Pillow does not read
# Photo formats only: Pillow's other plugins (EPS runs Ghostscript, PSD, ICNS, ...) never see a probe.
FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "TIFF", "GIF")
FORMATS_TAKEN = f"{', '.join(FORMATS[:-1])} or {FORMATS[-1]}"  # the one wording of FORMATS in every message
Image.init()  # every plugin registered now: Pillow's lazy first registration races between threads
_FTYP_BRANDS = {b"heic": "HEIC", b"heix": "HEIC", b"hevc": "HEIC", b"hevx": "HEIC", b"heim": "HEIC",
                b"heis": "HEIC", b"mif1": "HEIF", b"msf1": "HEIF", b"avif": "AVIF", b"avis": "AVIF"}
_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16B": 2, "I;16L": 2, "I;16N": 2}  # Pillow's bytes a pixel; else 4
# Image-sized buffers a decoder holds at its peak, the image it fills included (measured, Pillow 12): libwebp's
# canvas, frame and their Python copy; libtiff's strip or tile (up to the whole image), JPEG compression's
# coefficients and the file read whole; a run-length BMP's bytes before they are copied in.
_BUFFERS = {"WEBP": 4, "TIFF": 4, "BMP": 2}
_BAND_PIXELS = 1 << 19  # decoded pixels turned into RGB at a time: a band's copies take a few MB
_SLACK = 24_000_000  # bytes past the estimate: a band's copies, the decoders' own state, the allocator's overhead
_SEQUENTIAL = (0xC0, 0xC1, 0xC9)  # JPEG frames libjpeg decodes a block row at a time (when a scan holds them all)
_SCALABLE = (*_SEQUENTIAL, 0xC2, 0xCA)  # the DCT frames, which libjpeg decodes at 1/2-1/8 scale (lossless ones not)
_STANDALONE = (0x00, 0x01, *range(0xD0, 0xDA))  # JPEG markers without a length (and a stuffed 0xFF 0x00)
_ORIENTATION = 0x0112  # the EXIF tag saying how to turn the stored pixels upright
_UPRIGHT: dict[int, Callable[[np.ndarray], np.ndarray]] = {  # that turn for each value, as ImageOps.exif_transpose
    2: lambda a: a[:, ::-1], 3: lambda a: a[::-1, ::-1], 4: lambda a: a[::-1], 5: lambda a: a.transpose(1, 0, 2),
    6: lambda a: np.rot90(a, -1), 7: lambda a: a[::-1, ::-1].transpose(1, 0, 2), 8: lambda a: np.rot90(a),
}
_DECODING = threading.BoundedSemaphore(DECODES_AT_ONCE)


def load_image(src: Any, *, max_pixels: int = MAX_PIXELS, min_side: int = MIN_SIDE) -> np.ndarray:
    """Return `src` as a C-contiguous HxWx3 uint8 RGB array of at most WORK_PIXELS pixels, or raise
    InvalidImageError (a subclass when the reason is size, format or a bomb) saying why."""
    if isinstance(src, Image.Image):
        return _from_pil(src, max_pixels, min_side, "the image")
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
    """Open the header only, refuse what is unreadable, a bomb, out of bounds or over PEAK_BYTES, then decode."""
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
            raise InvalidImageError(f"{what} is not an image of a kind taken here ({FORMATS_TAKEN})") from None
        raise InvalidImageError(f"{what} cannot be opened as an image: {exc}") from None
    with image:
        pixels = image.width * image.height
        if pixels > WORK_PIXELS and pixels > BOMB_RATIO * size:
            raise ImageBombError(f"{what} claims {image.width}×{image.height} pixels in only {size:,} bytes; "
                                 "it was not decoded")
        _check_size(image.width, image.height, max_pixels, min_side, what)
        scale, peak = _plan(image, stream)
        if peak > PEAK_BYTES:
            raise ImageTooLargeError(f"{what} is a {image.width}×{image.height} {image.format} "
                                     f"({pixels / 1e6:.1f} Mpx) that would take {peak / 1e6:.0f} MB to decode, over "
                                     f"the {PEAK_BYTES / 1e6:.0f} MB an image may use; it was not decoded "
                                     "(a JPEG is decoded downscaled: send the photo as a JPEG, or smaller)")
        return _pixels(image, what, scale=scale, owned=True)


def _plan(image: Image.Image, stream: BinaryIO) -> tuple[int, int]:
    """(JPEG draft scale, peak bytes) from the header: the decoder's own peak, or the image beside its RGB after."""
    scale, coefficients = 1, 0
    if image.format in ("JPEG", "MPO"):
        scalable, whole = _jpeg_layout(stream)
        while scalable and scale < min(_reduction(image.size), 8):
            scale *= 2
        if whole:
            coefficients = _coefficient_bytes(image)
    width, height = -(-image.width // scale), -(-image.height // scale)
    held = width * height * _BYTES.get(image.mode, 4)
    factor = _reduction((width, height))
    output = 3 * -(-width // factor) * -(-height // factor)
    return scale, max(held * _BUFFERS.get(image.format, 1) + coefficients, held + output) + _SLACK


def _jpeg_layout(stream: BinaryIO) -> tuple[bool, bool]:
    """(scalable, whole coefficients kept) for a JPEG, from its markers up to the first scan as libjpeg reads them:
    a progressive frame or a first scan without every component keeps them whole; the unexpected is the worst."""
    stream.seek(2)
    frame = components = 0
    while byte := stream.read(1):
        if byte != b"\xff":
            continue  # bytes between segments, which libjpeg skips too
        marker = stream.read(1)
        while marker == b"\xff":  # fill bytes
            marker = stream.read(1)
        if not marker or marker[0] in _STANDALONE:
            continue
        start = stream.tell()
        length = int.from_bytes(stream.read(2), "big")
        if marker[0] == 0xDA:  # the first scan: how many components it holds
            scan = stream.read(1)
            return frame in _SCALABLE, frame not in _SEQUENTIAL or not scan or scan[0] < components
        if 0xC0 <= marker[0] <= 0xCF and marker[0] not in (0xC4, 0xC8, 0xCC) and not frame:
            header = stream.read(6)
            frame, components = marker[0], header[5] if len(header) == 6 else 0
        stream.seek(start + length)
    return False, True


def _coefficient_bytes(image: Image.Image) -> int:
    """Bytes of libjpeg's whole-image coefficients: two a sample at full size, whatever scale it decodes at."""
    hmax = max((h for _, h, _, _ in image.layer), default=1)
    vmax = max((v for _, _, v, _ in image.layer), default=1)
    return sum(2 * math.ceil(image.width * h / hmax) * math.ceil(image.height * v / vmax)
               for _, h, v, _ in image.layer)


def _unreadable_format(head: bytes) -> str | None:
    """The name of an image format Pillow does not read here, from a file's first bytes; None if not one."""
    if head[4:8] == b"ftyp":
        return _FTYP_BRANDS.get(head[8:12])
    if head.startswith((b"\xff\x0a", b"\x00\x00\x00\x0cJXL \r\n\x87\n")):
        return "JPEG XL"
    return "SVG" if b"<svg" in head.lower() else None


def _from_pil(image: Image.Image, max_pixels: int, min_side: int, what: str) -> np.ndarray:
    """A caller's PIL image, loaded (not drafted: it stays as given) and converted like a decoded one."""
    _check_size(image.width, image.height, max_pixels, min_side, what)
    return _pixels(image, what, scale=1, owned=False)


def _pixels(image: Image.Image, what: str, *, scale: int, owned: bool) -> np.ndarray:
    """`image` (a JPEG at 1/`scale`) decoded as one of DECODES_AT_ONCE at most, as upright RGB within WORK_PIXELS;
    one of ours is closed, its full-size pixels freed, before the RGB is turned upright."""
    try:
        with _DECODING:
            if scale > 1:
                image.draft(None, (image.width // scale, image.height // scale))
            image.load()
            width, height = image.size
            rgb = _rgb(lambda top, bottom: image.crop((0, top, width, bottom)), image.size, _reduction(image.size))
            upright = _UPRIGHT.get(image.getexif().get(_ORIENTATION))
            if owned:
                image.close()
            return rgb if upright is None else np.ascontiguousarray(upright(rgb))
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise CorruptImageError(f"{what} is corrupt or truncated: {exc}") from None


def _rgb(band: Callable[[int, int], Image.Image], size: tuple[int, int], factor: int) -> np.ndarray:
    """The rows `band(top, bottom)` gives as RGB reduced by `factor`, a band at a time: no full-size copy is made."""
    width, height = size
    out = np.empty((-(-height // factor), -(-width // factor), 3), np.uint8)
    rows = max(1, _BAND_PIXELS // (width * factor)) * factor
    for top in range(0, height, rows):
        part = _flattened(band(top, min(top + rows, height)))
        if factor > 1:
            part = part.reduce(factor)
        out[top // factor:top // factor + part.height] = np.asarray(part)
    return out


def _flattened(image: Image.Image) -> Image.Image:
    """`image` in RGB, any transparency flattened onto white (a transparent pixel reads as white)."""
    if not _has_alpha(image):
        return image if image.mode == "RGB" else image.convert("RGB")
    rgba = image.convert("RGBA")
    flat = Image.new("RGB", rgba.size, _WHITE)
    flat.paste(rgba, mask=rgba.getchannel("A"))
    return flat


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
    height, width = pixels.shape[:2]
    if pixels.ndim == 3 and pixels.shape[2] == 3 and height * width <= WORK_PIXELS:
        return np.ascontiguousarray(pixels)
    with _DECODING:
        return _rgb(lambda top, bottom: Image.fromarray(pixels[top:bottom]), (width, height),
                    _reduction((width, height)))


def _check_size(width: int, height: int, max_pixels: int, min_side: int, what: str) -> None:
    """Refuse images over the pixel budget or with a side too short to hold a usable face or palm."""
    if width * height > max_pixels:
        raise ImageTooLargeError(f"{what} is {width}×{height} ({width * height / 1e6:.1f} Mpx), "
                                 f"over the limit of {max_pixels / 1e6:g} Mpx")
    if min(width, height) < min_side:
        raise ImageTooSmallError(f"{what} is {width}×{height}; both sides must be at least {min_side} pixels")
