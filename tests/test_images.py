"""Real photos are welcome and a refusal says why.

A 50 Mpx phone photo (JPEG with its EXIF orientation, or PNG) is decoded downscaled within a
bounded memory and matches its person; an image too large, too small, not an image, in a format
the decoder does not read, or a bomb (a small file claiming huge dimensions, never decoded) is
refused with its own title and reason by the engine, REST, MCP and the page's controller alike.
Every image is made here; the large ones once per module.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import gradio as gr
import httpx
import numpy as np
import pytest
from PIL import Image, ImageFile

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
from biomem.server import create_app, served
from biomem.server.probes import MAX_BODY
from biomem.settings import Settings
from biomem.ui import Controller
from biomem.ui.launch import PAGE_OPTIONS
from biomem.ui.messages import friendly
from modalities.images import MAX_FILE_BYTES, MAX_PIXELS, WORK_PIXELS, load_image

PHONE = (8160, 6144)  # a 50 Mpx main-camera photo (8160 x 6144 = 50.1 Mpx)
ANA, BEN = 0, 3  # face_crops() people: Ana is enrolled from a plain crop, Ben from his 50 Mpx photo
ROOT = Path(__file__).resolve().parents[1]


def png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def phone_photo(face: np.ndarray, fmt: str) -> bytes:
    """A 50 Mpx photo of `face` at a selfie's size on a smooth background, saved as a phone would:
    a JPEG stores landscape pixels and an EXIF orientation (6: turn 90° clockwise) for a portrait."""
    width, height = PHONE if fmt == "PNG" else PHONE[::-1]
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


def white_png(width: int, height: int) -> bytes:
    """A real white RGB PNG of width x height, compressed row by row (never whole in memory)."""
    packer = zlib.compressobj(1)
    row = b"\x00" + b"\xff" * (3 * width)
    data = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
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
    "too large": (white_png(9000, 8000), ImageTooLargeError, "Image too large", ["9000×8000", "72.0 Mpx", "64 Mpx"]),
    "too small": (png(np.full((20, 200, 3), 90, np.uint8)), ImageTooSmallError, "Image too small",
                  ["200×20", "at least 32 pixels"]),
    "not an image": (b"Dear diary, today I uploaded a text file.", InvalidImageError, "Not a usable image",
                     ["not an image"]),
    "HEIC": (HEIC, UnsupportedImageFormatError, "Unsupported image format", ["HEIC", "JPEG"]),
    "cut short": (cut_short(), CorruptImageError, "Damaged image", ["cut short or damaged"]),
    "bomb": (forged_png(100_000, 100_000), ImageBombError, "Image bomb refused", ["not decoded"]),
}


@pytest.fixture(scope="module")
def photos(faces) -> SimpleNamespace:
    return SimpleNamespace(jpeg=phone_photo(faces[ANA], "JPEG"), png=phone_photo(faces[ANA], "PNG"),
                           ben=phone_photo(faces[BEN], "JPEG"))


@pytest.fixture(scope="module")
def service(tmp_path_factory, text_encoder, face_encoder, faces, photos) -> Iterator[SimpleNamespace]:
    """Ana enrolled from a crop, Ben from his 50 Mpx photo; REST and MCP served with an agent key."""
    mem = BioMemory(tmp_path_factory.mktemp("images") / "m.db", text_model=text_encoder,
                    encoder=face_encoder, limits="off")
    ids = {"Ana": mem.enroll("Ana", [faces[ANA]]).id, "Ben": mem.enroll("Ben", [photos.ben]).id}
    key = create_key(mem.store, "agent", "agent")[0]
    app = create_app(mem, dataclasses.replace(Settings.from_env(), host="127.0.0.1"))
    with served(app) as url, httpx.Client(base_url=url, timeout=120,
                                          headers={"Authorization": f"Bearer {key}"}) as http:
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
    assert load_image(photos.png).shape == (3072, 4080, 3)  # PNG reduced by 2 after decoding
    array = np.zeros((PHONE[1], PHONE[0], 3), np.uint8)
    assert load_image(array).shape == (3072, 4080, 3)  # a large array is reduced the same way
    given = Image.open(io.BytesIO(photos.jpeg))
    assert load_image(given).shape == (4080, 3072, 3) and given.size == PHONE  # a caller's image left as given


def test_phone_photos_match_their_person_in_the_engine(service, photos, faces):
    for data in (photos.jpeg, photos.png):
        assert service.mem.identify(data).identity == service.ids["Ana"]
    assert service.mem.identify(faces[BEN]).identity == service.ids["Ben"]  # enrolled from his photo


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
import resource, sys
from modalities.images import load_image
data = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
load_image(data)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""


def peak(tmp_path: Path, data: bytes) -> float:
    """Growth of the peak resident memory (MB) while decoding `data`, in a fresh process."""
    path = tmp_path / "image"
    path.write_bytes(data)
    out = subprocess.run([sys.executable, "-c", PEAK, str(path)], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return float(out)


def test_decoding_stays_within_its_memory_bound(photos, tmp_path):
    assert peak(tmp_path, photos.jpeg) < 150  # decoded at 1/2 scale: never one full-size copy (150 MB)
    assert peak(tmp_path, photos.png) < 300  # decoded whole once (150 MB), freed once reduced


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
    assert MAX_PIXELS == 64_000_000 and 8000 * 8000 <= MAX_PIXELS  # the visitor's 8000 x 8000 photo fits
    with pytest.raises(ImageTooLargeError, match="over the limit of 64 Mpx"):
        load_image(white_png(8001, 8000))
    assert load_image(white_png(8000, 8000)).shape == (4000, 4000, 3)


def test_only_photo_formats_are_opened():
    """Pillow's other plugins never see a probe: an EPS (which Ghostscript would render) or an icon is
    refused from its header, with the formats that are taken."""
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 100 100\nshowpage\n"
    icon = io.BytesIO()
    Image.new("RGB", (64, 64), (90, 90, 90)).save(icon, "ICO")
    for data in (eps, icon.getvalue()):
        with mock.patch.object(ImageFile.ImageFile, "load", side_effect=AssertionError("decoded")), \
                pytest.raises(InvalidImageError, match=r"not an image .*\(JPEG, PNG, WEBP, BMP, TIFF or GIF\)"):
            load_image(data)
    for kind in ("JPEG", "PNG", "WEBP", "BMP", "TIFF", "GIF"):
        photo = io.BytesIO()
        Image.new("RGB", (64, 64), (90, 90, 90)).save(photo, kind)
        assert load_image(photo.getvalue()).shape == (64, 64, 3)
