"""Names that look alike are one name, on both stores: a person's label and a person's households' names.

"Аna" and "Вen" with Cyrillic capitals, full-width "Ａｎａ", "ANA", "Ana  Lee" with two spaces and "rnary" cannot be
enrolled beside "Ana", "Ben", "Ana Lee" and "Mary" (biomem.stores.labels: NFKC, case folding, the Unicode TS #39
skeleton); the refusal names no one enrolled. A store of version 6 holding two look-alike names opens with both
people as they were, the later one renamed "label (2)", and refuses a third look-alike.
"""

from __future__ import annotations

import sqlite3
from unittest import mock

import pytest

from biomem import BioMemory
from biomem.errors import DuplicateLabelError, InvalidInputError
from biomem.stores.pg import store as pg_store
from biomem.stores.pg.schema import SCHEMA_VERSION as PG_VERSION
from biomem.stores.sqlite import store as sqlite_store
from biomem.stores.sqlite.schema import SCHEMA_VERSION as SQLITE_VERSION

from .conftest import BOTH_STORES
from .shared import ANA, BEN, CHLOE, DAN, EVE

ENROLLED = ("Ana", "Ben", "Mary", "Ana Lee")
LOOK_ALIKES = ["\u0410na", "An\u0430", "\u0391na",  # a Cyrillic capital А, a Cyrillic small а, a Greek capital Alpha
               "\uff21\uff4e\uff41", "ANA", " ana ",  # full width; case; spaces around it
               "\u0412en", "\u0412\u0415N",  # Cyrillic capitals В and Е: "Ben" and "BEN"
               "\u041cary", "rnary", "MARY",  # a Cyrillic capital М; "rn" for "m"
               "Ana  Lee", "Ana\u00a0Lee", "ANA\u3000LEE"]  # two spaces, a no-break and an ideographic space


def on_owner(backend: str, location, statements: list[tuple[str, list]]) -> None:
    """Run SQL on the store itself, as its owner (the way an older version left it)."""
    if backend == "sqlite":
        with sqlite3.connect(location) as conn:
            for sql, params in statements:
                conn.execute(sql, params)
        conn.close()
        return
    import psycopg
    with psycopg.connect(location) as conn:
        conn.execute("SET search_path = biomem, public")
        for sql, params in statements:
            conn.execute(sql.replace("?", "%s"), params)


@BOTH_STORES
def test_a_name_that_looks_like_an_enrolled_one_is_refused(make_memory, face_probe, backend):
    mem = make_memory()
    enrolled = [mem.enroll(label, [face_probe(person, 0)]) for label, person in zip(ENROLLED, (ANA, BEN, CHLOE, EVE))]
    before = (mem.store.counts(), [(i.id, i.label) for i in mem.identities()])
    for label in LOOK_ALIKES:
        with pytest.raises(DuplicateLabelError) as refused:
            mem.enroll(label, [face_probe(DAN, 0)])
        message = str(refused.value)
        assert "looks like one that is" in message, label
        assert not any(repr(name) in message for name in ENROLLED), message  # names nobody enrolled
    assert (mem.store.counts(), [(i.id, i.label) for i in mem.identities()]) == before
    assert [i.id for i in mem.identities()] == [i.id for i in enrolled]
    assert mem.enroll("Anna", [face_probe(DAN, 0)]).label == "Anna"  # a name that only resembles one is fine


@BOTH_STORES
def test_a_person_has_no_two_households_whose_names_look_alike(make_memory, face_probe, backend):
    mem = make_memory()
    ana = mem.enroll("Ana", [face_probe(ANA, 0)])
    dan = mem.enroll("Dan", [face_probe(DAN, 0)])
    home = mem.create_group("Home", identity=ana.id)
    for label in ("\u041d\u041e\u041c\u0415", "\u041d\u043em\u0435",  # Cyrillic НОМЕ; Cyrillic Н, о and е around m
                  "\uff28\uff4f\uff4d\uff45", "HOME", "Horne"):  # full width; case; "rn" for "m"
        with pytest.raises(DuplicateLabelError, match="or one that looks like it"):
            mem.create_group(label, identity=ana.id)
    dans = mem.create_group("\u041d\u043em\u0435", identity=dan.id)  # households of different people may share a name
    with pytest.raises(DuplicateLabelError):  # ... but Dan cannot join Ana's under his look-alike
        mem.add_member(home.id, identity=dan.id)
    assert [g.id for g in mem.groups(identity=ana.id)] == [home.id]
    assert [g.id for g in mem.groups(identity=dan.id)] == [dans.id]


def test_a_name_that_shows_nothing_is_refused(make_memory, face_probe):
    mem = make_memory()
    for label in ("\u3164", "\u3164\u3164", "\uffa0"):  # Hangul fillers: letters that draw nothing
        with pytest.raises(InvalidInputError, match="shows nothing"):
            mem.enroll(label, [face_probe(ANA, 0)])
    assert mem.identities() == []


@BOTH_STORES
def test_a_version_6_store_with_look_alike_names_keeps_both_people_and_refuses_a_third(
        make_memory, database, face_probe, text_encoder, face_encoder, backend):
    # a store as version 6 made it (on PostgreSQL, by its migrations up to 6 only), then its labels as version 6 kept
    with mock.patch.object(pg_store if backend == "postgresql" else sqlite_store, "SCHEMA_VERSION", 6):
        mem = make_memory()
        ana = mem.enroll("Ana", [face_probe(ANA, 0), face_probe(ANA, 1)])
        twin = mem.enroll("Twin", [face_probe(BEN, 0), face_probe(BEN, 1)])
        wide = mem.enroll("Wide", [face_probe(CHLOE, 0), face_probe(CHLOE, 1)])
        mary = mem.enroll("Mary", [face_probe(EVE, 0), face_probe(EVE, 1)])
        home = mem.create_group("Home", identity=ana.id)
        mem.close()
    # them: version 6 compared casefolded labels only, so it let "Аna" (Cyrillic А) and "Ａｎａ" in beside "Ana"
    on_owner(backend, database(), [("UPDATE identities SET label = ?, label_key = ? WHERE id = ?",
                                    [label, label.casefold(), person.id])
                                   for person, label in ((ana, "Ana"), (twin, "\u0410na"), (wide, "\uff21\uff4e\uff41"),
                                                         (mary, "Mary"))])

    again = BioMemory(database(), text_model=text_encoder, encoder=face_encoder)
    try:
        assert again.store.get_meta("schema_version") == str(SQLITE_VERSION if backend == "sqlite" else PG_VERSION)
        assert [(i.id, i.label) for i in again.identities()] == [
            (ana.id, "Ana"), (twin.id, "\u0410na (2)"), (wide.id, "\uff21\uff4e\uff41 (3)"), (mary.id, "Mary")]
        for person, face in ((ana, ANA), (twin, BEN), (wide, CHLOE), (mary, EVE)):  # each still matches as before
            assert again.identify(face_probe(face, 2)).identity == person.id
        assert [g.id for g in again.groups(identity=ana.id)] == [home.id]  # a household's key is not a name's
        with pytest.raises(DuplicateLabelError):
            again.enroll("ANA", [face_probe(DAN, 0)])
        with pytest.raises(DuplicateLabelError):
            again.enroll("rnary", [face_probe(DAN, 0)])
        assert again.enroll("Dan", [face_probe(DAN, 0)]).label == "Dan"  # ids go on past the upgraded rows
    finally:
        again.close()

