"""Deletion erases derived copies: what a note's evolution wrote into its neighbours (their context, tags,
history events and vectors) goes when the note is deleted or rewritten, and the neighbours' other evolution stays."""

from __future__ import annotations

import json

import numpy as np

from biomem import BioMemory
from biomem.notes.llm import Evolution, OfflineLLM

from .conftest import BOTH_STORES
from .shared import ANA, files_holding, note_blobs, vacuumed_database_files_holding

SECRET = "The garden shed padlock code is quokka-7731"
WORD = "quokka"


class Copycat(OfflineLLM):
    """The offline analysis, and a hostile evolution that copies each new note into every neighbour: its text
    appended to the neighbour's context, its last word added to the neighbour's tags."""

    def evolve(self, draft, neighbours):
        return Evolution(should_evolve=True, actions=["update_neighbor"], suggested_connections=[],
                         tags_to_update=draft.tags,
                         new_context_neighborhood=[f"{n.context} | heard: {draft.content}" for n, _ in neighbours],
                         new_tags_neighborhood=[[*n.tags, draft.content.split()[-1]] for n, _ in neighbours])


def fields(mem: BioMemory, owner: int, note_id: int) -> tuple[str, list[str]]:
    note = mem.store.get_note(owner, note_id)
    return note.context, note.tags


def everything(mem: BioMemory, owner: int, note_ids: list[int]) -> str:
    """Every note of the owner and the history of every note in `note_ids` (deleted ones too), as one text."""
    notes = [n.as_dict() for n in mem.store.all_notes(owner)]
    return json.dumps(notes + [mem.store.history(owner, i) for i in note_ids])


def assert_vectors_embed_notes(mem: BioMemory, owner: int) -> None:
    """Every stored vector of the owner is the embedding of its note as stored: none derives from removed words."""
    ids, vectors, _ = mem.store.note_vectors(owner)
    notes = {n.id: n for n in mem.store.all_notes(owner)}
    assert np.abs(vectors - mem.agent.embed([notes[int(i)] for i in ids])).max() < 1e-5


def shed(mem: BioMemory, owner: int):
    """bike, then squeak (evolves bike), then the secret (evolves both), then roof (evolves all three): the notes,
    and bike's and squeak's fields just before the secret arrived."""
    bike = mem.add("I keep my bicycle in the garden shed", identity=owner, timestamp="2024-04-01T09:00:00")
    squeak = mem.add("The garden shed door squeaks in the rain", identity=owner, timestamp="2024-04-02T09:00:00")
    before = {bike.id: fields(mem, owner, bike.id), squeak.id: fields(mem, owner, squeak.id)}
    assert "squeaks" in before[bike.id][0] and "rain" in before[bike.id][1]  # an earlier, unrelated evolution
    secret = mem.add(SECRET, identity=owner, timestamp="2024-04-03T09:00:00")
    roof = mem.add("The shed roof needs new tiles", identity=owner, timestamp="2024-04-04T09:00:00")
    for note in (bike, squeak):
        context, tags = fields(mem, owner, note.id)
        assert WORD in context and "quokka-7731" in tags and "tiles" in context  # the copies, and a later evolution
    return bike, squeak, secret, roof, before


@BOTH_STORES
def test_deleting_a_note_erases_what_its_evolution_wrote_into_its_neighbours(make_memory, face_probe, text_encoder,
                                                                             backend, tmp_path):
    """To the byte: in any file of a SQLite store, in the database's files of a PostgreSQL store once VACUUM FULL
    has run (its WAL is not looked at)."""
    mem = make_memory("purge.db", llm=Copycat(text_encoder), hnsw_threshold=3)
    ana = mem.enroll("ana", [face_probe(ANA, 0), face_probe(ANA, 1)]).id
    bike, squeak, secret, roof, before = shed(mem, ana)
    ids = [bike.id, squeak.id, secret.id, roof.id]
    assert mem.search("garden shed", probe=face_probe(ANA, 2)).notes  # builds the hnsw index (4 notes >= 3)
    if backend == "sqlite":
        mem.partitions.flush()
        needles = {"secret": WORD.encode(), **note_blobs(mem, [bike.id, squeak.id])}
        assert set(files_holding(tmp_path, needles)) >= {f"purge.db.index/owner-{ana}.hnsw"}
    else:
        needles = {"secret": WORD.encode()}
        assert vacuumed_database_files_holding(mem, needles)

    mem.delete(secret.id, probe=face_probe(ANA, 3))

    for note in (bike, squeak):  # back to just before the secret: the earlier evolution (squeak's) survives
        assert fields(mem, ana, note.id) == before[note.id]
    assert [e["event"] for e in mem.store.history(ana, bike.id)] == ["add", "evolve", "unevolve"]
    assert [e["event"] for e in mem.store.history(ana, squeak.id)] == ["add", "unevolve"]
    assert mem.store.history(ana, bike.id)[-1]["before"] is None
    assert WORD not in everything(mem, ana, ids)
    assert WORD not in json.dumps([n.as_dict() for n in mem.get_all(probe=face_probe(ANA, 3))])
    assert_vectors_embed_notes(mem, ana)
    hits = mem.search(SECRET, probe=face_probe(ANA, 2), k=10, links=5)
    assert secret.id not in [n.id for n, _ in hits.notes]
    assert WORD not in json.dumps([n.as_dict() for n, _ in hits.notes])
    if backend == "sqlite":
        mem.partitions.flush()
        assert files_holding(tmp_path, needles) == {}
        mem.close()
        assert files_holding(tmp_path, needles) == {}
    else:
        assert vacuumed_database_files_holding(mem, needles) == {}


@BOTH_STORES
def test_updating_a_note_erases_what_its_old_text_wrote_into_its_neighbours(make_memory, face_probe, text_encoder):
    mem = make_memory("purge-update.db", llm=Copycat(text_encoder))
    ana = mem.enroll("ana", [face_probe(ANA, 0), face_probe(ANA, 1)]).id
    bike, squeak, secret, roof, before = shed(mem, ana)

    mem.update(secret.id, "The garden shed padlock was replaced", probe=face_probe(ANA, 3))

    for note in (bike, squeak):
        assert fields(mem, ana, note.id) == before[note.id]
    assert WORD not in everything(mem, ana, [bike.id, squeak.id, roof.id])
    assert WORD not in json.dumps([n.as_dict() for n in mem.get_all(probe=face_probe(ANA, 3))])
    assert WORD in json.dumps(mem.store.history(ana, secret.id))  # its own history keeps its old text until deleted
    neighbours = [fields(mem, ana, i) for i in (bike.id, squeak.id)] + [mem.store.history(ana, bike.id)]
    assert "replaced" not in json.dumps(neighbours)  # the new text does not re-run evolution
    assert_vectors_embed_notes(mem, ana)


@BOTH_STORES
def test_restoration_is_per_neighbour_when_several_notes_evolved_it(make_memory, face_probe, text_encoder):
    mem = make_memory("purge-many.db", llm=Copycat(text_encoder))
    ana = mem.enroll("ana", [face_probe(ANA, 0)]).id
    base = mem.add("Rex the beagle sleeps in the kitchen", identity=ana, timestamp="2024-05-01T09:00:00")
    pristine = fields(mem, ana, base.id)
    first = mem.add("Rex chewed the red slipper", identity=ana, timestamp="2024-05-02T09:00:00")
    after_first = fields(mem, ana, base.id)
    first_alone = fields(mem, ana, first.id)
    middle = mem.add("Rex barks at the postman", identity=ana, timestamp="2024-05-03T09:00:00")
    last = mem.add("Rex loves the park by the river", identity=ana, timestamp="2024-05-04T09:00:00")
    last_fields = fields(mem, ana, last.id)

    mem.delete(middle.id, probe=face_probe(ANA, 1))

    assert fields(mem, ana, base.id) == after_first  # first's evolution stays, middle's and the later one's go
    assert fields(mem, ana, first.id) == first_alone  # first was evolved from middle on: back to itself
    assert fields(mem, ana, last.id) == last_fields  # middle never evolved the note written after it
    assert "postman" not in everything(mem, ana, [base.id, first.id, middle.id, last.id])

    mem.delete(first.id, probe=face_probe(ANA, 1))

    assert fields(mem, ana, base.id) == pristine
    assert [e["event"] for e in mem.store.history(ana, base.id)] == ["add", "unevolve"]
    assert "slipper" not in everything(mem, ana, [base.id, first.id, middle.id, last.id])
    assert_vectors_embed_notes(mem, ana)


@BOTH_STORES
def test_a_neighbour_rewritten_after_the_copy_keeps_its_new_fields_and_loses_the_copy(make_memory, face_probe,
                                                                                        text_encoder):
    """An update re-analyses a note from its content alone: the copy left its fields then, but the update's before
    still held it; that goes, the update's fields stay."""
    mem = make_memory("purge-rewritten.db", llm=Copycat(text_encoder))
    ana = mem.enroll("ana", [face_probe(ANA, 0)]).id
    bike = mem.add("I keep my bicycle in the garden shed", identity=ana, timestamp="2024-04-01T09:00:00")
    secret = mem.add(SECRET, identity=ana, timestamp="2024-04-03T09:00:00")
    assert WORD in fields(mem, ana, bike.id)[0]
    mem.update(bike.id, "I keep my bicycle in the hallway", probe=face_probe(ANA, 1))
    rewritten = fields(mem, ana, bike.id)

    mem.delete(secret.id, probe=face_probe(ANA, 1))

    assert fields(mem, ana, bike.id) == rewritten
    events = mem.store.history(ana, bike.id)
    assert [e["event"] for e in events] == ["add", "update", "unevolve"]
    assert events[1]["before"] is None and "hallway" in events[1]["after"]["content"]
    assert WORD not in everything(mem, ana, [bike.id, secret.id])
    assert_vectors_embed_notes(mem, ana)
