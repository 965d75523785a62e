"""The engine end to end with real models: who may read which memory."""

import re
import sqlite3
import threading

import numpy as np
import psycopg
import pytest

from biomem import (
    BioMemory,
    GateResult,
    InvalidImageError,
    InvalidInputError,
    ModalityMismatchError,
    MultipleFacesError,
    NoFaceError,
    NoteNotFoundError,
    Probe,
    StoreCorruptError,
    UnknownIdentityError,
)
from biomem.errors import ModelUnavailableError, TooManyAttemptsError
from biomem.identity.samples import group_photo_path
from biomem.notes.llm import NO_MEMORY_ANSWER, NOT_MENTIONED, Evolution, OfflineLLM
from biomem.stores.pg.schema import SCHEMA_VERSION as PG_VERSION
from biomem.stores.sqlite.schema import SCHEMA_VERSION as SQLITE_VERSION
from biomem.vocabulary import AttemptLimits

from .conftest import BOTH_STORES
from .shared import ANA, BEN, CHLOE


def contents(notes):
    return {n.content for n, _ in notes}


def table_rows(mem):
    return mem.store.counts()


@BOTH_STORES
def test_owner_sees_own_notes_through_a_new_capture(family, capture):
    mem, ana, _ = family
    result = mem.search("Do I have a dog?", probe=capture(ANA, 5))
    assert result.gate.identity == ana.id
    assert contents(result.notes) == {"My PIN is 1234", "I adopted a beagle puppy called Rex"}
    assert result.notes[0][0].content == "I adopted a beagle puppy called Rex"
    assert result.gated_out == 2


@BOTH_STORES
def test_lookalike_notes_never_cross_owners(family, capture):
    mem, ana, ben = family
    for person, identity, pin in ((ANA, ana, "1234"), (BEN, ben, "9876")):
        answer = mem.ask("What is my PIN?", probe=capture(person, 7))
        assert answer.gate.identity == identity.id
        assert {n.owner for n, _ in answer.notes} == {identity.id}
        assert pin in answer.text
        other = "9876" if pin == "1234" else "1234"
        assert other not in answer.prompt and other not in answer.text


@BOTH_STORES
def test_stranger_gets_an_empty_pool_and_an_answer_without_memory(family, capture):
    mem, _, _ = family
    answer = mem.ask("What is my PIN?", probe=capture(CHLOE, 3))
    assert answer.gate.identity is None and answer.gate.admitted == []
    assert answer.notes == []
    assert answer.gated_out == 4
    assert answer.text == NO_MEMORY_ANSWER
    assert "1234" not in answer.prompt and "9876" not in answer.prompt
    assert "context" not in answer.prompt.lower()
    assert set(answer.gate.scores) == {1, 2}
    assert max(answer.gate.scores.values()) < answer.gate.threshold


@BOTH_STORES
def test_an_owner_asking_about_something_never_said_is_told_so_not_given_a_near_miss(family, capture):
    mem, ana, _ = family
    answer = mem.ask("What is my blood type?", probe=capture(ANA, 4))
    assert answer.gate.identity == ana.id and answer.notes  # her notes were retrieved, and read
    assert answer.text == NOT_MENTIONED


def test_ask_can_retrieve_with_another_query_than_the_question_and_the_gate_still_decides(family, capture):
    mem, ana, _ = family
    answer = mem.ask("What should I remember?", probe=capture(ANA, 4), k=1, query="beagle puppy Rex")
    assert [n.content for n, _ in answer.notes] == ["I adopted a beagle puppy called Rex"]
    assert "Question: What should I remember?" in answer.prompt and "beagle puppy Rex" not in answer.prompt
    stranger = mem.ask("What should I remember?", probe=capture(CHLOE, 4), query="PIN")
    assert stranger.notes == [] and stranger.text == NO_MEMORY_ANSWER


def test_the_question_embeds_while_the_probe_encodes_and_a_bad_one_costs_no_encoding(family, capture, monkeypatch):
    """ask and search embed a text query beside the probe's encoding: here the text encoder waits until the face
    encoder has begun, which a question embedded before the probe would wait for in vain."""
    mem, ana, _ = family
    face = mem.biometrics.encoders.encoders[mem.modality]
    encode_probe, embed_text = face.capture, mem.text.encode_one
    probing = threading.Event()

    def capture_probe(*args, **kwargs):
        probing.set()
        return encode_probe(*args, **kwargs)

    def embed(text):
        assert probing.wait(30), "the question was embedded before the probe's encoding began"
        return embed_text(text)

    monkeypatch.setattr(face, "capture", capture_probe)
    monkeypatch.setattr(mem.text, "encode_one", embed)
    answer = mem.ask("What is my PIN?", probe=capture(ANA, 2), query="beagle puppy Rex")
    assert answer.gate.identity == ana.id and answer.notes[0][0].content == "I adopted a beagle puppy called Rex"
    probing.clear()
    assert mem.search("PIN", probe=capture(ANA, 3)).notes[0][0].content == "My PIN is 1234"
    probing.clear()
    for bad in ("", "x" * 100_000):
        with pytest.raises(InvalidInputError):
            mem.ask(bad, probe=capture(ANA, 2))
        with pytest.raises(InvalidInputError):
            mem.search(bad, probe=capture(ANA, 2))
    assert not probing.is_set()  # refused before any probe was encoded


def test_results_convert_to_mem0_style_dicts(family, capture):
    mem, ana, _ = family
    data = mem.search("PIN", probe=capture(ANA, 2)).as_dict()
    assert data["gate"]["label"] == "ana"
    assert {r["memory"] for r in data["results"]} == {"My PIN is 1234", "I adopted a beagle puppy called Rex"}
    assert all(r["owner"] == ana.id and "score" in r for r in data["results"])


@BOTH_STORES
def test_add_by_probe_stores_for_the_matched_owner_and_refuses_strangers(family, capture):
    mem, ana, _ = family
    note = mem.add("My sister lives in Lisbon", probe=capture(ANA, 4))
    assert note.owner == ana.id and len(note.keywords) >= 3 and len(note.tags) >= 3 and note.context
    before = table_rows(mem)
    with pytest.raises(UnknownIdentityError):
        mem.add("I am not enrolled", probe=capture(CHLOE, 1))
    assert table_rows(mem) == before


@BOTH_STORES
def test_by_id_operations_refuse_non_owners(family, capture):
    mem, ana, ben = family
    ana_note = mem.get_all(probe=capture(ANA, 2))[0]
    for probe in (capture(BEN, 2),):
        with pytest.raises(NoteNotFoundError):
            mem.get(ana_note.id, probe=probe)
        with pytest.raises(NoteNotFoundError):
            mem.update(ana_note.id, "overwritten by Ben", probe=probe)
        with pytest.raises(NoteNotFoundError):
            mem.delete(ana_note.id, probe=probe)
        with pytest.raises(NoteNotFoundError):
            mem.history(ana_note.id, probe=probe)
    with pytest.raises(UnknownIdentityError):
        mem.get(ana_note.id, probe=capture(CHLOE, 2))
    assert mem.get(ana_note.id, probe=capture(ANA, 3)).content == ana_note.content


@BOTH_STORES
def test_update_and_delete_keep_history_for_the_owner(family, capture):
    mem, ana, _ = family
    owner_probe = capture(ANA, 3)
    note = mem.get_all(probe=owner_probe)[0]
    mem.update(note.id, "My PIN is now 5555", probe=owner_probe)
    assert "5555" in mem.ask("What is my PIN?", probe=owner_probe).text
    mem.delete(note.id, probe=owner_probe)
    history = mem.history(note.id, probe=owner_probe)
    assert [h["event"] for h in history] == ["add", "update", "delete"]
    assert all(h["before"] is None and h["after"] is None and h["at"] for h in history)  # events, no text
    with pytest.raises(NoteNotFoundError):
        mem.get(note.id, probe=owner_probe)
    assert all("5555" not in n.content for n, _ in mem.search("PIN", probe=owner_probe).notes)


def test_a_deleted_note_leaves_no_text_in_the_files_unless_its_history_is_kept(make_memory, face_probe, tmp_path):
    mem = make_memory("deleted.db")
    ana = mem.enroll("ana", [face_probe(ANA, 0)])
    gone = mem.add("My gym locker code is 7319", identity=ana.id)
    kept = mem.add("My bike lock code is 2468", identity=ana.id)
    mem.update(gone.id, "My gym locker code is 8426", probe=face_probe(ANA, 1))
    mem.delete(gone.id, probe=face_probe(ANA, 1))
    mem.delete(kept.id, probe=face_probe(ANA, 1), keep_history=True)
    data = b"".join(p.read_bytes() for p in tmp_path.glob("deleted.db*") if p.is_file())
    assert b"7319" not in data and b"8426" not in data  # nor in the WAL: delete checkpoints
    audit = mem.history(kept.id, probe=face_probe(ANA, 1))
    assert audit[-1]["event"] == "delete" and audit[-1]["before"]["content"] == "My bike lock code is 2468"


@BOTH_STORES
def test_the_answerer_keeps_no_sentence_of_an_owner_who_changed_deleted_or_was_forgotten(make_memory, face_probe):
    mem = make_memory()
    ana = mem.enroll("ana", [face_probe(ANA, 0)])
    ben = mem.enroll("ben", [face_probe(BEN, 0)])
    locker = mem.add("My gym locker code is 7319", identity=ana.id)
    mem.add("I like my coffee strong and black", identity=ben.id)

    assert "7319" in mem.ask("What is my locker code?", probe=face_probe(ANA, 1)).text
    assert mem.ask("How do I like my coffee?", probe=face_probe(BEN, 1)).text == "I like my coffee strong and black"
    assert mem.llm.cached_owners() == {ana.id, ben.id}
    mem.update(locker.id, "My gym locker code is 8426", probe=face_probe(ANA, 1))
    assert mem.llm.cached_owners() == {ben.id}
    assert "8426" in mem.ask("What is my locker code?", probe=face_probe(ANA, 1)).text
    mem.delete(locker.id, probe=face_probe(ANA, 1))
    assert mem.llm.cached_owners() == {ben.id}
    mem.forget(identity=ben.id)
    assert mem.llm.cached_owners() == set()


def test_a_deleted_note_vector_leaves_the_hnsw_index_file(make_memory, face_probe, tmp_path):
    mem = make_memory("hnswdel.db", hnsw_threshold=3)
    ana = mem.enroll("ana", [face_probe(ANA, 0)])
    notes = [mem.add(f"Errand number {i}: buy {thing}", identity=ana.id)
             for i, thing in enumerate(["milk", "stamps", "a lamp", "tea"])]
    mem.search("errand", probe=face_probe(ANA, 1))  # the partition is an hnsw index now
    (blob,) = mem.store.db.execute("SELECT embedding FROM notes WHERE id = ?", [notes[1].id]).fetchone()

    def index_bytes() -> bytes:
        mem.partitions.flush()
        return b"".join(p.read_bytes() for p in (tmp_path / "hnswdel.db.index").glob("*"))

    assert bytes(blob) in index_bytes()  # the needle is findable while the note exists
    mem.delete(notes[1].id, probe=face_probe(ANA, 1))
    assert bytes(blob) not in index_bytes()
    hits = mem.search("buy stamps", probe=face_probe(ANA, 1), k=4).notes
    assert sorted(n.id for n, _ in hits) == sorted(n.id for n in notes if n.id != notes[1].id)


@BOTH_STORES
def test_links_join_only_notes_of_one_owner(make_memory, face_probe):
    mem = make_memory()
    ana = mem.enroll("ana", [face_probe(ANA, 0)])
    ben = mem.enroll("ben", [face_probe(BEN, 0)])
    mem.add_many(["I love hiking in the Alps", "Hiking in the Alps is my favourite holiday"], identity=ben.id)
    mem.add_many(["I love hiking in the Alps", "We went hiking in the Alps again"], identity=ana.id)
    for owner in (ana, ben):
        notes = mem.store.all_notes(owner.id)
        assert any(n.links for n in notes), "similar notes of one owner should be linked"
        assert all(set(n.links) <= {m.id for m in notes} for n in notes)
    with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):  # storage itself refuses a cross-owner link
        ben_note = mem.get_all(probe=face_probe(BEN, 0))[0]
        ana_note = mem.get_all(probe=face_probe(ANA, 0))[0]
        mem.store.add_links(ana.id, ana_note.id, [ben_note.id])


def test_links_expand_retrieval_within_the_owner_only_even_if_a_link_is_forged(make_memory, face_probe):
    mem = make_memory()
    ana = mem.enroll("ana", [face_probe(ANA, 0)])
    ben = mem.enroll("ben", [face_probe(BEN, 0)])
    bens = mem.add("Ben's safe code is 9931", identity=ben.id)
    dog = mem.add("I adopted a beagle called Biscuit", identity=ana.id)
    vet = mem.add("The vet appointment is on Monday at 9", identity=ana.id)
    mem.add("My favourite colour is green", identity=ana.id)
    mem.store.add_links(ana.id, dog.id, [vet.id])  # a link evolution would make
    with mem.store.transaction() as db:  # forge a cross-owner link around the trigger
        db.execute("DROP TRIGGER links_same_owner")
        db.execute("INSERT INTO links VALUES (?, ?, ?)", [ana.id, dog.id, bens.id])
    probe = face_probe(ANA, 1)
    plain = mem.search("my dog Biscuit", probe=probe, k=1)
    expanded = mem.search("my dog Biscuit", probe=probe, k=1, links=5)
    assert [n.id for n, _ in plain.notes] == [n.id for n, _ in expanded.notes] == [dog.id]
    assert plain.linked == [] and [(n.id, via) for n, via in expanded.linked] == [(vet.id, dog.id)]
    assert expanded.gate.admitted == plain.gate.admitted and expanded.gated_out == plain.gated_out
    assert expanded.as_dict()["linked"][0]["via"] == dog.id and "linked" not in plain.as_dict()
    answer = mem.ask("When is the vet for my dog Biscuit?", probe=probe, k=1, links=5)
    assert "vet appointment" in answer.prompt and "9931" not in answer.prompt
    assert mem.search("my dog Biscuit", probe=probe, k=1, links=1).linked[0][0].id == vet.id
    with pytest.raises(InvalidInputError):
        mem.search("my dog", probe=probe, links=-1)


class Retagger(OfflineLLM):
    """The offline analysis, and an evolution that always re-tags the new note and re-writes its neighbours."""

    def evolve(self, draft, neighbours):
        return Evolution(should_evolve=True, actions=["strengthen", "update_neighbor"],
                         suggested_connections=[n.id for n, _ in neighbours],
                         tags_to_update=["retagged", *draft.tags[:1]],
                         new_context_neighborhood=[f"seen again beside: {draft.content}" for _ in neighbours],
                         new_tags_neighborhood=[["neighbour", f"after-{len(draft.content)}"] for _ in neighbours])


@BOTH_STORES
def test_every_stored_vector_embeds_its_note_as_stored_after_evolution(make_memory, face_probe, text_encoder):
    mem = make_memory("evolving.db", llm=Retagger(text_encoder))
    ana = mem.enroll("ana", [face_probe(ANA, 0)])
    mem.add_many([f"I walked the dog along route {i} today" for i in range(4)], identity=ana.id)
    for i in range(3):
        mem.add(f"The dog found a stick on route {i}", identity=ana.id)
    notes = {n.id: n for n in mem.store.all_notes(ana.id)}
    assert any("retagged" in n.tags for n in notes.values())  # evolution did change what is stored
    assert any(n.context.startswith("seen again beside") for n in notes.values())
    ids, vectors, _ = mem.store.note_vectors(ana.id)
    fresh = mem.agent.embed([notes[int(i)] for i in ids])
    assert np.abs(vectors - fresh).max() < 1e-5  # the vector is the embedding of the note as stored


def test_forget_leaves_no_row_no_vector_and_no_bytes(make_memory, face_probe, tmp_path):
    mem = make_memory("forget.db", hnsw_threshold=3)
    ana = mem.enroll("ana", [face_probe(ANA, 0)])
    ben = mem.enroll("ben", [face_probe(BEN, 0)])
    secret = "Ana keeps the spare key under the blue flowerpot"
    mem.add_many([secret, "Ana's passport number is X1234567", "Ana fears spiders", "Ana likes tea"],
                 identity=ana.id)
    mem.add_many(["Ben likes coffee"], identity=ben.id)
    mem.search("key", probe=face_probe(ANA, 0))  # builds Ana's hnsw index file
    index_dir = tmp_path / "forget.db.index"
    assert (index_dir / f"owner-{ana.id}.hnsw").exists()

    assert mem.forget(identity=ana.id) == ana.id

    db = mem.store.db
    for table, column in (("identities", "id"), ("templates", "identity_id"), ("notes", "owner_id"),
                          ("links", "owner_id"), ("history", "owner_id")):
        assert db.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} = ?", [ana.id]).fetchone()[0] == 0
    assert not list(index_dir.glob(f"owner-{ana.id}.*"))
    assert ana.id not in mem.partitions.cached_owners()
    gate = mem.identify(face_probe(ANA, 0))
    assert gate.identity is None and ana.id not in gate.scores
    assert mem.search("coffee", probe=face_probe(BEN, 0)).notes[0][0].content == "Ben likes coffee"
    mem.close()
    for path in tmp_path.glob("forget.db*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"{path.name} still holds the text"


@BOTH_STORES
def test_reopening_gives_the_same_results(make_memory, face_probe, tmp_path):
    mem = make_memory("reopen.db")
    ana = mem.enroll("ana", [face_probe(ANA, 0)])
    mem.add_many([f"Memory number {i} about topic {i % 7}" for i in range(40)], identity=ana.id)
    before = [(n.id, round(s, 5)) for n, s in mem.search("topic 3", probe=face_probe(ANA, 1)).notes]
    mem.close()
    again = make_memory("reopen.db")
    after = [(n.id, round(s, 5)) for n, s in again.search("topic 3", probe=face_probe(ANA, 1)).notes]
    assert before == after and len(before) == 10
    assert again.modality == "face-arcface-s"


def test_missing_or_stale_index_files_are_rebuilt(make_memory, face_probe, tmp_path):
    mem = make_memory("rebuild.db", hnsw_threshold=20)
    ana = mem.enroll("ana", [face_probe(ANA, 0)])
    mem.add_many([f"Diary entry {i}: the weather was {['sunny', 'rainy', 'windy'][i % 3]}" for i in range(60)],
                 identity=ana.id)
    expected = [n.id for n, _ in mem.search("rainy day", probe=face_probe(ANA, 1)).notes]
    mem.close()
    index_file = tmp_path / "rebuild.db.index" / f"owner-{ana.id}.hnsw"
    assert index_file.exists()
    index_file.unlink()
    reopened = make_memory("rebuild.db", hnsw_threshold=20)
    assert [n.id for n, _ in reopened.search("rainy day", probe=face_probe(ANA, 1)).notes] == expected
    assert index_file.exists()
    reopened.close()
    stamp = (tmp_path / "rebuild.db.index" / f"owner-{ana.id}.json").read_text()
    # A stale file is not trusted: another writer (here one that never uses hnsw) changes the store.
    exact_writer = make_memory("rebuild.db", hnsw_threshold=10**9)
    exact_writer.add("Diary entry 60: we saw a purple giraffe at the zoo", identity=ana.id)
    exact_writer.close()
    assert (tmp_path / "rebuild.db.index" / f"owner-{ana.id}.json").read_text() == stamp
    third = make_memory("rebuild.db", hnsw_threshold=20)
    top = third.search("purple giraffe", probe=face_probe(ANA, 1)).notes
    assert top[0][0].content == "Diary entry 60: we saw a purple giraffe at the zoo"
    assert (tmp_path / "rebuild.db.index" / f"owner-{ana.id}.json").read_text() != stamp


@pytest.mark.slow
def test_exact_and_hnsw_partitions_give_identical_top_k(make_memory, face_probe, text_encoder):
    texts = [f"Note {i}: I talked about {w} with my {p}" for i, (w, p) in enumerate(
        (w, p) for w in ("cooking", "music", "travel", "running", "painting", "books", "movies", "gardening")
        for p in ("mother", "friend", "boss", "neighbour", "coach", "teacher", "cousin", "doctor", "son"))]
    exact = make_memory("exact.db", hnsw_threshold=10**9)
    approx = make_memory("hnsw.db", hnsw_threshold=10)
    for mem in (exact, approx):
        owner = mem.enroll("ana", [face_probe(ANA, 0)])
        mem.add_many(texts, identity=owner.id, timestamps=["2024-01-01T00:00:00"] * len(texts))
    assert approx.partitions.get(1).hnsw is not None and exact.partitions.get(1).hnsw is None
    for query in ("music with a friend", "my doctor", "gardening", "running coach", "what did I read"):
        a = [n.id for n, _ in exact.search(query, probe=face_probe(ANA, 1)).notes]
        b = [n.id for n, _ in approx.search(query, probe=face_probe(ANA, 1)).notes]
        assert a == b and len(a) == 10


@pytest.mark.slow
@BOTH_STORES
def test_gate_equals_the_papers_per_note_indicator(make_memory, face_probe):
    """Template-level gating (U comparisons) admits exactly the notes the paper's rule admits."""
    mem = make_memory(policy="all")
    owners = [mem.enroll(f"person{p}", [face_probe(p, 0), face_probe(p, 1)]) for p in range(5)]
    for owner in owners:
        mem.add_many([f"{owner.label} note {i}" for i in range(3)], identity=owner.id)
    rng = np.random.default_rng(7)
    for person in range(7):
        probe = face_probe(person, 3)
        # The default τ, then thresholds low enough that impostors of ArcFace (cosine about -0.1 to 0.25) pass.
        for tau in (mem.threshold(), 0.2, 0.1, 0.0, float(rng.uniform(-0.1, 0.3))):
            mem.set_threshold(tau)
            admitted = {n.id for o in mem.identify(probe).admitted for n in mem.store.all_notes(o)}
            naive = set()
            for note_id, owner_id in [(n.id, n.owner) for o in owners for n in mem.store.all_notes(o.id)]:
                ids, templates = mem.store.templates("face-arcface-s")
                b_i = templates[ids == owner_id]  # the owner's biometric embedding(s) of this note
                cos = b_i @ probe.embedding / np.linalg.norm(b_i, axis=1) / np.linalg.norm(probe.embedding)
                if cos.max() >= tau:
                    naive.add(note_id)
            assert admitted == naive


@BOTH_STORES
def test_policy_best_admits_one_identity_and_all_admits_every_match(make_memory, face_probe):
    mem = make_memory()
    a = mem.enroll("ana", [face_probe(ANA, 0)])
    b = mem.enroll("ben", [face_probe(BEN, 0)])
    assert mem.identify(face_probe(BEN, 1)).admitted == [b.id]
    mem.set_threshold(-1.0)  # everybody matches everybody
    assert set(mem.identify(face_probe(BEN, 1), policy="all").admitted) == {a.id, b.id}
    assert mem.identify(face_probe(BEN, 1)).ambiguous  # "best" cannot tell two people above τ apart


@pytest.mark.slow
@pytest.mark.parametrize("hnsw_threshold", [20_000, 5], ids=["exact", "hnsw"])
@BOTH_STORES
def test_eight_threads_adding_and_searching_lose_nothing(make_memory, face_probe, hnsw_threshold):
    mem = make_memory("threads.db", hnsw_threshold=hnsw_threshold)
    people = [mem.enroll(f"p{p}", [face_probe(p, 0)]) for p in range(4)]
    probes = {o.id: face_probe(p, 1) for p, o in enumerate(people)}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            owner = people[t % 4]
            for i in range(12):
                mem.add(f"thread {t} memory {i}", probe=probes[owner.id])
                result = mem.search(f"memory {i}", probe=probes[owner.id], k=5)
                assert {n.owner for n, _ in result.notes} == {owner.id}
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert mem.store.note_total() == 96
    for p, owner in enumerate(people):
        notes = mem.get_all(probe=probes[owner.id])
        assert {n.content for n in notes} == {f"thread {t} memory {i}" for t in (p, p + 4) for i in range(12)}
        assert mem.partitions.size(owner.id) == 24


@BOTH_STORES
def test_bad_inputs_raise_typed_errors_and_write_nothing(family, capture, tmp_path, face_probe):
    mem, ana, ben = family
    before = table_rows(mem)
    not_image = tmp_path / "notes.txt"
    not_image.write_text("this is not an image")
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 50)
    blank = np.full((200, 200, 3), 127, dtype=np.uint8)
    cases = [
        (InvalidImageError, lambda: mem.search("x", probe=str(not_image))),
        (InvalidImageError, lambda: mem.enroll("carol", [str(corrupt)])),
        (NoFaceError, lambda: mem.add("hello", probe=blank)),
        (MultipleFacesError, lambda: mem.ask("What is my PIN?", probe=str(group_photo_path()))),
        (MultipleFacesError, lambda: mem.enroll("group", [str(group_photo_path())])),
        (ModalityMismatchError, lambda: mem.search("x", probe=Probe(np.ones(2048), "palm-compcode"))),
        (ModalityMismatchError, lambda: mem.search("x", probe=Probe(np.ones(64), "face-arcface-s"))),
        (InvalidInputError, lambda: mem.add("   ", identity=ana.id)),
        (InvalidInputError, lambda: mem.add("two owners", identity=ana.id, probe=capture(ANA, 1))),
        (InvalidInputError, lambda: mem.add("bad time", identity=ana.id, timestamp="next Tuesday-ish")),
        (InvalidInputError, lambda: mem.enroll("", [capture(ANA, 1)])),
        (UnknownIdentityError, lambda: mem.add("nobody", identity=999)),
        (NoteNotFoundError, lambda: mem.get(12345, probe=capture(ANA, 1))),
        (NoteNotFoundError, lambda: mem.delete(3, probe=capture(ANA, 1))),  # Ben's note
    ]
    for error, call in cases:
        with pytest.raises(error):
            call()
    assert table_rows(mem) == before


def test_corrupt_or_foreign_database_files_are_refused_untouched(tmp_path, text_encoder, face_encoder):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"definitely not sqlite " * 100)
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    for path in (garbage, foreign):
        original = path.read_bytes()
        with pytest.raises(StoreCorruptError):
            BioMemory(path, text_model=text_encoder, encoder=face_encoder)
        assert path.read_bytes() == original


@pytest.mark.parametrize("raw,iso", [
    ("1:56 pm on 8 May, 2023", "2023-05-08T13:56:00"),
    ("12:09 am on 13 September, 2023", "2023-09-13T00:09:00"),
    ("10:31 AM on 1 Jan, 2024", "2024-01-01T10:31:00"),
    ("2023-05-08T13:56:00", "2023-05-08T13:56:00"),
    ("2023-05-08 13:56:00+02:00", "2023-05-08T13:56:00+02:00"),
])
def test_timestamps_in_iso_and_locomo_form(raw, iso):
    from biomem.notes.timeparse import parse_timestamp

    assert parse_timestamp(raw) == iso


@BOTH_STORES
def test_multimodal_probes_fuse_per_policy(make_memory, face_probe):
    mem = make_memory()
    rng = np.random.default_rng(3)
    palm = {name: rng.normal(size=64) for name in ("ana", "other")}
    ana = mem.enroll("ana", [face_probe(ANA, 0)])
    ben = mem.enroll("ben", [face_probe(BEN, 0)])  # face only
    mem.set_threshold(0.8, "palm-test")
    mem.add_templates(ana.id, [Probe(palm["ana"], "palm-test")])
    mem.add("Ana's gym locker is 42", identity=ana.id)

    def gate(face, palm_vector, fusion):
        return mem.identify({"face-arcface-s": face, "palm-test": Probe(palm_vector, "palm-test")}, fusion=fusion)

    both = gate(face_probe(ANA, 2), palm["ana"] + 0.05 * rng.normal(size=64), "all")
    assert both.identity == ana.id and both.fusion == "all"
    assert [c.modality for c in both.components] == ["face-arcface-s", "palm-test"]
    assert both.as_dict()["components"][1]["identity"] == ana.id

    wrong_palm = gate(face_probe(ANA, 2), palm["other"], "all")
    assert wrong_palm.identity is None
    assert gate(face_probe(ANA, 2), palm["other"], "any").identity == ana.id
    # Ben has no palm template: "all" cannot admit him, "any" can through his face.
    assert gate(face_probe(BEN, 2), palm["other"], "all").identity is None
    assert gate(face_probe(BEN, 2), palm["other"], "any").identity == ben.id
    # "sum": a strong face margin cannot carry a palm that misses by far more.
    summed = gate(face_probe(ANA, 2), palm["other"], "sum")
    face_margin = summed.components[0].scores[ana.id] - summed.components[0].threshold
    palm_margin = summed.components[1].scores[ana.id] - summed.components[1].threshold
    assert summed.scores[ana.id] == pytest.approx(face_margin + palm_margin)
    assert (summed.identity == ana.id) == (face_margin + palm_margin >= 0)
    fused_search = mem.search("locker", probe={"face-arcface-s": face_probe(ANA, 2),
                                               "palm-test": Probe(palm["ana"], "palm-test")})
    assert [n.content for n, _ in fused_search.notes] == ["Ana's gym locker is 42"]


@BOTH_STORES
def test_kept_out_summary_is_a_total_for_the_owner_and_nothing_for_a_stranger(family, capture):
    mem, ana, ben = family
    owner = mem.search("PIN", probe=capture(ANA, 2)).as_dict()
    assert owner["gated_out"] == {"total": 2}
    assert owner["gate"]["label"] == "ana" and "ben" not in str(owner)
    stranger = mem.search("PIN", probe=capture(CHLOE, 2)).as_dict()
    assert stranger == {"results": [], "gate": {"matched": False, "modality": "face-arcface-s"}, "gated_out": None}


@BOTH_STORES
def test_a_private_reply_never_scans_every_owner_s_notes(family, capture, monkeypatch):
    """The kept-out total comes from the note counter and the admitted partitions, the score from the
    admitted identity alone: a search at a million notes / 10,000 identities must not aggregate every
    note (175 ms there) nor build every identity's score (5 ms)."""
    mem, ana, _ = family

    def no_full_scan(owners=None):
        assert owners is not None, "a request aggregated every owner's notes"
        return {}
    monkeypatch.setattr(mem.store, "note_summary", no_full_scan)
    monkeypatch.setattr(GateResult, "scores", property(lambda gate: pytest.fail("every identity's score built")))
    result = mem.search("my PIN", probe=capture(ANA, 3))
    assert result.view["gated_out"] == {"total": 2} and result.gated_out == 2
    assert mem.search("my PIN", probe=capture(CHLOE, 1)).view["gated_out"] is None
    assert mem.overview()["samples"] is None


def stored_clients(mem: BioMemory, backend: str) -> list[str]:
    """Every client the store's attempt-limit tables hold."""
    sql = "SELECT client FROM attempts UNION SELECT client FROM cooldowns"
    if backend == "sqlite":
        return [row[0] for row in mem.store.db.execute(sql).fetchall()]
    with mem.store.transaction() as conn:
        return [row[0] for row in conn.execute(sql).fetchall()]


@BOTH_STORES
def test_attempt_limits_are_shared_by_every_engine_on_the_store_and_outlive_a_restart(
        family, database, backend, capture, text_encoder, face_encoder, clock):
    """Two engines on one store stand for two replicas: misses counted by one refuse the client's address in the
    other once its daily budget is spent, until the oldest miss ages out (no doubling), and the refusal survives a
    reopen; only keyed digests are stored."""
    _, ana, _ = family
    limits = AttemptLimits(misses=2, window=60.0, cooldown=30.0, budget=2)
    day = limits.budget_window

    def engine() -> BioMemory:
        mem = BioMemory(database(), text_model=text_encoder, encoder=face_encoder, limits=limits)
        mem.limiter.clock = clock  # BioMemory's own limiter, on a clock the test moves
        return mem
    here, there = engine(), engine()
    client, elsewhere = ["session:attempt-test-session", "address:203.0.113.9"], ["address:198.51.100.1"]
    first = clock.now + 1
    for _ in range(2):
        clock.now += 1
        assert here.identify(capture(CHLOE, 3), client=client).identity is None
    with pytest.raises(TooManyAttemptsError) as refused:  # even Ana's face, from that client
        there.search("PIN", probe=capture(ANA, 5), client=client)
    assert refused.value.retry_after == pytest.approx(first + day - clock.now)
    assert there.search("PIN", probe=capture(ANA, 5), client=elsewhere).gate.identity == ana.id
    moved = ["session:attempt-test-session", "address:198.51.100.2"]  # the same session at another address
    assert there.search("PIN", probe=capture(ANA, 5), client=moved).gate.identity == ana.id
    clock.now = first + day + 0.5  # the first miss aged out: room for one more, then refused again ...
    assert there.identify(capture(CHLOE, 4), client=client).identity is None
    third = clock.now
    with pytest.raises(TooManyAttemptsError) as refused:
        here.identify(capture(ANA, 5), client=client)
    assert refused.value.retry_after == pytest.approx(first + 1 + day - clock.now)  # ... until the second does
    clock.now += refused.value.retry_after + 1
    here.identify(capture(CHLOE, 4), client=client)
    here.close()
    there.close()
    again = engine()  # a restart: the address alone is still refused, until the third miss ages out: never doubled
    with pytest.raises(TooManyAttemptsError) as refused:
        again.identify(capture(ANA, 5), client=["address:203.0.113.9"])
    assert refused.value.retry_after == pytest.approx(third + day - clock.now) and refused.value.retry_after < day
    clients = stored_clients(again, backend)
    assert clients and all(re.fullmatch(r"[0-9a-f]{32}", c) for c in clients)
    again.close()
    if backend == "sqlite":
        on_disk = b"".join(path.read_bytes() for path in database().parent.glob(f"{database().name}*"))
        assert b"203.0.113.9" not in on_disk and b"attempt-test-session" not in on_disk


# Version 4's SQLite tables that version 5 changed (from biomem/stores/sqlite/schema.py as it was at version 4),
# with the columns they had: an older store is rebuilt in this shape to test its upgrade.
V4_SQLITE = {
    "identities": ("id, label, label_key, created, generation, sample", """CREATE TABLE identities (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    label TEXT NOT NULL,
    label_key TEXT NOT NULL UNIQUE,
    created TEXT NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,
    sample INTEGER NOT NULL DEFAULT 0)"""),
    "notes": ("id, owner_id, content, timestamp, keywords, tags, context, embedding", """CREATE TABLE notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    content TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    keywords TEXT NOT NULL DEFAULT '[]',
    tags TEXT NOT NULL DEFAULT '[]',
    context TEXT NOT NULL DEFAULT '',
    embedding BLOB NOT NULL)"""),
    "history": ("id, owner_id, note_id, event, before, after, at", """CREATE TABLE history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    note_id INTEGER NOT NULL,
    event TEXT NOT NULL,
    before TEXT,
    after TEXT,
    at TEXT NOT NULL)"""),
    "thresholds": ("modality, tau, source, tau_strict, strict_source, updated", """CREATE TABLE thresholds (
    modality TEXT PRIMARY KEY,
    tau REAL,
    source TEXT,
    tau_strict REAL,
    strict_source TEXT,
    updated TEXT NOT NULL)"""),
}
V4_SQLITE_EXTRAS = (
    "CREATE INDEX notes_by_owner ON notes(owner_id, timestamp)",
    "CREATE INDEX history_by_note ON history(owner_id, note_id)",
    "CREATE TRIGGER notes_counted AFTER INSERT ON notes "
    "BEGIN UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'note_total'; END",
    "CREATE TRIGGER notes_uncounted AFTER DELETE ON notes "
    "BEGIN UPDATE meta SET value = CAST(value AS INTEGER) - 1 WHERE key = 'note_total'; END",
)
V4_POSTGRES = ("DROP TABLE sources", "DROP TABLE hidden", "DROP TABLE members",  # sources: version 9
               "ALTER TABLE identities DROP COLUMN kind CASCADE",
               "ALTER TABLE notes DROP COLUMN author_id CASCADE, DROP COLUMN metadata CASCADE",
               "ALTER TABLE history DROP COLUMN actor_id CASCADE, DROP COLUMN cause_id CASCADE",
               "ALTER TABLE thresholds DROP COLUMN delta, DROP COLUMN delta_source")
# every row an older store holds, by the columns it had, in key order
OLD_ROWS = {"identities": ("id", V4_SQLITE["identities"][0]), "templates": ("id", "*"),
            "notes": ("id", V4_SQLITE["notes"][0].replace("embedding", "embedding::text")),
            "links": ("source_id, target_id", "*"), "history": ("id", V4_SQLITE["history"][0]),
            "thresholds": ("modality", V4_SQLITE["thresholds"][0]), "api_keys": ("id", "*")}


def run_as_owner(backend: str, location, statements, query: bool = False):
    """Statements on the store itself: SQLite's file with foreign keys off, or PostgreSQL as the tables' owner.
    With `query`, the rows of each (a SELECT) instead."""
    if backend == "sqlite":
        conn = sqlite3.connect(location, isolation_level=None)
        try:
            conn.execute("PRAGMA foreign_keys=OFF")
            conn.execute("BEGIN")
            found = [conn.execute(s.replace("::text", "")).fetchall() for s in statements]
            conn.execute("COMMIT")
            problems = conn.execute("PRAGMA foreign_key_check").fetchall()
            assert problems == []
        finally:
            conn.close()
    else:
        with psycopg.connect(location) as conn:
            conn.execute("SET search_path = biomem, public")
            found = [conn.execute(s).fetchall() if query else conn.execute(s) and None for s in statements]
    return found if query else None


def old_rows(backend: str, location) -> dict[str, list]:
    sql = [f"SELECT {columns} FROM {table} ORDER BY {key}" for table, (key, columns) in OLD_ROWS.items()]
    return dict(zip(OLD_ROWS, run_as_owner(backend, location, sql, query=True)))


def table_columns(backend: str, location) -> dict[str, list[str]]:
    """Every table's columns, in order."""
    if backend == "sqlite":
        tables = [t for (t,) in run_as_owner(backend, location, [
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"], query=True)[0]]
        infos = run_as_owner(backend, location, [f"SELECT name FROM pragma_table_info('{t}')" for t in tables],
                             query=True)
        return {t: [c for (c,) in info] for t, info in zip(tables, infos)}
    (rows,) = run_as_owner(backend, location, ["SELECT table_name, column_name FROM information_schema.columns "
                                               "WHERE table_schema = 'biomem' ORDER BY table_name, ordinal_position"],
                           query=True)
    columns: dict[str, list[str]] = {}
    for table, column in rows:
        columns.setdefault(table, []).append(column)
    return columns


@pytest.mark.parametrize("old_version", [3, 4])
@BOTH_STORES
def test_an_older_store_is_upgraded_to_groups_keeping_every_row(family, database, backend, capture, make_memory,
                                                              old_version, text_encoder, face_encoder):
    """A store of version 4 (no groups: no kind, author, metadata or actor columns, no members or hidden
    tables, no ambiguity margin or evolution cause columns), or of version 3 (no attempt tables either), opens as
    the current version with every row as it was, and households work on it."""
    mem, ana, ben = family
    note = mem.get_all(probe=capture(ANA, 2))[0]
    mem.update(note.id, "My PIN is now 4321", probe=capture(ANA, 3))  # history beyond "add"
    mem.store.add_links(ana.id, note.id, [n.id for n in mem.store.all_notes(ana.id) if n.id != note.id])
    notes, identities = mem.store.note_total(), len(mem.identities())
    mem.close()
    location = str(database())
    older = [f"UPDATE meta SET value = '{old_version}' WHERE key = 'schema_version'"]
    if old_version == 3:
        older += ["DROP TABLE attempts", "DROP TABLE cooldowns"]
    if backend == "sqlite":
        rebuild = ["DROP TABLE sources", "DROP TABLE hidden", "DROP TABLE members"]
        for table, (columns, create) in V4_SQLITE.items():
            rebuild += [f"CREATE TABLE {table}_v4 AS SELECT {columns} FROM {table}", f"DROP TABLE {table}",
                        create, f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {table}_v4",
                        f"DROP TABLE {table}_v4"]
        run_as_owner(backend, location, rebuild + list(V4_SQLITE_EXTRAS) + older)
    else:
        run_as_owner(backend, location, list(V4_POSTGRES) + older)
    columns = table_columns(backend, location)
    assert "members" not in columns and "hidden" not in columns and "kind" not in columns["identities"]
    assert ("attempts" in columns) == (old_version == 4)
    before = old_rows(backend, location)
    assert len(before["notes"]) == notes and len(before["links"]) == 1 and len(before["history"]) == 5

    again = BioMemory(location, text_model=text_encoder, encoder=face_encoder,
                   limits=AttemptLimits(misses=1, window=60.0, cooldown=30.0, budget=1))
    assert again.store.get_meta("schema_version") == str(SQLITE_VERSION if backend == "sqlite" else PG_VERSION)
    assert old_rows(backend, location) == before
    assert (again.store.note_total(), len(again.identities())) == (notes, identities)
    fresh = make_memory("fresh.db")
    assert table_columns(backend, location) == table_columns(backend, str(database("fresh.db")))
    fresh.close()
    for person in (ana, ben):  # the old notes were written by their owners; history has no actor
        for old in again.store.all_notes(person.id):
            assert (old.author, old.scope, old.metadata, old.hidden_from) == (person.id, None, {}, [])
            assert all(event["actor"] is None for event in again.store.history(person.id, old.id))
    assert again.get(note.id, probe=capture(ANA, 4)).content == "My PIN is now 4321"

    home = again.create_group("Home", probe=capture(ANA, 3))
    again.add_member(home.id, probe=capture(ANA, 3), member_probe=capture(BEN, 3))
    wifi = again.add("The wifi password is tulip-meadow-42", probe=capture(BEN, 4), scope=home.id,
                     metadata={"room": "hall"})
    for person in (ANA, BEN):
        hit = again.search("what is the wifi password", probe=capture(person, 5), k=1).notes[0][0]
        assert (hit.id, hit.scope, hit.author, hit.metadata) == (wifi.id, home.id, ben.id, {"room": "hall"})
    assert [n.content for n in again.get_all(probe=capture(ANA, 4), filters={"scope": None})] == \
        ["My PIN is now 4321", "I adopted a beagle puppy called Rex"]
    assert again.identify(capture(CHLOE, 3), client=["address:203.0.113.9"]).identity is None
    with pytest.raises(TooManyAttemptsError):
        again.identify(capture(ANA, 5), client=["address:203.0.113.9"])
    assert again.identify(capture(ANA, 5)).identity == ana.id
    again.close()


def test_a_store_opened_for_an_engine_that_fails_to_load_is_closed_again(tmp_path, text_encoder):
    """A missing text model (or any later failure while loading) leaves no open store behind: the file is closed,
    its write-ahead log checkpointed and gone, and the next open works."""
    db = tmp_path / "fails.db"
    with pytest.raises(ModelUnavailableError):
        BioMemory(db, text_model=str(tmp_path / "no-such-model"))
    assert db.exists() and not db.with_name("fails.db-wal").exists()
    with BioMemory(db, text_model=text_encoder) as mem:
        assert mem.store.note_total() == 0
