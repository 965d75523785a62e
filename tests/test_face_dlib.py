"""The dlib face encoder with its real model: shape, separation at the default τ, refusals."""

from __future__ import annotations

import io
import itertools
import re
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import modalities
from biomem.errors import (
    InvalidImageError,
    ModelUnavailableError,
    MultipleFacesError,
    NoFaceError,
)
from biomem.identity.samples import CROP_SIZE, augment, face_crops, group_photo_path
from modalities.face_dlib import DESCRIPTOR_FILE, DlibFaceEncoder
from modalities.images import load_image

from .shared import png

SEEDS = range(6)
TAU = DlibFaceEncoder.info.default_threshold


@pytest.fixture(scope="module")
def encoder() -> DlibFaceEncoder:
    return modalities.create("face-dlib")


@pytest.fixture(scope="module")
def people() -> list[np.ndarray]:
    return face_crops()


@pytest.fixture(scope="module")
def captures(encoder, people) -> list[list[np.ndarray]]:
    """Per person: embeddings of the crop and of its augmented captures the detector accepts.

    HOG is a frontal detector: a few tilted captures of the 3/4-profile face are refused with
    NoFaceError, which is the right answer (refuse rather than guess).
    """
    result = []
    for crop in people:
        embeddings = [encoder.encode(crop)]
        for seed in SEEDS:
            try:
                embeddings.append(encoder.encode(augment(crop, seed)))
            except NoFaceError:
                pass
        result.append(embeddings)
    return result


def test_registry_lists_info_without_loading_weights():
    info = modalities.info("face-dlib")
    assert "face-dlib" in modalities.names()
    assert (info.name, info.kind, info.dim) == ("face-dlib", "face", 128)
    assert 0.9 < info.default_threshold < 1.0


def test_every_test_face_holds_exactly_one_detectable_face(encoder, people):
    assert len(people) == 7
    assert all(len(encoder.detect(crop)) == 1 for crop in people)


def test_embedding_is_128d_unit_norm_float32_and_deterministic(encoder, people):
    first, again = encoder.encode(people[0]), encoder.encode(people[0].copy())
    assert first.shape == (128,) and first.dtype == np.float32
    assert np.linalg.norm(first) == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_array_equal(first, again)


def test_genuine_captures_score_above_default_tau(captures):
    assert all(len(embeddings) >= 4 for embeddings in captures)
    for embeddings in captures:
        for a, b in itertools.combinations(embeddings, 2):
            assert float(a @ b) >= TAU


def test_different_people_score_below_default_tau(captures):
    for first, second in itertools.combinations(captures, 2):
        for a, b in itertools.product(first, second):
            assert float(a @ b) < TAU


def test_group_photo_is_refused_as_ambiguous(encoder):
    assert len(encoder.detect(group_photo_path())) == 6
    with pytest.raises(MultipleFacesError, match="6 faces"):
        encoder.encode(group_photo_path())


@pytest.mark.parametrize("kind", ["blank", "noise"])
def test_image_without_face_raises_no_face(encoder, kind):
    shape = (CROP_SIZE, CROP_SIZE, 3)
    noise = np.random.default_rng(0).integers(0, 256, shape, np.uint8)
    image = np.full(shape, 128, np.uint8) if kind == "blank" else noise
    with pytest.raises(NoFaceError):
        encoder.encode(image)


def test_large_image_is_detected_downscaled_and_boxes_map_back(encoder, people):
    factor = 8  # 2048 px, above max_detect_side: detection runs on a downscaled copy
    big = np.asarray(Image.fromarray(people[0]).resize((CROP_SIZE * factor,) * 2, Image.Resampling.BICUBIC))
    small_box = np.array(encoder.detect(people[0])[0])
    big_box = np.array(encoder.detect(big)[0])
    np.testing.assert_allclose(big_box, small_box * factor, atol=0.05 * big.shape[0])
    assert float(encoder.encode(big) @ encoder.encode(people[0])) >= TAU


def test_grayscale_and_rgba_inputs_work(encoder, people):
    colour = encoder.encode(people[1])
    gray = np.asarray(Image.fromarray(people[1]).convert("L"))
    rgba = np.dstack([people[1], np.full(people[1].shape[:2], 255, np.uint8)])
    assert float(encoder.encode(gray) @ colour) >= TAU
    assert float(encoder.encode(rgba) @ colour) >= TAU
    assert float(encoder.encode(png(rgba)) @ colour) >= TAU
    assert float(encoder.encode(gray.astype(np.float32) / 255) @ colour) >= TAU


def test_path_bytes_and_pil_inputs_agree(encoder, people, tmp_path):
    path = tmp_path / "face.png"
    path.write_bytes(png(people[2]))
    reference = encoder.encode(people[2])
    for source in (path, str(path), path.read_bytes(), Image.open(path)):
        np.testing.assert_array_equal(encoder.encode(source), reference)


def test_exif_orientation_is_applied(people):
    upright = people[3]
    buffer = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    Image.fromarray(np.rot90(upright, k=1)).save(buffer, format="PNG", exif=exif)
    loaded = load_image(buffer.getvalue())
    np.testing.assert_array_equal(loaded, upright)


def test_concurrent_calls_give_the_serial_result(encoder, people):
    expected = [encoder.encode(crop) for crop in people[:4]]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(encoder.encode, people[:4] * 2))
    for got, want in zip(results, expected * 2):
        np.testing.assert_array_equal(got, want)


def huge_png_header(width: int, height: int) -> bytes:
    """A tiny PNG whose IHDR claims width x height: decoding it would need gigabytes."""
    small = png(np.zeros((8, 8), np.uint8))
    ihdr = b"IHDR" + struct.pack(">II", width, height) + small[24:29]
    return small[:12] + ihdr + struct.pack(">I", zlib.crc32(ihdr)) + small[33:]


@pytest.mark.parametrize(
    ("make_source", "message"),
    [
        (lambda tmp: tmp / "notes.txt", "not an image"),
        (lambda tmp: _truncated_jpeg(), "truncated"),
        (lambda tmp: tmp / "missing.jpg", "not found"),
        (lambda tmp: np.zeros((64, 64, 2), np.uint8), "shape"),
        (lambda tmp: np.zeros((64, 64, 3), np.int64), "dtype"),
        (lambda tmp: np.full((64, 64, 3), 2.0), "[0, 1]"),
        (lambda tmp: np.zeros((20, 200, 3), np.uint8), "at least 32"),
        (lambda tmp: huge_png_header(10_000, 5_000), "10000×5000 pixels in only"),
        (lambda tmp: huge_png_header(20_000, 20_000), "claims more than 178,956,970 pixels"),
        (lambda tmp: b"", "empty"),
        (lambda tmp: 42, "unsupported image type"),
    ],
    ids=["text-file", "truncated-jpeg", "missing-path", "two-channels", "int64", "float-range",
         "too-small", "50-megapixel-header", "400-megapixel-header", "empty-bytes", "wrong-type"],
)
def test_unusable_inputs_raise_invalid_image(encoder, tmp_path, make_source, message):
    (tmp_path / "notes.txt").write_text("not a picture\n")
    with pytest.raises(InvalidImageError, match=re.escape(message)) as caught:
        encoder.encode(make_source(tmp_path))
    assert isinstance(caught.value, ValueError)


def _truncated_jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(face_crops()[0]).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()[: len(buffer.getvalue()) // 2]


def test_missing_model_file_names_the_file_and_folder(tmp_path: Path):
    with pytest.raises(ModelUnavailableError) as caught:
        DlibFaceEncoder(models_dir=tmp_path)
    assert str(tmp_path) in str(caught.value)
    assert "shape_predictor_5_face_landmarks.dat" in str(caught.value)
    (tmp_path / "shape_predictor_5_face_landmarks.dat").write_bytes(b"")
    with pytest.raises(ModelUnavailableError, match=DESCRIPTOR_FILE):
        DlibFaceEncoder(models_dir=tmp_path)


def test_corrupt_model_file_raises_model_unavailable(tmp_path: Path):
    for name in ("shape_predictor_5_face_landmarks.dat", DESCRIPTOR_FILE):
        (tmp_path / name).write_bytes(b"not a dlib model")
    with pytest.raises(ModelUnavailableError, match="cannot load"):
        DlibFaceEncoder(models_dir=tmp_path)
