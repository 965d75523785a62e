"""Real photos are welcome, no upload costs more than 250 MB, and a refusal says why.

A 50 Mpx phone photo (a JPEG with its EXIF orientation) or a 40 Mpx PNG is decoded downscaled within
PEAK_BYTES and matches its person; an image too large (by its size, or by what decoding it would take),
too small, not an image, in a format the decoder does not read, or a bomb (a small file claiming huge
dimensions) is refused before decoding, with its own title and reason, by the engine, REST, MCP and the
page's controller alike. Only DECODES_AT_ONCE images are decoded at one time. Every image is made here;
the large ones once per module.
"""

from __future__ import annotations

import base64
import io
import struct
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import gradio as gr
import httpx
import numpy as np
import pytest
from PIL import Image, ImageFile, ImageOps

from biomem import BioMemory
from biomem.engine.keys import create_key
from biomem.errors import (
    CorruptImageError,
    ImageBombError,
    ImageTooLargeError,
    ImageTooSmallError,
    InvalidImageError,
    UnsupportedImageFormatError,
)
from biomem.server.probes import MAX_BODY
from biomem.ui import Controller
from biomem.ui.launch import PAGE_OPTIONS
from biomem.ui.messages import friendly
from modalities import images
from modalities.images import (
    DECODES_AT_ONCE,
    FORMATS_TAKEN,
    MAX_FILE_BYTES,
    MAX_PIXELS,
    PEAK_BYTES,
    WORK_PIXELS,
    load_image,
)

from .shared import ANA, DAN, png, rest_service

PHONE = (8160, 6144)  # a 50 Mpx main-camera photo (8160 x 6144 = 50.1 Mpx), taken as a JPEG
PNG_PHOTO = (7296, 5472)  # a 40 Mpx photo saved as PNG (a 50 Mpx PNG would take 262 MB to decode: refused)
RGBA = b"\x10\x80\xf0\x80"  # one half-transparent blue pixel
ROOT = Path(__file__).resolve().parents[1]


def phone_photo(face: np.ndarray, fmt: str) -> bytes:
    """A 50 Mpx JPEG (or 40 Mpx PNG) photo of `face` at a selfie's size on a smooth background, saved as a phone
    would: a JPEG stores landscape pixels and an EXIF orientation (6: turn 90° clockwise) for a portrait."""
    width, height = PNG_PHOTO if fmt == "PNG" else PHONE[::-1]
    background = Image.linear_gradient("L").resize((width, height), Image.Resampling.BILINEAR).convert("RGB")
    side = min(width, height) * 2 // 5
    background.paste(Image.fromarray(face).resize((side, side), Image.Resampling.BICUBIC),
                     ((width - side) // 2, (height - side) // 3))
    buffer = io.BytesIO()
    if fmt == "JPEG":
        exif = Image.Exif()
        exif[0x0112] = 6
        background.transpose(Image.Transpose.ROTATE_90).save(buffer, format="JPEG", quality=90, exif=exif)
    else:
        background.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def chunk(kind: bytes, data: bytes) -> bytes:
    """One PNG chunk: length, type, data, CRC."""
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def flat_png(width: int, height: int, pixel: bytes = b"\xff\xff\xff", level: int = 1) -> bytes:
    """A real PNG of width x height (RGB, or RGBA for a 4-byte pixel) in one colour but for a grey ramp over its
    first 256 rows, compressed row by row (never whole in memory): a few hundred KB however large at level 9."""
    packer = zlib.compressobj(level)
    rows = (b"\x00" + (bytes([y] * len(pixel)) if y < 256 else pixel) * width for y in range(height))
    data = b"".join(packer.compress(row) for row in rows) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 6 if len(pixel) == 4 else 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def forged_png(width: int, height: int) -> bytes:
    """An 8 x 8 PNG whose header claims width x height: a bomb of a few hundred bytes."""
    small = png(np.zeros((8, 8), np.uint8))
    return small[:8] + chunk(b"IHDR", struct.pack(">II", width, height) + small[24:29]) + small[33:]


def cut_short() -> bytes:
    """The first half of a real JPEG, as an interrupted upload leaves it."""
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (96, 96, 3), np.uint8)).save(buffer, format="JPEG")
    return buffer.getvalue()[: len(buffer.getvalue()) // 2]


HEIC = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(200)  # an iPhone photo's first box

# case: (file, error class, title, words the message must hold)
REFUSED = {
    "too large": (flat_png(9000, 8000), ImageTooLargeError, "Image too large", ["9000×8000", "72.0 Mpx", "64 Mpx"]),
    "too small": (png(np.full((20, 200, 3), 90, np.uint8)), ImageTooSmallError, "Image too small",
                  ["200×20", "at least 32 pixels"]),
    "not an image": (b"Dear diary, today I uploaded a text file.", InvalidImageError, "Not a usable image",
                     ["not an image", "JPEG, PNG, WEBP, BMP, TIFF or GIF"]),
    "HEIC": (HEIC, UnsupportedImageFormatError, "Unsupported image format", ["HEIC", "JPEG"]),
    "cut short": (cut_short(), CorruptImageError, "Damaged image", ["cut short or damaged"]),
    "bomb": (forged_png(100_000, 100_000), ImageBombError, "Image bomb refused", ["not decoded"]),
}


@pytest.fixture(scope="module")
def photos(faces) -> SimpleNamespace:
    return SimpleNamespace(jpeg=phone_photo(faces[ANA], "JPEG"), png=phone_photo(faces[ANA], "PNG"),
                           dan=phone_photo(faces[DAN], "JPEG"))


@pytest.fixture(scope="module")
def service(tmp_path_factory, text_encoder, face_encoder, faces, photos) -> Iterator[SimpleNamespace]:
    """Ana enrolled from a crop, Dan from his 50 Mpx photo; REST and MCP served with an agent key."""
    mem = BioMemory(tmp_path_factory.mktemp("images") / "m.db", text_model=text_encoder,
                    encoder=face_encoder, limits="off")
    ids = {"Ana": mem.enroll("Ana", [faces[ANA]]).id, "Dan": mem.enroll("Dan", [photos.dan]).id}
    key = create_key(mem.store, "agent", "agent")[0]
    with rest_service(mem, timeout=120, headers={"Authorization": f"Bearer {key}"}) as (_, http):
        yield SimpleNamespace(mem=mem, ids=ids, http=http)
    mem.close()




def upload(cache: Path, data: bytes, name: str) -> str:
    """A file where Gradio would put an upload: its own folder inside the cache."""
    (cache / name).mkdir()
    path = cache / name / name
    path.write_bytes(data)
    return str(path)


def search(service: SimpleNamespace, data: bytes) -> httpx.Response:
    return service.http.post("/v1/search", data={"query": "anything"},
                             files={"probe": ("photo", data, "application/octet-stream")})


def mcp_recall(service: SimpleNamespace, data: bytes) -> dict:
    """The MCP recall tool's result for an image probe, over raw JSON-RPC."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "recall", "arguments": {
        "query": "anything", "probe": {"data": base64.b64encode(data).decode(), "mime_type": "image/png"}}}}
    reply = service.http.post("/mcp", json=call, headers={"Accept": "application/json, text/event-stream"})
    assert reply.status_code == 200, reply.text
    return reply.json()["result"]


# ---- phone photos are accepted ------------------------------------------------------------------

def test_a_50_megapixel_photo_is_decoded_downscaled_and_upright(photos):
    for data in (photos.jpeg, photos.png):
        pixels = load_image(data)
        assert pixels.shape[0] * pixels.shape[1] <= WORK_PIXELS and pixels.shape[2] == 3
    assert load_image(photos.jpeg).shape == (4080, 3072, 3)  # JPEG at 1/2 scale in the decoder, turned upright
    assert load_image(photos.png).shape == (2736, 3648, 3)  # PNG reduced by 2 after decoding
    array = np.zeros((PHONE[1], PHONE[0], 3), np.uint8)
    assert load_image(array).shape == (3072, 4080, 3)  # a large array is reduced the same way
    given = Image.open(io.BytesIO(photos.jpeg))
    assert load_image(given).shape == (4080, 3072, 3) and given.size == PHONE  # a caller's image left as given


def test_phone_photos_match_their_person_in_the_engine(service, photos, faces):
    for data in (photos.jpeg, photos.png):
        assert service.mem.identify(data).identity == service.ids["Ana"]
    assert service.mem.identify(faces[DAN]).identity == service.ids["Dan"]  # enrolled from his photo


def test_phone_photos_match_over_rest_mcp_and_the_page(service, photos, cache):
    for data in (photos.jpeg, photos.png):
        reply = search(service, data)
        assert reply.status_code == 200 and reply.json()["gate"]["matched"], reply.text
        assert not mcp_recall(service, data).get("isError")
        answer = Controller(service.mem).ask("What do I know?", upload(cache, data, f"p{len(data)}"))
        assert answer["gate"]["matched"]
    assert not [path for path in cache.rglob("*") if path.is_file()]  # each upload read once and deleted


def test_a_photo_file_as_large_as_a_phone_s_fits_every_upload_limit(service, photos):
    assert PAGE_OPTIONS["max_file_size"] == MAX_FILE_BYTES >= 25 * 1024 * 1024
    assert MAX_BODY >= 4 * MAX_FILE_BYTES // 3 + 1024 * 1024  # one such photo as base64 JSON, and its fields
    large = photos.jpeg + bytes(MAX_FILE_BYTES - len(photos.jpeg))  # a JPEG ignores bytes after its end
    reply = search(service, large)
    assert reply.status_code == 200 and reply.json()["gate"]["matched"], reply.text
    body = {"query": "anything", "probe": {"data": base64.b64encode(large).decode(), "mime_type": "image/jpeg"}}
    assert service.http.post("/v1/search", json=body).json()["gate"]["matched"]


PEAK = """
import re, sys
from modalities.images import load_image
def high_water():
    return int(re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
data = open(sys.argv[1], "rb").read()
before = high_water()
try:
    outcome = "x".join(map(str, load_image(data).shape))
except Exception as exc:
    outcome = type(exc).__name__
print(outcome, high_water() - before)
"""


def peak(tmp_path: Path, data: bytes) -> tuple[str, int]:
    """What decoding `data` in a fresh process gave (its shape, or the error's name) and how many bytes its peak
    resident memory grew by meanwhile. RSS, since tracemalloc cannot see Pillow's C buffers; and the process's own
    high-water mark (VmHWM), since ru_maxrss keeps the RSS of the process it was forked from (pytest's, torch and
    all), which hides any smaller peak."""
    path = tmp_path / "image"
    path.write_bytes(data)
    out = subprocess.run([sys.executable, "-c", PEAK, str(path)], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    return out[0], int(out[1])


def test_the_attacker_s_flat_64_megapixel_rgba_png_is_refused_before_decoding(tmp_path):
    """256 MB of RGBA pixels in a 255 KB file (too many bytes for a bomb) once cost 550 MB a request: now the
    header says what the decode would take, and it is refused before a pixel is decoded."""
    data = flat_png(8000, 8000, RGBA, level=9)
    assert len(data) < 300_000
    outcome, grown = peak(tmp_path, data)
    assert outcome == "ImageTooLargeError" and grown < 10_000_000, (outcome, grown)
    with mock.patch.object(ImageFile.ImageFile, "load", side_effect=AssertionError("decoded")), \
            pytest.raises(ImageTooLargeError, match=r"8000×8000 PNG \(64.0 Mpx\) that would take \d+ MB to decode, "
                                                    r"over the 250 MB an image may use; it was not decoded"):
        load_image(data)


def test_the_largest_png_taken_decodes_within_250_mb(tmp_path):
    """A 47 Mpx RGBA PNG is taken: decoded whole (189 MB), turned into RGB and halved a band at a time, its peak
    stays under PEAK_BYTES; an 8000 x 6000 one (48 Mpx) would not, and is refused."""
    outcome, grown = peak(tmp_path, flat_png(7936, 5952, RGBA, level=9))
    assert PEAK_BYTES == 250_000_000 and outcome == "2976x3968x3" and grown < PEAK_BYTES, (outcome, grown)
    with pytest.raises(ImageTooLargeError, match="over the 250 MB"):
        load_image(flat_png(8000, 6000, RGBA, level=9))


def test_a_large_jpeg_is_decoded_downscaled_in_its_decoder_and_matches_its_person(photos, face_encoder, faces,
                                                                                  tmp_path):
    """libjpeg decodes a 50 Mpx JPEG at 1/2 scale (draft): no full-size pixel is ever held, and the face in it is
    still its person's."""
    loaded = []
    real = ImageFile.ImageFile.load

    def load(image: ImageFile.ImageFile):  # noqa: ANN202 - Pillow's own return
        loaded.append(image.size)
        return real(image)

    with mock.patch.object(ImageFile.ImageFile, "load", load):
        pixels = load_image(photos.jpeg)
    assert loaded and set(loaded) == {(PHONE[0] // 2, PHONE[1] // 2)} and pixels.shape == (4080, 3072, 3)
    assert float(face_encoder.encode(pixels) @ face_encoder.encode(faces[ANA])) > 0.6
    outcome, grown = peak(tmp_path, photos.jpeg)
    assert outcome == "4080x3072x3" and grown < 150_000_000  # a full-size decode alone would be 200 MB


def test_a_progressive_jpeg_is_budgeted_with_its_full_size_coefficients():
    """libjpeg keeps a progressive JPEG's coefficients at full size (6 bytes a pixel at 4:4:4) whatever the scale
    it decodes at: a 36 Mpx progressive one is refused before decoding, the same photo as baseline is taken."""
    photo = Image.linear_gradient("L").resize((6000, 6000)).convert("RGB")
    baseline, progressive = io.BytesIO(), io.BytesIO()
    photo.save(baseline, "JPEG", quality=90, subsampling=0)
    photo.save(progressive, "JPEG", quality=90, subsampling=0, progressive=True)
    assert load_image(baseline.getvalue()).shape == (3000, 3000, 3)
    with mock.patch.object(ImageFile.ImageFile, "load", side_effect=AssertionError("decoded")), \
            pytest.raises(ImageTooLargeError, match="6000×6000 JPEG .* it was not decoded"):
        load_image(progressive.getvalue())


def test_no_more_than_decodes_at_once_images_are_decoded_at_one_time(monkeypatch):
    """Eight uploads at once: DECODES_AT_ONCE of them decode, the others wait their turn at the semaphore (so
    eight cannot each hold their peak together), and every one is decoded in the end."""
    inside = most = 0
    lock, go = threading.Lock(), threading.Event()
    entered, waiting = threading.Semaphore(0), threading.Semaphore(0)
    convert = images._rgb

    def counted(*args):  # noqa: ANN202 - images._rgb's own signature
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        entered.release()
        assert go.wait(60)
        try:
            return convert(*args)
        finally:
            with lock:
                inside -= 1

    class Watched(threading.BoundedSemaphore):
        """The decode semaphore, telling the test when a decode finds it full and waits."""

        def __enter__(self) -> bool:
            if self.acquire(blocking=False):
                return True
            waiting.release()
            return self.acquire()

    monkeypatch.setattr(images, "_DECODING", Watched(DECODES_AT_ONCE))
    monkeypatch.setattr(images, "_rgb", counted)
    uploads = [png(np.full((64, 64, 3), 10 * n, np.uint8)) for n in range(8)]
    with ThreadPoolExecutor(len(uploads)) as pool:
        decoding = [pool.submit(load_image, data) for data in uploads]
        assert all(entered.acquire(timeout=60) for _ in range(DECODES_AT_ONCE))
        assert all(waiting.acquire(timeout=60) for _ in range(len(uploads) - DECODES_AT_ONCE))
        assert inside == DECODES_AT_ONCE  # every other upload is waiting, none decoding
        go.set()
        pixels = [future.result(timeout=60) for future in decoding]
    assert DECODES_AT_ONCE == most == 2
    assert [int(p[0, 0, 0]) for p in pixels] == [10 * n for n in range(8)]


def test_band_by_band_conversion_gives_the_whole_image_s_pixels(monkeypatch):
    """Transparency flattened onto white, then averaged by the reduction factor, a band of rows at a time: the
    same pixels as the whole image flattened and reduced at once, for every mode with or without alpha."""
    monkeypatch.setattr(images, "WORK_PIXELS", 10_000)
    monkeypatch.setattr(images, "_BAND_PIXELS", 2_000)
    rng = np.random.default_rng(3)
    rgba = Image.fromarray(rng.integers(0, 256, (200, 301, 4), np.uint8))
    palette = rgba.convert("RGB").quantize(16)
    palette.info["transparency"] = 3
    for image in (rgba, rgba.convert("RGB"), rgba.convert("L"), rgba.convert("LA"), palette):
        whole = image.convert("RGBA")
        flat = Image.new("RGB", image.size, (255, 255, 255))
        flat.paste(whole, mask=whole.getchannel("A"))
        expected = np.asarray(flat.reduce(3))  # 301 x 200 is 6 times WORK_PIXELS: a factor of 3
        assert np.array_equal(load_image(image), expected), image.mode
        buffer = io.BytesIO()
        image.save(buffer, "PNG")
        assert np.array_equal(load_image(buffer.getvalue()), expected), image.mode


def test_every_exif_orientation_is_turned_upright_as_pillow_turns_it():
    photo = Image.fromarray(np.random.default_rng(4).integers(0, 256, (40, 56, 3), np.uint8))
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        buffer = io.BytesIO()
        photo.save(buffer, "JPEG", exif=exif, quality=95)
        expected = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(buffer.getvalue()))))
        assert np.array_equal(load_image(buffer.getvalue()), expected), orientation


# ---- what is refused says why -------------------------------------------------------------------

@pytest.mark.parametrize("case", REFUSED)
def test_the_engine_refuses_with_the_precise_error(service, case):
    data, error, _, _ = REFUSED[case]
    for action in (lambda: service.mem.probe(data), lambda: service.mem.enroll("Carol", [data])):
        with pytest.raises(InvalidImageError) as caught:
            action()
        assert type(caught.value) is error


@pytest.mark.parametrize("case", REFUSED)
def test_rest_and_mcp_say_why(service, case):
    data, error, title, words = REFUSED[case]
    reply = search(service, data)
    assert reply.status_code == 422
    refusal = reply.json()["error"]
    assert (refusal["type"], refusal["title"]) == (error.__name__, title)
    assert all(word in refusal["message"] for word in words), refusal["message"]
    result = mcp_recall(service, data)
    text = result["content"][0]["text"]
    assert result["isError"] and text.startswith(title) and all(word in text for word in words), text


@pytest.mark.parametrize("case", REFUSED)
def test_the_page_says_why(service, cache, case):
    data, _, title, words = REFUSED[case]
    with pytest.raises(gr.Error) as caught:
        friendly(Controller(service.mem).ask)("What do I know?", upload(cache, data, "probe"))
    assert caught.value.title == title and caught.value.message.startswith(f"{title} — ")
    assert all(word in caught.value.message for word in words), caught.value.message
    assert not [path for path in cache.rglob("*") if path.is_file()]


@pytest.mark.parametrize("size", [(100_000, 100_000), (10_000, 7_000), (6_000, 6_000)],
                         ids=["over-pillow-s-limit", "over-the-limit", "under-the-limit"])
def test_a_small_file_claiming_a_huge_image_is_never_decoded(size):
    with mock.patch.object(ImageFile.ImageFile, "load", side_effect=AssertionError("decoded")), \
            pytest.raises(ImageBombError, match="not decoded"):
        load_image(forged_png(*size))


def test_8000_by_8000_is_the_largest_image_taken():
    """The visitor's 8000 x 8000 photo fits as a JPEG (decoded at 1/2 scale); one pixel more is refused from its
    header, whatever the format."""
    assert MAX_PIXELS == 64_000_000 and 8000 * 8000 <= MAX_PIXELS
    with pytest.raises(ImageTooLargeError, match="over the limit of 64 Mpx"):
        load_image(flat_png(8001, 8000))
    photo = io.BytesIO()
    Image.new("RGB", (8000, 8000), (90, 120, 150)).save(photo, "JPEG")
    assert load_image(photo.getvalue()).shape == (4000, 4000, 3)


def test_only_photo_formats_are_opened():
    """Pillow's other plugins never see a probe: an EPS (which Ghostscript would render), an icon or a text
    file is refused from its header, with the formats that are taken."""
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 100 100\nshowpage\n"
    icon = io.BytesIO()
    Image.new("RGB", (64, 64), (90, 90, 90)).save(icon, "ICO")
    assert FORMATS_TAKEN == "JPEG, PNG, WEBP, BMP, TIFF or GIF"
    for data in (eps, icon.getvalue(), REFUSED["not an image"][0]):
        with mock.patch.object(ImageFile.ImageFile, "load", side_effect=AssertionError("decoded")), \
                pytest.raises(InvalidImageError, match=r"not an image .*\(JPEG, PNG, WEBP, BMP, TIFF or GIF\)"):
            load_image(data)
    for kind in ("JPEG", "PNG", "WEBP", "BMP", "TIFF", "GIF"):
        photo = io.BytesIO()
        Image.new("RGB", (64, 64), (90, 90, 90)).save(photo, kind)
        assert load_image(photo.getvalue()).shape == (64, 64, 3)
