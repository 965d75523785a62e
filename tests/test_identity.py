"""Attacks on the identity around the gate, replayed against the engine as an outsider would.

Each test is one thing a person relies on: nobody can enrol as them, add captures to them,
inherit their id, keep what they forgot, read their templates from a copied file, climb to
their match by unlimited attempts, or learn their name from a reply meant for someone else.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import modalities
from biomem import BioMemory, Probe
from biomem.engine.checks import BROAD_K, MAX_K
from biomem.errors import (
    AlreadyEnrolledError,
    BioMemError,
    DisclosureError,
    DuplicateLabelError,
    EnrolmentError,
    ForgetIncompleteError,
    InconsistentSamplesError,
    InvalidInputError,
    KeyUnavailableError,
    ModalityMismatchError,
    NoteNotFoundError,
    StepUpRequiredError,
    TooManyAttemptsError,
    UnknownIdentityError,
    UnknownModalityError,
)
from biomem.identity.limits import AttemptLimiter
from biomem.stores.records import to_blob
from biomem.stores.sealing import encode_key, new_key
from biomem.stores.sqlite.schema import SCHEMA_VERSION
from biomem.vocabulary import AttemptLimits
from modalities.palmsynth import palm_capture

from .conftest import probes_of
from .shared import ANA, BEN, CHLOE, DAN, files_holding, written

ANA_LABEL, BEN_LABEL = "Anastasia Quellmark", "Benedikt Vornholt"  # unique enough to grep for
FACE = "face-arcface-s"
PALM = "palm-compcode"


# ---- helpers --------------------------------------------------------------------------------


def owner_secrets(mem: BioMemory, owner: int, *texts: str) -> dict[str, bytes]:
    """The byte strings that identify an owner's data on disk: texts, label, sealed templates,
    note vectors (as SQLite and hnswlib store them)."""
    db = mem.store.db
    needles = {f"text{i}": t.encode() for i, t in enumerate(texts)}
    needles["label"] = mem.store.identity(owner).label.encode()
    for (i, blob) in db.execute("SELECT id, embedding FROM templates WHERE identity_id = ?", [owner]):
        needles[f"sealed-template-{i}"] = bytes(blob)
    for (i, blob) in db.execute("SELECT id, embedding FROM notes WHERE owner_id = ?", [owner]):
        needles[f"note-vector-{i}"] = bytes(blob)
    return needles


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def disclosed(obj) -> str:
    return json.dumps(obj, default=str)


@pytest.fixture
def pair(make_memory, face_probe):
    """Ana and Ben enrolled from two real captures each, two notes each."""
    mem = make_memory()
    ana = mem.enroll(ANA_LABEL, [face_probe(ANA, 0), face_probe(ANA, 1)])
    ben = mem.enroll(BEN_LABEL, [face_probe(BEN, 0), face_probe(BEN, 1)])
    mem.add_many(["Ana's locker code is 4411", "Ana is allergic to peanuts"], identity=ana.id,
                 timestamps=["2023-05-08T10:00:00", "2023-05-09T10:00:00"])
    mem.add_many(["Ben's locker code is 7788", "Ben hides the spare key in the shed"], identity=ben.id,
                 timestamps=["2021-03-04T05:06:07", "2021-03-05T05:06:07"])
    return mem, ana, ben


@pytest.fixture(scope="module")
def palm_probe():
    """palm_probe(hand, n): a real Competitive Code embedding of a synthetic palm capture."""
    return probes_of(palm_capture, modalities.create(PALM))


# ---- 1. enrolment integrity -----------------------------------------------------------------


def test_one_enrolment_of_two_people_is_refused_and_writes_nothing(pair, face_probe, capture):
    mem, _, _ = pair
    before = written(mem)
    with pytest.raises(InconsistentSamplesError):  # a visitor's own face plus a stranger's photo
        mem.enroll("visitor", [capture(CHLOE, 0), capture(DAN, 0)])
    with pytest.raises(InconsistentSamplesError):  # two good captures of one, the third of another
        mem.enroll("visitor", [face_probe(CHLOE, 0), face_probe(CHLOE, 1), face_probe(DAN, 0)])
    assert written(mem) == before
    assert mem.identify(face_probe(CHLOE, 1)).identity is None


def test_photos_of_an_enrolled_person_cannot_enrol_a_new_identity(pair, face_probe, capture):
    mem, ana, ben = pair
    before = written(mem)
    for samples in ([capture(ANA, 2)], [face_probe(ANA, 2), face_probe(ANA, 3)], [face_probe(BEN, 2)]):
        with pytest.raises(AlreadyEnrolledError) as refused:
            mem.enroll("Totally New Person", samples)
        message = f"{refused.value} {refused.value!r}".casefold()
        for label in (ANA_LABEL, BEN_LABEL):
            assert label.casefold() not in message and label.split()[0].casefold() not in message
        assert str(ana.id) not in str(refused.value) and str(ben.id) not in str(refused.value)
    assert written(mem) == before
    assert mem.identify(face_probe(ANA, 3)).identity == ana.id


def test_someone_elses_captures_cannot_be_added_to_an_identity(pair, face_probe, capture, make_memory):
    mem, ana, ben = pair
    visitor = mem.enroll("visitor", [face_probe(CHLOE, 0)])
    before = written(mem)
    cases = [
        [capture(ANA, 2)],  # the takeover: an enrolled person's photo added to the visitor
        [face_probe(ANA, 2), face_probe(ANA, 3)],
        [face_probe(DAN, 0)],  # a stranger's capture: not the visitor's own face
        [face_probe(CHLOE, 1), face_probe(ANA, 2)],  # one own capture smuggling in another person's
    ]
    for samples in cases:
        with pytest.raises(EnrolmentError):
            mem.add_templates(visitor.id, samples)
    with pytest.raises(EnrolmentError):  # Ben's photos into Ana's identity, by the operator call
        mem.add_templates(ana.id, [face_probe(BEN, 2)])
    with pytest.raises(StepUpRequiredError):  # Ben proving himself does not let him add to Ana
        mem.add_templates(ana.id, [face_probe(BEN, 3)], probe=face_probe(BEN, 2))
    assert written(mem) == before
    for n in (2, 3, 4):
        assert mem.identify(face_probe(ANA, n)).identity == ana.id
    mem.add_templates(visitor.id, [face_probe(CHLOE, 1)])  # the visitor's own capture is accepted
    assert mem.store.counts()["templates"] == before["rows"]["templates"] + 1
    solo = make_memory("solo.db")  # nobody else to clash with: captures must still be the visitor's own
    alone = solo.enroll("visitor", [face_probe(CHLOE, 0)])
    nothing = written(solo)
    with pytest.raises(EnrolmentError):
        solo.add_templates(alone.id, [face_probe(DAN, 0)])
    assert written(solo) == nothing


def test_a_label_is_unique_whatever_its_case(pair, face_probe):
    mem, _, _ = pair
    before = written(mem)
    for label in (ANA_LABEL.upper(), f"  {ANA_LABEL.lower()} ", ANA_LABEL.swapcase()):
        with pytest.raises(DuplicateLabelError):
            mem.enroll(label, [face_probe(CHLOE, 0)])
    assert written(mem) == before
    assert [i.label for i in mem.identities()] == [ANA_LABEL, BEN_LABEL]


def test_a_first_palm_needs_a_live_probe_of_the_enrolled_face(pair, face_probe, palm_probe):
    mem, ana, ben = pair
    ana_palm = [palm_probe(10, 0), palm_probe(10, 1)]
    before = written(mem)
    for probe in (face_probe(BEN, 2), face_probe(CHLOE, 0)):  # another enrolled person, a stranger
        with pytest.raises(StepUpRequiredError):
            mem.add_templates(ana.id, ana_palm, probe=probe)
    with pytest.raises((StepUpRequiredError, ModalityMismatchError)):  # the new palm cannot vouch for itself
        mem.add_templates(ana.id, ana_palm, probe=palm_probe(10, 2))
    assert written(mem) == before and mem.store.modalities(ana.id) == [FACE]

    mem.add_templates(ana.id, ana_palm, probe=face_probe(ANA, 2))
    assert mem.store.modalities(ana.id) == [FACE, PALM]
    assert mem.identify(palm_probe(10, 2)).identity == ana.id
    # Ana enrolled two modalities now: a face alone no longer proves her for adding captures.
    after_palm = written(mem)
    with pytest.raises(StepUpRequiredError):
        mem.add_templates(ana.id, [palm_probe(10, 2)], probe=face_probe(ANA, 3))
    # Ben, proving himself, cannot take Ana's palm as his own first palm.
    with pytest.raises(AlreadyEnrolledError):
        mem.add_templates(ben.id, [palm_probe(10, 2)], probe=face_probe(BEN, 2))
    assert written(mem) == after_palm
    mem.add_templates(ana.id, [palm_probe(10, 2)], probe={FACE: face_probe(ANA, 3), PALM: palm_probe(10, 1)})
    assert written(mem)["rows"]["templates"] == after_palm["rows"]["templates"] + 1


# ---- 2. ids are never reused ----------------------------------------------------------------


def test_a_forgotten_id_is_never_given_to_the_next_person(make_memory, face_probe, tmp_path):
    mem = make_memory("ids.db", hnsw_threshold=2)
    dan = mem.enroll("dan", [face_probe(DAN, 0)])  # the only (and highest) id: SQLite would reuse it
    dan_notes = mem.add_many(["Dan's bank PIN is 2468", "Dan's diary is in the attic"], identity=dan.id)
    mem.search("PIN", probe=face_probe(DAN, 1))  # Dan's index file exists under his id
    mem.forget(identity=dan.id)

    chloe = mem.enroll("chloe", [face_probe(CHLOE, 0)])
    assert chloe.id > dan.id
    chloe_note = mem.add("Chloe's passport is in the blue folder", identity=chloe.id)
    assert chloe_note.id > max(dan_notes)
    template_ids = [r[0] for r in mem.store.db.execute("SELECT id FROM templates WHERE identity_id = ?", [chloe.id])]
    assert min(template_ids) > 1

    # Dan's stale tab (or any caller holding his id) cannot touch Chloe.
    before = written(mem)
    try:  # a repeated forget may finish an earlier one, but it can only ever reach Dan's own id
        assert mem.forget(identity=dan.id) == dan.id
    except UnknownIdentityError:
        pass
    for call in (lambda: mem.add("planted", identity=dan.id),
                 lambda: mem.add_many(["planted"], identity=dan.id),
                 lambda: mem.add_templates(dan.id, [face_probe(DAN, 0)])):
        with pytest.raises(UnknownIdentityError):
            call()
    for note_id in dan_notes:
        with pytest.raises(NoteNotFoundError):
            mem.get(note_id, probe=face_probe(CHLOE, 1))
    assert written(mem) == before
    assert [n.content for n, _ in mem.search("where is it", probe=face_probe(CHLOE, 1)).notes] == \
        ["Chloe's passport is in the blue folder"]
    assert not list((tmp_path / "ids.db.index").glob(f"owner-{dan.id}.*"))

    mem.forget(identity=chloe.id)  # and across a reopen: the sequence is in the file
    mem.close()
    again = make_memory("ids.db")
    ben = again.enroll("ben", [face_probe(BEN, 0)])
    assert ben.id > chloe.id


# ---- 3. migration from schema version 1 -----------------------------------------------------

V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE identities (id INTEGER PRIMARY KEY, label TEXT NOT NULL, created TEXT NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0);
CREATE TABLE templates (id INTEGER PRIMARY KEY,
    identity_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    modality TEXT NOT NULL, embedding BLOB NOT NULL, created TEXT NOT NULL);
CREATE INDEX templates_by_modality ON templates(modality, identity_id);
CREATE TABLE notes (id INTEGER PRIMARY KEY,
    owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    content TEXT NOT NULL, timestamp TEXT NOT NULL, keywords TEXT NOT NULL DEFAULT '[]',
    tags TEXT NOT NULL DEFAULT '[]', context TEXT NOT NULL DEFAULT '', embedding BLOB NOT NULL);
CREATE INDEX notes_by_owner ON notes(owner_id, timestamp);
INSERT INTO meta VALUES ('note_total', '0');
CREATE TRIGGER notes_counted AFTER INSERT ON notes
BEGIN UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'note_total'; END;
CREATE TRIGGER notes_uncounted AFTER DELETE ON notes
BEGIN UPDATE meta SET value = CAST(value AS INTEGER) - 1 WHERE key = 'note_total'; END;
CREATE TABLE links (owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    source_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
    target_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
    PRIMARY KEY (source_id, target_id));
CREATE INDEX links_by_target ON links(target_id);
CREATE TRIGGER links_same_owner BEFORE INSERT ON links
WHEN (SELECT owner_id FROM notes WHERE id = NEW.source_id) IS NOT NEW.owner_id
  OR (SELECT owner_id FROM notes WHERE id = NEW.target_id) IS NOT NEW.owner_id
BEGIN SELECT RAISE(ABORT, 'links must join two notes of the same owner'); END;
CREATE TABLE history (id INTEGER PRIMARY KEY,
    owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    note_id INTEGER NOT NULL, event TEXT NOT NULL, before TEXT, after TEXT, at TEXT NOT NULL);
CREATE INDEX history_by_note ON history(owner_id, note_id);
CREATE TABLE thresholds (modality TEXT PRIMARY KEY, tau REAL NOT NULL, source TEXT NOT NULL,
    updated TEXT NOT NULL);
"""
V1_NOTES = [  # (id, owner, content, timestamp)
    (1, 1, "Ana's locker code is 4411", "2023-05-08T10:00:00"),
    (2, 1, "Ana is allergic to peanuts", "2023-05-09T10:00:00"),
    (3, 2, "Ben's locker code is 7788", "2023-05-10T10:00:00"),
    (4, 3, "Chloe's car is parked on level 3", "2023-05-11T10:00:00"),
]


def make_v1(path: Path, text_encoder, face_probe, *, dangling: bool = False) -> dict[str, bytes]:
    """A version-1 file as the engine wrote it before AUTOINCREMENT and sealing; returns the
    plaintext template blobs it holds."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(V1_SCHEMA)
    conn.executemany("INSERT INTO meta VALUES (?, ?)", [
        ("schema_version", "1"), ("default_modality", FACE),
        ("text_dim", str(text_encoder.dim)), ("text_model", text_encoder.name)])
    conn.executemany("INSERT INTO identities VALUES (?, ?, ?, ?)", [
        (1, "ana", "2023-05-01T00:00:00+00:00", 2), (2, "ben", "2023-05-01T00:00:00+00:00", 1),
        (3, "ANA", "2023-05-02T00:00:00+00:00", 1)])  # a v1 label clash, different case
    plain = {}
    for template_id, (owner, person) in enumerate([(1, ANA), (2, BEN), (3, CHLOE)], start=1):
        blob = to_blob(face_probe(person, 0).embedding)
        plain[f"plaintext-template-{owner}"] = blob
        conn.execute("INSERT INTO templates VALUES (?, ?, ?, ?, ?)",
                     [template_id, owner, FACE, blob, "2023-05-01T00:00:00+00:00"])
    for note_id, owner, content, when in V1_NOTES:
        conn.execute("INSERT INTO notes VALUES (?, ?, ?, ?, '[\"locker\"]', '[\"personal\"]', 'ctx', ?)",
                     [note_id, owner, content, when, to_blob(text_encoder.encode_one(content))])
        conn.execute("INSERT INTO history (owner_id, note_id, event, before, after, at) "
                     "VALUES (?, ?, 'add', NULL, ?, ?)", [owner, note_id, json.dumps({"content": content}), when])
    conn.execute("INSERT INTO links VALUES (1, 1, 2)")
    conn.execute("INSERT INTO thresholds VALUES (?, 0.95, 'manual', '2023-05-01T00:00:00+00:00')", [FACE])
    if dangling:  # a row pointing nowhere: the migration must refuse and keep every v1 row
        conn.execute("INSERT INTO notes VALUES (9, 99, 'orphan', '2023-01-01T00:00:00', '[]', '[]', '', ?)",
                     [to_blob(np.ones(text_encoder.dim))])
    conn.close()
    return plain


def test_a_version_1_file_migrates_keeping_every_row_and_never_reuses_ids(
        make_memory, tmp_path, text_encoder, face_probe):
    plain = make_v1(tmp_path / "v1.db", text_encoder, face_probe)
    mem = make_memory("v1.db")
    assert mem.store.get_meta("schema_version") == str(SCHEMA_VERSION)
    assert [(i.id, i.label) for i in mem.identities()] == [(1, "ana"), (2, "ben"), (3, "ANA (2)")]
    ana_notes = mem.get_all(probe=face_probe(ANA, 2))
    assert [(n.id, n.content, n.timestamp) for n in ana_notes] == [(i, c, t) for i, o, c, t in V1_NOTES if o == 1]
    assert ana_notes[0].links == [2] and ana_notes[0].keywords == ["locker"]
    assert [h["event"] for h in mem.history(1, probe=face_probe(ANA, 2))] == ["add"]
    assert mem.store.threshold(FACE) == (0.95, "manual")
    found = mem.search("locker code", probe=face_probe(ANA, 3))
    assert found.gate.identity == 1 and found.notes[0][0].id == 1 and found.gated_out == 2
    assert [n.id for n, _ in mem.search("locker code", probe=face_probe(BEN, 2)).notes] == [3]
    assert mem.store.note_total() == 4
    # Templates are sealed now, and no plaintext copy is left anywhere in the files.
    assert files_holding(tmp_path, plain) == {}

    mem.forget(identity=3)  # the highest identity and the highest note
    newcomer = mem.enroll("dan", [face_probe(DAN, 0)])
    assert newcomer.id == 4
    assert mem.add("Dan's first note", identity=newcomer.id).id == 5


def test_a_version_1_file_that_cannot_migrate_keeps_every_row(tmp_path, text_encoder, face_encoder, face_probe):
    path = tmp_path / "broken.db"
    make_v1(path, text_encoder, face_probe, dangling=True)
    tables = ("identities", "templates", "notes", "links", "history", "thresholds")

    def rows() -> dict:
        with sqlite3.connect(path) as conn:
            return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in (*tables, "meta")}
    before = rows()
    with pytest.raises(BioMemError):
        BioMemory(path, text_model=text_encoder, encoder=face_encoder)
    assert rows() == before


# ---- 4. forget leaves no byte ---------------------------------------------------------------

SECRET = "Ana keeps the spare key under the blue flowerpot zq7x"
SECRET2 = "Ana's second secret: the safe code is 90210 zq7y"


def ana_with_index(mem: BioMemory, face_probe):
    ana = mem.enroll(ANA_LABEL, [face_probe(ANA, 0)])
    ben = mem.enroll(BEN_LABEL, [face_probe(BEN, 0)])
    mem.add_many([SECRET, "Ana's passport number is X1234567", "Ana fears spiders", "Ana likes tea"],
                 identity=ana.id)
    mem.add("Ben likes coffee", identity=ben.id)
    mem.search("key", probe=face_probe(ANA, 1))  # builds Ana's hnsw index file
    return ana, ben


class Reader:
    """Another connection holding a read transaction on the file until released."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started, self.release, self.done = threading.Event(), threading.Event(), threading.Event()
        self.conn: sqlite3.Connection | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.started.wait(10)

    def _run(self) -> None:
        self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.conn.execute("BEGIN")
        self.conn.execute("SELECT COUNT(*), MAX(content) FROM notes").fetchone()
        self.started.set()
        self.release.wait(30)
        self.conn.execute("COMMIT")  # the connection itself stays open
        self.done.set()

    def close(self) -> None:
        self.release.set()
        self.thread.join(10)
        if self.conn is not None:
            self.conn.close()


def test_forget_waits_for_a_reader_and_leaves_no_byte_in_any_file(make_memory, face_probe, tmp_path):
    mem = make_memory("forget.db", hnsw_threshold=3)
    ana, _ = ana_with_index(mem, face_probe)
    mem.store.checkpoint()
    needles = owner_secrets(mem, ana.id, SECRET)
    holding = files_holding(tmp_path, needles)
    assert any("text0" in v for v in holding.values()) and \
        any(k.endswith(".hnsw") and any(n.startswith("note-vector") for n in v) for k, v in holding.items())

    reader = Reader(tmp_path / "forget.db")
    timer = threading.Timer(1.0, reader.release.set)
    timer.start()
    try:
        started = time.monotonic()
        assert mem.forget(identity=ana.id, timeout=10) == ana.id
        assert time.monotonic() - started >= 0.9, "forget returned while a reader still held old pages"
        assert reader.done.is_set()
        assert files_holding(tmp_path, needles) == {}  # the reader's connection is still open
    finally:
        timer.cancel()
        reader.close()
    assert not list((tmp_path / "forget.db.index").glob(f"owner-{ana.id}.*"))
    mem.close()
    assert files_holding(tmp_path, needles) == {}


def test_forget_blocked_by_a_reader_fails_within_its_timeout_and_a_retry_completes(
        make_memory, face_probe, tmp_path):
    mem = make_memory("blocked.db", hnsw_threshold=3)
    ana, _ = ana_with_index(mem, face_probe)
    needles = owner_secrets(mem, ana.id, SECRET)
    reader = Reader(tmp_path / "blocked.db")  # holds its transaction until closed (30 s at most)
    try:
        with pytest.raises(ForgetIncompleteError, match="finish_erasure"):
            mem.forget(identity=ana.id, timeout=0.5)
        assert not reader.done.is_set(), "forget waited for the reader instead of giving up at its timeout"
        assert not list((tmp_path / "blocked.db.index").glob(f"owner-{ana.id}.*"))  # vectors gone at once
    finally:
        reader.close()
    mem.finish_erasure()  # what the error says to do once the reader is gone
    assert files_holding(tmp_path, needles) == {}
    assert not list((tmp_path / "blocked.db.index").glob(f"owner-{ana.id}.*"))


def test_a_second_instance_never_writes_back_or_serves_a_forgotten_owner(make_memory, face_probe, tmp_path):
    app = make_memory("shared.db", hnsw_threshold=3)
    ana, ben = ana_with_index(app, face_probe)
    cli = make_memory("shared.db", hnsw_threshold=3)  # e.g. the CLI on the app's file
    assert SECRET in [n.content for n, _ in cli.search("spare key", probe=face_probe(ANA, 1)).notes]
    cli.add(SECRET2, identity=ana.id)  # the CLI's cached index of Ana is now changed in memory
    assert any(p.dirty for p in cli.partitions._cache.values())
    needles = owner_secrets(app, ana.id, SECRET, SECRET2)

    app.forget(identity=ana.id)
    assert files_holding(tmp_path, needles) == {}

    # Ana comes back as a new person; the CLI must not hand her (or anyone) the old partition.
    again = app.enroll("Ana again", [face_probe(ANA, 0)])
    assert again.id > ben.id
    for mem in (cli, app):
        result = mem.search("spare key safe code", probe=face_probe(ANA, 1))
        assert result.gate.identity == again.id and result.notes == []
    with pytest.raises(UnknownIdentityError):
        cli.add("planted into the old id", identity=ana.id)
    cli.close()
    assert files_holding(tmp_path, needles) == {}
    assert not list((tmp_path / "shared.db.index").glob(f"owner-{ana.id}.*"))
    app.close()
    assert files_holding(tmp_path, needles) == {}


# ---- 5. templates sealed at rest ------------------------------------------------------------


@pytest.fixture
def keyed(monkeypatch, tmp_path):
    """A store-specific key in BIOMEM_KEY and an empty config folder: no test touches a real key."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("BIOMEM_KEY_FILE", raising=False)
    key = new_key()
    monkeypatch.setenv("BIOMEM_KEY", encode_key(key))
    return key


def test_a_copied_database_without_its_key_yields_nothing_and_is_not_modified(
        keyed, make_memory, face_probe, tmp_path, monkeypatch, text_encoder, face_encoder):
    mem = make_memory("home.db")
    ana = mem.enroll(ANA_LABEL, [face_probe(ANA, 0)])
    mem.add("Ana's locker code is 4411", identity=ana.id)
    mem.close()
    stolen = tmp_path / "elsewhere" / "copy.db"
    stolen.parent.mkdir()
    shutil.copy(tmp_path / "home.db", stolen)
    digest = sha256(stolen)
    plaintext = {"template": to_blob(face_probe(ANA, 0).embedding)}
    assert files_holding(stolen.parent, plaintext) == {}

    def attempt(**kwargs):
        with pytest.raises(KeyUnavailableError) as refused:
            BioMemory(stolen, text_model=text_encoder, encoder=face_encoder, **kwargs)
        assert sha256(stolen) == digest
        return refused.value

    assert "nothing" in str(attempt(key=new_key())).lower()  # a wrong key given in code
    monkeypatch.setenv("BIOMEM_KEY", encode_key(new_key()))  # a wrong key in the environment
    attempt()
    monkeypatch.setenv("BIOMEM_KEY", "not a key at all")
    attempt()
    monkeypatch.delenv("BIOMEM_KEY")  # no key at all: refused, and no fresh key is invented
    attempt()
    assert not (tmp_path / "config" / "biomem" / "key").exists()

    monkeypatch.setenv("BIOMEM_KEY", encode_key(keyed))  # the owner with the key still gets in
    with BioMemory(stolen, text_model=text_encoder, encoder=face_encoder) as owner:
        assert owner.identify(face_probe(ANA, 2)).identity == ana.id


def test_rekey_reseals_every_template_and_identification_keeps_working(
        keyed, make_memory, face_probe, tmp_path, text_encoder, face_encoder):
    mem = make_memory("rekey.db")
    ana = mem.enroll(ANA_LABEL, [face_probe(ANA, 0), face_probe(ANA, 1)])
    ben = mem.enroll(BEN_LABEL, [face_probe(BEN, 0)])
    sealed_before = mem.store.db.execute("SELECT embedding FROM templates ORDER BY id").fetchall()
    fresh = new_key()
    mem.store.rekey(fresh)
    sealed_after = mem.store.db.execute("SELECT embedding FROM templates ORDER BY id").fetchall()
    assert len(sealed_after) == 3 and all(a != b for a, b in zip(sealed_before, sealed_after))
    assert mem.identify(face_probe(ANA, 2)).identity == ana.id
    assert mem.identify(face_probe(BEN, 2)).identity == ben.id
    mem.close()
    with pytest.raises(KeyUnavailableError):  # the old key opens nothing any more
        BioMemory(tmp_path / "rekey.db", text_model=text_encoder, encoder=face_encoder, key=keyed)
    with BioMemory(tmp_path / "rekey.db", text_model=text_encoder, encoder=face_encoder, key=fresh) as again:
        assert again.identify(face_probe(ANA, 3)).identity == ana.id
        assert again.identify(face_probe(CHLOE, 0)).identity is None


# ---- 6. attempt limits ----------------------------------------------------------------------


@pytest.fixture
def limited(pair, clock):
    """The pair's store with a pace of 3 misses per 60 s (then 10 s at the step-up τ) and a daily budget of 3
    misses, on a fake clock."""
    mem, ana, ben = pair
    mem.limiter = AttemptLimiter(AttemptLimits(misses=3, window=60.0, cooldown=10.0, budget=3), mem.store,
                                 clock=clock)
    return mem, ana, clock


def test_misses_past_the_daily_budget_are_refused_until_the_oldest_ages_out(limited, face_probe, caplog):
    mem, ana, clock = limited
    day = mem.limiter.limits.budget_window
    stranger, client = face_probe(CHLOE, 0), ("session-1", "203.0.113.9")
    blank = np.full((200, 200, 3), 127, dtype=np.uint8)  # would be NoFaceError if it were encoded
    caplog.set_level(logging.DEBUG)
    for _ in range(3):  # the budget, one miss a second
        clock.now += 1
        assert mem.identify(stranger, client=client).identity is None
    first = clock.now - 2
    with pytest.raises(TooManyAttemptsError) as refused:
        mem.search("locker", probe=blank, client=client)  # refused before any encoder runs
    assert refused.value.retry_after == pytest.approx(first + day - clock.now)  # until the first miss ages out
    assert "try again" in str(refused.value).lower()
    with pytest.raises(TooManyAttemptsError):  # even the owner's face, from that client
        mem.search("locker", probe=face_probe(ANA, 2), client=client)
    clock.now = first + day - 1
    with pytest.raises(TooManyAttemptsError) as still:
        mem.identify(stranger, client=client)
    assert still.value.retry_after == pytest.approx(1.0)
    for n in (1, 2):  # each miss that ages out makes room for exactly one more, and the wait never doubles
        clock.now += 1.01
        assert mem.identify(stranger, client=client).identity is None
        with pytest.raises(TooManyAttemptsError) as again:
            mem.identify(stranger, client=client)
        assert again.value.retry_after == pytest.approx(first + n + day - clock.now)  # until the next one ages out
        assert again.value.retry_after < 1
    clock.now += 1.01
    assert mem.identify(face_probe(ANA, 2), client=client).identity == ana.id
    logged = caplog.text
    assert "203.0.113.9" not in logged and "session-1" not in logged and ANA_LABEL not in logged


def test_limits_are_per_address_and_a_match_resets_no_count(limited, face_probe):
    mem, ana, clock = limited
    stranger = face_probe(CHLOE, 0)
    mem.identify(stranger, client="attacker")  # a client without an address is counted by its key
    mem.identify(stranger, client="attacker")
    for i in range(5):  # plenty of other clients' matches and misses in between
        assert mem.identify(face_probe(ANA, 2), client="ana-phone").identity == ana.id
        mem.identify(stranger, client=f"someone-else-{i}")
    assert mem.identify(face_probe(ANA, 2), client="attacker").identity == ana.id  # own face, same client
    with pytest.raises(StepUpRequiredError):  # a failed step-up is a miss too: the third
        mem.forget(probe=stranger, client="attacker")
    with pytest.raises(TooManyAttemptsError):
        mem.identify(face_probe(ANA, 2), client="attacker")
    assert mem.identify(face_probe(ANA, 2), client="ana-phone").identity == ana.id
    # A client with an address is counted by the address alone: a new session or key there gets nowhere ...
    for _ in range(3):
        mem.identify(stranger, client=("session:s1", "key:7", "address:198.51.100.7"))
    for other in (("session:s2", "address:198.51.100.7"), ("key:8", "address:198.51.100.7")):
        with pytest.raises(TooManyAttemptsError):
            mem.identify(stranger, client=other)
    # ... while the same session or key at another address is not refused.
    assert mem.identify(stranger, client=("session:s1", "key:7", "address:192.0.2.1")).identity is None
    assert mem.identify(face_probe(ANA, 2), client=("key:7", "address:192.0.2.2")).identity == ana.id
    clock.now += mem.limiter.limits.budget_window + 1  # misses older than the budget's window stop counting
    mem.identify(stranger, client="slow")
    mem.identify(stranger, client="slow")
    clock.now += mem.limiter.limits.budget_window + 1
    mem.identify(stranger, client="slow")
    mem.identify(stranger, client="slow")
    assert mem.identify(face_probe(ANA, 2), client="slow").identity == ana.id
    with pytest.raises(TooManyAttemptsError):  # the address counted above is free again too, and counts afresh
        for _ in range(4):
            mem.identify(stranger, client=("session:s2", "address:198.51.100.7"))


# ---- 7. disclosure ----------------------------------------------------------------------------


def test_private_replies_name_nobody_but_the_requester(pair, face_probe):
    mem, ana, ben = pair
    assert mem.disclosure == "private"
    for reply in (mem.search("locker code", probe=face_probe(CHLOE, 0)),
                  mem.ask("What is my locker code?", probe=face_probe(DAN, 0))):
        data = reply.as_dict()
        assert data["results"] == [] and data["gated_out"] is None
        assert data["gate"] == {"matched": False, "modality": FACE}
        assert mem.disclose(reply.gate, reply.gated_out) == {"gate": data["gate"], "gated_out": None}
        text = disclosed(data)
        for secret in (ANA_LABEL, BEN_LABEL, "score", "2021-03", "2023-05", "4411", "7788"):
            assert secret not in text

    mine = mem.search("locker code", probe=face_probe(ANA, 2)).as_dict()
    text = disclosed(mine)
    assert mine["gate"]["label"] == ANA_LABEL and mine["gated_out"] == {"total": 2}
    assert BEN_LABEL not in text and "2021-03" not in text and "7788" not in text and "scores" not in mine["gate"]
    assert {r["owner"] for r in mine["results"]} == {ana.id}
    shown = [a["score"] for a in mine["gate"]["admitted"]] + [r["score"] for r in mine["results"]]
    assert shown and all(s == round(s, 2) for s in shown)


def test_demo_shows_rounded_scores_of_sample_people_only(make_memory, face_probe, monkeypatch):
    monkeypatch.delenv("BIOMEM_DISCLOSURE", raising=False)
    mem = make_memory("demo.db", disclosure="demo")
    ana = mem.enroll(ANA_LABEL, [face_probe(ANA, 0)], sample=True)
    ben = mem.enroll(BEN_LABEL, [face_probe(BEN, 0)], sample=True)
    real = mem.enroll("Rhiannon Realperson", [face_probe(DAN, 0)])  # a real enrolment on the demo
    mem.add("Ana's locker code is 4411", identity=ana.id)
    mem.add("Ben's locker code is 7788", identity=ben.id)
    mem.add("Rhiannon's bank PIN is 1357", identity=real.id)
    reply = mem.search("locker", probe=face_probe(CHLOE, 0))
    data = reply.as_dict()
    scores = {row["label"]: row["score"] for row in data["gate"]["scores"]}
    assert set(scores) == {ANA_LABEL, BEN_LABEL}
    exact = reply.gate.scores
    assert scores[ANA_LABEL] == round(exact[ana.id], 2) and scores[BEN_LABEL] == round(exact[ben.id], 2)
    assert {o["label"] for o in data["gated_out"]["owners"]} == {ANA_LABEL, BEN_LABEL}
    assert "Rhiannon" not in disclosed(data) and data["results"] == []
    mem.close()
    with pytest.raises(DisclosureError):  # a store with a real enrolment refuses demo ...
        make_memory("demo.db", disclosure="demo")
    monkeypatch.setenv("BIOMEM_DISCLOSURE", "demo")
    with pytest.raises(DisclosureError):  # ... however it is asked for
        make_memory("demo.db")
    assert make_memory("demo.db", disclosure="demo", force_disclosure=True).disclosure == "demo"


# ---- 8. typed errors for bad input ---------------------------------------------------------


def test_ids_that_are_not_positive_integers_are_typed_errors(pair, face_probe):
    mem, ana, _ = pair
    before = written(mem)
    owner = face_probe(ANA, 2)
    for bad in ("3", 3.0, -1, 0, True, None, "1; DROP TABLE notes", np.float64(2.0)):
        calls = [lambda: mem.get(bad, probe=owner), lambda: mem.update(bad, "x", probe=owner),
                 lambda: mem.delete(bad, probe=owner), lambda: mem.history(bad, probe=owner),
                 lambda: mem.add("x", identity=bad), lambda: mem.add_templates(bad, [face_probe(ANA, 3)])]
        if bad is not None:
            calls.append(lambda: mem.forget(identity=bad))
        for call in calls:
            with pytest.raises(InvalidInputError):
                call()
    assert written(mem) == before


def test_ids_beyond_sqlite_range_are_typed_errors(pair, face_probe):
    mem, ana, _ = pair
    before = written(mem)
    owner = face_probe(ANA, 2)
    for huge in (2**63, 10**30):
        for call in (lambda: mem.get(huge, probe=owner), lambda: mem.delete(huge, probe=owner),
                     lambda: mem.history(huge, probe=owner), lambda: mem.forget(identity=huge),
                     lambda: mem.add("x", identity=huge)):
            with pytest.raises(BioMemError):
                call()
    assert written(mem) == before


def test_k_must_be_an_integer_from_1_to_the_maximum(pair, face_probe):
    mem, ana, _ = pair
    before = written(mem)
    for k in (0, -1, "5", True, 2.5, 5.0, MAX_K + 1, 10**9, 10**30):
        for call in (lambda: mem.search("locker", probe=face_probe(ANA, 2), k=k),
                     lambda: mem.ask("locker?", probe=face_probe(ANA, 2), k=k)):
            with pytest.raises(InvalidInputError):
                call()
    assert written(mem) == before
    for k in (BROAD_K, MAX_K):  # the owner's whole partition at most (a clear probe may list), never anyone else's
        notes = mem.search("locker", probe=face_probe(ANA, 2), k=k).notes
        assert len(notes) == 2 and {n.owner for n, _ in notes} == {ana.id}


def test_bad_vectors_and_unknown_modalities_are_typed_errors_and_write_nothing(pair, face_probe, make_memory):
    mem, ana, _ = pair
    before = written(mem)
    dim = mem.text.dim
    owner = face_probe(ANA, 2)
    nan = np.full(dim, np.nan, dtype=np.float32)
    image = np.zeros((64, 64, 3), np.uint8)
    cases = [
        (InvalidInputError, lambda: mem.search(np.ones(dim - 1), probe=owner)),
        (InvalidInputError, lambda: mem.search(np.ones((2, dim)), probe=owner)),
        (InvalidInputError, lambda: mem.search(nan, probe=owner)),
        (InvalidInputError, lambda: mem.search(np.r_[np.inf, np.ones(dim - 1)], probe=owner)),
        (InvalidInputError, lambda: mem.search(np.zeros(dim), probe=owner)),
        (InvalidInputError, lambda: Probe(np.full(128, np.nan), FACE)),
        (InvalidInputError, lambda: Probe(np.zeros(0), FACE)),
        (ModalityMismatchError, lambda: mem.search("locker", probe=Probe(np.ones(64), FACE))),
        (ModalityMismatchError, lambda: mem.enroll("short", [Probe(np.ones(64), FACE)])),
        (ModalityMismatchError, lambda: mem.add_templates(ana.id, [Probe(np.ones(64), FACE)])),
        (UnknownModalityError, lambda: mem.enroll("nobody", [image], modality="no-such-encoder")),
        (UnknownModalityError, lambda: mem.threshold("no-such-encoder")),
        (UnknownModalityError, lambda: mem.search("locker", probe={"no-such-encoder": image})),
    ]
    for error, call in cases:
        with pytest.raises(error):
            call()
    assert written(mem) == before

    empty = make_memory("empty.db")
    nothing = written(empty)
    for call in (lambda: empty.search("x", probe={"no-such-encoder": image}),
                 lambda: empty.identify(Probe(np.ones(16), "no-such-encoder")),
                 lambda: empty.enroll("x", [Probe(np.ones(16), "no-such-encoder")])):
        with pytest.raises(UnknownModalityError):
            call()
    assert written(empty) == nothing


def test_a_wrong_size_template_cannot_be_enrolled_on_an_empty_store(make_memory, face_probe):
    mem = make_memory("fresh.db")
    nothing = written(mem)
    with pytest.raises(InvalidInputError):
        mem.enroll("short", [Probe(np.ones(64), FACE)])
    assert written(mem) == nothing
    assert mem.enroll(ANA_LABEL, [face_probe(ANA, 0)]).id > 0
