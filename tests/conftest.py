"""Shared fixtures: real models loaded once per session, faces from the insightface package."""

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read by huggingface_hub at import: set first
# Template keys of the tests' stores go to a throw-away config folder, never the user's.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="biomem-test-config-")
os.environ.pop("BIOMEM_KEY", None)
os.environ.pop("BIOMEM_KEY_FILE", None)
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import modalities  # noqa: E402
from biomem import BioMemory, Probe  # noqa: E402
from biomem.textenc import TextEncoder  # noqa: E402
from biomem.samples import augment, face_crops  # noqa: E402


@pytest.fixture(scope="session")
def text_encoder() -> TextEncoder:
    return TextEncoder()


FACE = "face-arcface-s"  # the default face encoder of a new store


@pytest.fixture(scope="session")
def face_encoder() -> modalities.Encoder:
    return modalities.create(FACE)


@pytest.fixture(scope="session")
def faces() -> list[np.ndarray]:
    """Seven different people, one RGB crop each."""
    return face_crops()


@pytest.fixture(scope="session")
def capture(faces, face_encoder):
    """capture(person, n): the n-th augmented capture of a person (n=0 is the photo itself).

    The detector misses a few strongly tilted augmentations, as it would a badly framed camera
    shot: captures are the augmentations in which it finds exactly one face.
    """
    usable: dict[int, list[np.ndarray]] = {}
    tried: dict[int, int] = {}

    def make(person: int, n: int) -> np.ndarray:
        if n == 0:
            return faces[person]
        kept = usable.setdefault(person, [])
        while len(kept) < n:
            tried[person] = tried.get(person, 0) + 1
            image = augment(faces[person], seed=1000 * person + tried[person])
            if len(face_encoder.detect(image)) == 1:
                kept.append(image)
        return kept[n - 1]
    return make


@pytest.fixture(scope="session")
def face_probe(face_encoder, capture):
    """face_probe(person, n): the real embedding of a capture by the default face encoder, as a Probe."""
    cache: dict[tuple[int, int], Probe] = {}

    def make(person: int, n: int) -> Probe:
        if (person, n) not in cache:
            cache[(person, n)] = Probe(face_encoder.encode(capture(person, n)), face_encoder.name)
        return cache[(person, n)]
    return make


@pytest.fixture
def make_memory(tmp_path, text_encoder, face_encoder):
    """make_memory(name="m.db", **kw): a BioMemory on a temp file sharing the loaded models."""
    opened: list[BioMemory] = []

    def make(name: str = "m.db", **kwargs) -> BioMemory:
        kwargs.setdefault("text_model", text_encoder)
        kwargs.setdefault("encoder", face_encoder)
        mem = BioMemory(tmp_path / name, **kwargs)
        opened.append(mem)
        return mem
    yield make
    for mem in opened:
        mem.close()
