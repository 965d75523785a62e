"""Synthetic palms and the Competitive Code encoder: determinism, distinctness, real discrimination, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import modalities
from biomem.errors import InvalidImageError, NoPalmError
from modalities.compcode import CompCodeEncoder
from modalities.palm import MIN_TEXTURE_STD
from modalities.palmsynth import palm_capture, palm_identity, render, write_dataset

TAU = CompCodeEncoder.info.default_threshold
IDENTITIES = range(40)  # disjoint from the identities 1000-1099 the default τ was chosen on
CAPTURES = range(1, 5)  # perturbed captures only: capture 0 is the clean canonical rendering


@pytest.fixture(scope="module")
def encoder() -> CompCodeEncoder:
    return modalities.create("palm-compcode")


@pytest.fixture(scope="module")
def scores(encoder) -> tuple[np.ndarray, np.ndarray]:
    """Cosines of every genuine and every impostor pair among 40 identities x 4 captures."""
    labels, embeddings = [], []
    for i in IDENTITIES:
        palm = palm_identity(i)
        for c in CAPTURES:
            labels.append(i)
            embeddings.append(encoder.encode(render(palm, c)))
    labels = np.array(labels)
    upper = np.triu_indices(len(labels), k=1)
    cosines = (np.stack(embeddings) @ np.stack(embeddings).T)[upper]
    same = labels[upper[0]] == labels[upper[1]]
    return cosines[same], cosines[~same]


def equal_error_rate(genuine: np.ndarray, impostor: np.ndarray) -> float:
    """The error rate where false rejections (genuine < t) and false matches (impostor >= t) cross."""
    thresholds = np.sort(np.concatenate([genuine, impostor]))
    frr = np.searchsorted(np.sort(genuine), thresholds, side="left") / len(genuine)
    far = 1.0 - np.searchsorted(np.sort(impostor), thresholds, side="left") / len(impostor)
    k = int(np.argmin(np.abs(frr - far)))
    return float((frr[k] + far[k]) / 2)


# --- the generator ---------------------------------------------------------------------------


def test_same_seeds_give_identical_images():
    for identity, capture in [(7, 0), (7, 3), (123, 1)]:
        first, second = palm_capture(identity, capture), palm_capture(identity, capture)
        assert first.dtype == np.uint8 and first.shape == (128, 128)
        assert first.tobytes() == second.tobytes()


def test_identities_have_different_lines_and_images():
    a, b = palm_identity(1), palm_identity(2)
    assert not np.allclose(a.curves[0].points, b.curves[0].points)  # the heart lines differ
    assert not np.array_equal(render(a, 0), render(b, 0))
    assert float(np.abs(render(a, 0).astype(int) - render(b, 0).astype(int)).mean()) > 5


def test_captures_of_one_palm_vary_but_capture_zero_is_canonical():
    palm = palm_identity(3)
    canonical = render(palm, 0)
    assert np.array_equal(canonical, palm_capture(3, 0))
    assert not np.array_equal(render(palm, 1), canonical)
    assert not np.array_equal(render(palm, 1), render(palm, 2))
    assert canonical.std() > MIN_TEXTURE_STD  # palm_roi accepts it


def test_write_dataset_layout(tmp_path):
    root = write_dataset(tmp_path / "palms", identities=3, captures=2, seed=5)
    assert sorted(p.name for p in root.iterdir()) == ["id_0000", "id_0001", "id_0002"]
    assert sorted(p.name for p in (root / "id_0002").iterdir()) == ["0000.png", "0001.png"]
    saved = np.asarray(Image.open(root / "id_0002" / "0001.png"))
    assert np.array_equal(saved, palm_capture(5 + 2, 1))  # identity k is seed + k


# --- the encoder -----------------------------------------------------------------------------


def test_registry_reads_info_without_instantiating(monkeypatch):
    def refuse(self):
        raise AssertionError("info() must not instantiate the encoder")

    monkeypatch.setattr(CompCodeEncoder, "__init__", refuse)
    info = modalities.info("palm-compcode")
    assert (info.name, info.kind, info.dim) == ("palm-compcode", "palm", 768)
    assert info.weights == "none (training-free)" and "Kong & Zhang" in info.license
    assert 0 < info.default_threshold < 1 and "synthetic palms" in info.threshold_source


def test_create_gives_a_working_encoder(encoder):
    assert isinstance(encoder, CompCodeEncoder) and encoder.name == "palm-compcode"


def test_embedding_is_unit_norm_deterministic_and_of_the_declared_dim(encoder):
    image = palm_capture(11, 2)
    first, second = encoder.encode(image), encoder.encode(image.copy())
    assert first.shape == (encoder.info.dim,) and first.dtype == np.float32
    assert np.linalg.norm(first) == pytest.approx(1.0, abs=1e-5)
    assert np.array_equal(first, second)


def test_winner_is_the_orientation_of_a_dark_line(encoder):
    horizontal = np.full((128, 128), 180, np.uint8)
    horizontal[62:66, :] = 100
    vertical = horizontal.T.copy()
    # Filter j's long axis lies at j*pi/6 + pi/2: filter 3 for horizontal lines, filter 0 for vertical.
    assert (encoder.winners(horizontal)[64, 20:108] == 3).all()
    assert (encoder.winners(vertical)[20:108, 64] == 0).all()


def test_small_shifts_still_match(encoder):
    for identity in range(5):
        image = palm_capture(identity, 0)
        for shift in (2, 4):
            moved = np.pad(image, ((0, 0), (shift, 0)), mode="edge")[:, :128]
            assert float(encoder.encode(image) @ encoder.encode(moved)) > TAU + 0.3  # measured >= 0.78


def test_default_threshold_separates_synthetic_palms(scores):
    genuine, impostor = scores
    assert (len(genuine), len(impostor)) == (240, 12480)
    # Measured: 95.4 % of genuine pairs accepted, 0.03 % of impostor pairs (4 of 12,480), EER 2.0 %.
    # Single-pair acceptance is bounded by rotation: two captures up to 10 deg apart score ~0.35.
    assert (genuine >= TAU).mean() >= 0.90
    assert (impostor < TAU).mean() >= 0.999
    assert equal_error_rate(genuine, impostor) < 0.05
    assert genuine.mean() > impostor.mean() + 0.4


def test_rgb_rgba_png_and_path_inputs_give_the_same_embedding(encoder, tmp_path):
    gray = palm_capture(21, 1)
    expected = encoder.encode(gray)
    rgb = np.repeat(gray[:, :, None], 3, axis=2)
    rgba = np.dstack([rgb, np.full_like(gray, 255)])
    path = tmp_path / "palm.png"
    Image.fromarray(gray).save(path)
    for image in (rgb, rgba, Image.fromarray(rgba), path, path.read_bytes()):
        assert np.array_equal(encoder.encode(image), expected)


def test_blank_image_is_not_a_palm(encoder):
    with pytest.raises(NoPalmError):
        encoder.encode(np.full((128, 128, 3), 200, np.uint8))


def test_text_file_is_not_an_image(encoder, tmp_path):
    path = tmp_path / "palm.png"
    path.write_text("this is not an image")
    with pytest.raises(InvalidImageError):
        encoder.encode(path)
