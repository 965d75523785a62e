"""Households (groups) and filters end to end, on both stores, with real faces and the real text encoder.

A household's notes reach its members' live probes and nobody else's: not a non-member asking the same
question, not a stranger, not a member a note is hidden from, not a member who was removed, and no filter
widens that. Forgetting a member erases what they wrote in every group, to the last byte on disk; evolution
and links stay inside one partition and one audience even when the LLM tries otherwise; filters select
exactly what a brute-force reference selects (tests/filter_reference.py).
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass

import pytest

from biomem import BioMemory
from biomem.errors import (
    DuplicateLabelError,
    EnrolmentError,
    GroupNotFoundError,
    InvalidInputError,
    NotAuthorisedError,
    NoteNotFoundError,
    StepUpRequiredError,
    UnknownIdentityError,
)
from biomem.notes.llm import Evolution, OfflineLLM
from biomem.notes.timeparse import parse_timestamp
from biomem.stores.filters import parse_filters
from biomem.stores.records import Group, Identity, Note

from .conftest import BOTH_STORES, FACE
from .filter_reference import matches
from .shared import (
    ANA,
    BEN,
    CHLOE,
    DAN,
    EVE,
    FINN,
    STRANGER,
    files_holding,
    left_on_disk,
    note_blobs,
    vacuumed_database_files_holding,
    written,
)

WIFI = "The wifi password is tulip-meadow-42"
PARTY = "Dan's surprise party is on Saturday at the boathouse"
QUERY = "what is the wifi password"


# ---- a household -----------------------------------------------------------------------------------------------


@dataclass
class Home:
    """Ana, Ben and Dan share the household "Home"; Eve (never a member) has a "Home" of her own."""

    mem: BioMemory
    ana: Identity
    ben: Identity
    dan: Identity
    eve: Identity
    group: Group
    wifi: Note  # written by Ana for everyone at home
    party: Note  # written by Ben, hidden from Dan
    eve_group: Group
    eve_wifi: Note


def build_home(mem: BioMemory, face_probe) -> Home:
    """The household through the requester's calls: Ana founds it, Ben and Dan join in person."""
    ana, ben, dan, eve = (mem.enroll(name, [face_probe(p, 0), face_probe(p, 1)])
                            for name, p in (("Ana", ANA), ("Ben", BEN), ("Dan", DAN), ("Eve", EVE)))
    group = mem.create_group("Home", probe=face_probe(ANA, 2))
    assert group.members == [ana.id] and group.member_labels == ["Ana"]
    group = mem.add_member(group.id, probe=face_probe(ANA, 3), member_probe=face_probe(BEN, 2))
    assert group.members == [ana.id, ben.id]  # Ben joined with both probes (step-up)
    group = mem.add_member(group.id, probe=face_probe(BEN, 3), member_probe=face_probe(DAN, 2))
    assert group.members == [ana.id, ben.id, dan.id] and group.member_labels == ["Ana", "Ben", "Dan"]
    mem.add("My PIN is 1234", identity=ana.id, timestamp="2024-03-01T09:00:00")
    mem.add("I keep my bike in the shed", identity=ben.id, timestamp="2024-03-01T10:00:00")
    mem.add("My favourite colour is teal", identity=dan.id, timestamp="2024-03-01T11:00:00")
    mem.add("I am learning to play the cello", identity=eve.id, timestamp="2024-03-01T12:00:00")
    wifi = mem.add(WIFI, probe=face_probe(ANA, 2), scope=group.id, timestamp="2024-03-02T09:00:00")
    party = mem.add(PARTY, probe=face_probe(BEN, 2), scope=group.id, hidden_from=[dan.id],
                    timestamp="2024-03-02T10:00:00")
    eve_group = mem.create_group("Home", identity=eve.id)  # another family's household of the same name
    eve_wifi = mem.add("The wifi password is cobalt-harbour-99", identity=eve.id, scope=eve_group.id,
                       timestamp="2024-03-02T11:00:00")
    return Home(mem, ana, ben, dan, eve, group, wifi, party, eve_group, eve_wifi)


@pytest.fixture
def home(make_memory, face_probe) -> Home:
    return build_home(make_memory(), face_probe)


def found(result) -> list[Note]:
    """The notes of a search result, hits then linked notes."""
    return [n for n, _ in result.notes] + [n for n, _ in result.linked]


def same_refusal(first: BaseException, second: BaseException, first_id: int, second_id: int) -> bool:
    """Two refusals that say the same thing but for the id they were given."""
    return type(first) is type(second) and \
        str(first).replace(str(first_id), "<id>") == str(second).replace(str(second_id), "<id>")


# ---- 1. a household: members read it, a non-member or a stranger gets nothing of it ----------------------------


@BOTH_STORES
def test_a_shared_note_reaches_every_member_and_nothing_of_the_group_reaches_anyone_else(home, face_probe):
    mem, group = home.mem, home.group
    assert home.wifi.scope == group.id and home.wifi.author == home.ana.id and home.wifi.owner == group.id
    assert home.wifi.as_dict()["scope"] == group.id and home.wifi.as_dict()["author"] == home.ana.id
    for person, member in ((ANA, home.ana), (BEN, home.ben), (DAN, home.dan)):
        result = mem.search(QUERY, probe=face_probe(person, 4), k=3)
        assert result.gate.identity == member.id
        assert result.notes[0][0].content == WIFI and result.notes[0][0].scope == group.id
        assert result.notes[0][0].author == home.ana.id
        assert {n.owner for n in found(result)} <= {member.id, group.id}
        assert [g.id for g in mem.groups(probe=face_probe(person, 4))] == [group.id]
    ben_sees = mem.get_all(probe=face_probe(BEN, 4))
    assert [n.content for n in ben_sees] == ["I keep my bike in the shed", WIFI, PARTY]
    assert [n.scope for n in ben_sees] == [None, group.id, group.id]

    # Eve, never a member, asks the very same question: her own household's answer, never Ana's
    before = written(mem)
    eve = face_probe(EVE, 4)
    for k in (1, 5, 50):
        result = mem.search(QUERY, probe=eve, k=k)
        assert result.gate.identity == home.eve.id
        assert {n.owner for n in found(result)} <= {home.eve.id, home.eve_group.id}
        assert "tulip" not in json.dumps(result.as_dict())
    assert mem.search(QUERY, probe=eve, k=1).notes[0][0].id == home.eve_wifi.id
    assert mem.search(home.wifi.content, probe=eve, k=50, filters={"scope": group.id}).notes == []
    assert mem.get_all(probe=eve, filters={"scope": group.id}) == []
    assert {n.owner for n in mem.get_all(probe=eve)} == {home.eve.id, home.eve_group.id}
    assert [g.id for g in mem.groups(probe=eve)] == [home.eve_group.id]
    with pytest.raises(NoteNotFoundError):
        mem.get(home.wifi.id, probe=eve)
    with pytest.raises(NoteNotFoundError):
        mem.history(home.wifi.id, probe=eve)

    # naming the group: the same refusal as for a group that never existed
    never = group.id + 1000
    calls = {
        "add": lambda g: mem.add("The code of the front door is 5555", probe=eve, scope=g),
        "invite": lambda g: mem.add_member(g, probe=eve, member_probe=face_probe(CHLOE, 1)),
        "remove": lambda g: mem.remove_member(g, home.ana.id, probe=eve),
        "delete": lambda g: mem.delete_group(g, probe=eve),
    }
    for name, call in calls.items():
        with pytest.raises(GroupNotFoundError) as real:
            call(group.id)
        with pytest.raises(GroupNotFoundError) as made_up:
            call(never)
        assert same_refusal(real.value, made_up.value, group.id, never), name
    assert written(mem) == before

    # a stranger: nothing at all
    stranger = face_probe(CHLOE, 3)
    result = mem.search(QUERY, probe=stranger, k=50)
    assert result.gate.identity is None and result.notes == [] and result.linked == []
    with pytest.raises(UnknownIdentityError):
        mem.add("I live here now", probe=stranger, scope=group.id)
    with pytest.raises(UnknownIdentityError):
        mem.groups(probe=stranger)
    with pytest.raises(UnknownIdentityError):
        mem.get(home.wifi.id, probe=stranger)
    with pytest.raises(StepUpRequiredError):
        mem.get_all(probe=stranger)
    with pytest.raises(StepUpRequiredError):
        mem.add_member(group.id, probe=face_probe(ANA, 3), member_probe=stranger)
    assert written(mem) == before


# ---- 2. hidden_from: everyone but Dan ------------------------------------------------------------------------


@BOTH_STORES
def test_a_note_hidden_from_a_member_never_reaches_her_by_any_path(home, face_probe):
    mem, group, party = home.mem, home.group, home.party
    assert party.hidden_from == [home.dan.id] and party.author == home.ben.id
    balloons = mem.add("Buy balloons and a cake for Saturday", probe=face_probe(ANA, 2), scope=group.id,
                       timestamp="2024-03-03T09:00:00")
    mem.store.add_links(group.id, balloons.id, [party.id])  # a link evolution would never make: forged
    for person in (ANA, BEN):
        result = mem.search("When is Dan's surprise party?", probe=face_probe(person, 4), k=2)
        assert result.notes[0][0].id == party.id
        assert mem.get(party.id, probe=face_probe(person, 4)).content == PARTY
        assert party.id in [n.id for n in mem.get_all(probe=face_probe(person, 4))]
        expanded = mem.search("balloons and cake", probe=face_probe(person, 4), k=1, links=5)
        assert [n.id for n, _ in expanded.notes] == [balloons.id]
        assert party.id in [n.id for n, _ in expanded.linked]  # the forged link works for them

    dan = face_probe(DAN, 4)
    vector = mem.text.encode_one(PARTY)
    never_party = []
    for k in (1, 2, 5, 50):
        for query in (PARTY, "When is my surprise party?", vector):
            never_party += found(mem.search(query, probe=dan, k=k, links=5))
    expanded = mem.search("balloons and cake", probe=dan, k=1, links=5)
    assert [n.id for n, _ in expanded.notes] == [balloons.id]
    assert party.id in mem.store.get_note(group.id, balloons.id).links  # the link is there, not followed
    never_party += found(expanded)
    filters = [{"scope": group.id}, {"author": home.ben.id}, {"tags": {"contains": ""}},
               {"OR": [{"scope": group.id}, {"scope": None}]}, {"NOT": {"author": home.ana.id}},
               {"timestamp": {"gte": "2024-03-02T10:00:00", "lt": "2024-03-02T10:00:01"}}]
    for where in filters:
        never_party += found(mem.search(PARTY, probe=dan, k=50, links=5, filters=where))
        never_party += mem.get_all(probe=dan, filters=where)
    never_party += mem.get_all(probe=dan)
    with mem.session(dan) as me:
        never_party += found(me.search(PARTY, k=50, links=5)) + me.get_all()
        with pytest.raises(NoteNotFoundError):
            me.get(party.id)
        with pytest.raises(NoteNotFoundError):
            me.history(party.id)
    assert never_party and all(n.id != party.id and "boathouse" not in n.content for n in never_party)
    assert "boathouse" not in mem.ask("When is my surprise party?", probe=dan).prompt
    for call in (lambda: mem.get(party.id, probe=dan), lambda: mem.history(party.id, probe=dan),
                 lambda: mem.update(party.id, "Nothing on Saturday", probe=dan),
                 lambda: mem.delete(party.id, probe=dan)):
        with pytest.raises(NoteNotFoundError) as hidden:
            call()
        assert "boathouse" not in str(hidden.value)
    assert mem.get(party.id, probe=face_probe(ANA, 4)).content == PARTY  # nothing changed it

    # Dan leaves and joins again: the note is still hidden from him
    mem.remove_member(group.id, home.dan.id, probe=face_probe(ANA, 3))
    mem.add_member(group.id, probe=face_probe(ANA, 3), member_probe=face_probe(DAN, 2))
    assert all(n.id != party.id for n in found(mem.search(PARTY, probe=dan, k=50, links=5)))
    assert all(n.id != party.id for n in mem.get_all(probe=dan))
    assert mem.search(QUERY, probe=dan, k=1).notes[0][0].id == home.wifi.id

    # a gate that admits Dan together with others still leaves out what is hidden from him
    mem.set_threshold(-1.0)
    together = mem.search(PARTY, probe=dan, k=20, links=5, policy="all")
    assert {home.ana.id, home.ben.id, home.dan.id} <= set(together.gate.admitted)
    assert {n.owner for n in found(together)} & {group.id} and all(n.id != party.id for n in found(together))


@BOTH_STORES
def test_a_note_kept_from_someone_reaches_nobody_they_bring_in(home, face_probe):
    """Dan cannot have the party note read by a friend (or a second identity of his own) he brings in, nor by
    anyone else who joins later: a note hidden from someone is read only by the members it was written for."""
    mem, group, party = home.mem, home.group, home.party
    friend = mem.enroll("Finn", [face_probe(FINN, 0), face_probe(FINN, 1)])
    finn = face_probe(FINN, 4)
    mem.add_member(group.id, probe=face_probe(DAN, 3), member_probe=face_probe(FINN, 2))  # Dan invites Finn
    assert mem.store.group(group.id).members == [home.ana.id, home.ben.id, home.dan.id, friend.id]
    seen = found(mem.search(PARTY, probe=finn, k=50, links=5)) + mem.get_all(probe=finn)
    seen += found(mem.search(PARTY, probe=finn, k=50, filters={"scope": group.id}))
    with mem.session(finn) as me:
        seen += found(me.search(PARTY, k=50, links=5)) + me.get_all()
    assert home.wifi.id in [n.id for n in seen]  # the household's open notes are his to read
    assert all(n.id != party.id and "boathouse" not in n.content for n in seen)
    assert "boathouse" not in mem.ask("When is Dan's party?", probe=finn).prompt
    for call in (lambda: mem.get(party.id, probe=finn), lambda: mem.history(party.id, probe=finn)):
        with pytest.raises(NoteNotFoundError):
            call()

    # whoever brings the newcomer in: Ben, who reads the note, invites Stranger, who does not
    latecomer = mem.enroll("Stranger", [face_probe(STRANGER, 0), face_probe(STRANGER, 1)])
    mem.add_member(group.id, probe=face_probe(BEN, 3), member_probe=face_probe(STRANGER, 2))
    assert all(n.id != party.id for n in found(mem.search(PARTY, probe=face_probe(STRANGER, 4), k=50)))
    for person in (ANA, BEN):  # those it was written for still read it
        assert mem.get(party.id, probe=face_probe(person, 4)).content == PARTY
    assert sorted(mem.get(party.id, probe=face_probe(ANA, 4)).hidden_from) == \
        sorted([home.dan.id, friend.id, latecomer.id])

    # a note written for everyone after they came is theirs as well; its author, back after leaving, reads hers
    cake = mem.add("The cake is in the garage freezer", probe=face_probe(BEN, 2), scope=group.id)
    assert mem.get(cake.id, probe=finn).content == cake.content
    mem.remove_member(group.id, home.ben.id, probe=face_probe(BEN, 3))
    mem.add_member(group.id, probe=face_probe(ANA, 3), member_probe=face_probe(BEN, 2))
    assert mem.get(party.id, probe=face_probe(BEN, 4)).content == PARTY


@BOTH_STORES
def test_no_member_is_left_alone_with_a_note_kept_from_them(make_memory, face_probe, backend, tmp_path):
    """Dan may take every other member out of the household, the party note's author first, but he is never
    left holding it: once no member left may read a note, it is erased, to the last byte, on removal or forget (on
    PostgreSQL: of the database's files once VACUUM FULL has run; its WAL is not looked at)."""
    mem = make_memory("alone.db")
    home = build_home(mem, face_probe)
    group, party, dan = home.group, home.party, face_probe(DAN, 3)
    also = mem.add("Dan's present is a red bicycle from the harbour shop", probe=face_probe(ANA, 2),
                   scope=group.id, hidden_from=[home.dan.id])
    assert mem.remove_member(group.id, home.ben.id, probe=dan).members == [home.ana.id, home.dan.id]
    assert mem.get(party.id, probe=face_probe(ANA, 4)).content == PARTY  # Ana still reads what Ben wrote
    total = mem.store.note_total()
    assert mem.remove_member(group.id, home.ana.id, probe=dan).members == [home.dan.id]
    assert mem.store.note_total() == total - 2  # the party and the present: kept from everyone left
    assert {n.id for n in mem.store.all_notes(group.id)} == {home.wifi.id}
    for note in (party, also):
        with pytest.raises(NoteNotFoundError):  # no history left either
            mem.store.history(group.id, note.id)
    mem.enroll("Finn", [face_probe(FINN, 0), face_probe(FINN, 1)])
    mem.add_member(group.id, probe=dan, member_probe=face_probe(FINN, 2))  # nothing left for a friend to read
    assert {n.id for n in mem.get_all(probe=face_probe(FINN, 4))} == {home.wifi.id}
    assert left_on_disk(mem, backend, tmp_path, {"party": b"boathouse", "present": b"red bicycle"}) == {}

    # forgetting the last reader does the same
    mem = make_memory("forgotten.db")
    home = build_home(mem, face_probe)
    mem.remove_member(home.group.id, home.ben.id, probe=face_probe(DAN, 3))
    assert mem.forget(identity=home.ana.id) == home.ana.id
    assert mem.store.group(home.group.id).members == [home.dan.id]
    assert mem.store.all_notes(home.group.id) == []  # Ana's wifi note goes with her, the party with its readers
    assert left_on_disk(mem, backend, tmp_path, {"party": b"boathouse"}) == {}


# ---- 3. removal takes effect on the next query -----------------------------------------------------------------


@BOTH_STORES
def test_removal_takes_effect_on_the_next_query_and_the_last_member_out_erases_the_group(home, face_probe):
    mem, group = home.mem, home.group
    bins = mem.add("The bins go out on Tuesday night", probe=face_probe(BEN, 2), scope=group.id,
                   timestamp="2024-03-04T09:00:00")
    ben = face_probe(BEN, 4)
    session = mem.session(ben)
    assert mem.search(QUERY, probe=ben, k=1).notes[0][0].id == home.wifi.id
    assert session.search(QUERY, k=1).notes[0][0].id == home.wifi.id

    after = mem.remove_member(group.id, home.ben.id, probe=face_probe(ANA, 3))
    assert after.members == [home.ana.id, home.dan.id]
    for result in (mem.search(QUERY, probe=ben, k=50, links=5), session.search(QUERY, k=50, links=5),
                   mem.search("bins Tuesday", probe=ben, k=50, filters={"scope": group.id})):
        assert {n.owner for n in found(result)} <= {home.ben.id}
    assert [n.content for n in mem.get_all(probe=ben)] == ["I keep my bike in the shed"]  # his own stay his
    assert [n.content for n in session.get_all()] == ["I keep my bike in the shed"]
    assert mem.search("my bike", probe=ben, k=1).notes[0][0].content == "I keep my bike in the shed"
    for note in (home.wifi, home.party, bins):
        with pytest.raises(NoteNotFoundError):
            mem.get(note.id, probe=ben)
        with pytest.raises(NoteNotFoundError):
            session.get(note.id)
    assert mem.groups(probe=ben) == [] and session.groups() == []
    with pytest.raises(GroupNotFoundError):
        mem.add("Back in the household", probe=ben, scope=group.id)
    with pytest.raises(GroupNotFoundError):
        session.add("Back in the household", scope=group.id)
    with pytest.raises(GroupNotFoundError):  # not a member any more
        mem.remove_member(group.id, home.ben.id, probe=face_probe(ANA, 3))
    # what he wrote in the household stays the household's
    assert bins.id in [n.id for n in mem.get_all(probe=face_probe(ANA, 4))]

    total = mem.store.note_total()
    assert mem.remove_member(group.id, home.dan.id, probe=face_probe(DAN, 3)).members == [home.ana.id]
    assert mem.remove_member(group.id, home.ana.id, probe=face_probe(ANA, 3)) is None  # the last one out
    assert mem.store.note_total() == total - 3
    with pytest.raises(UnknownIdentityError):
        mem.store.group(group.id)
    assert [g.id for g in mem.store.all_groups()] == [home.eve_group.id]
    for person, own in ((ANA, "My PIN is 1234"), (DAN, "My favourite colour is teal")):
        assert [n.content for n in mem.get_all(probe=face_probe(person, 4))] == [own]
        assert [n.content for n, _ in mem.search(QUERY, probe=face_probe(person, 4), k=50).notes] == [own]
    with pytest.raises(NoteNotFoundError):
        mem.get(home.wifi.id, probe=face_probe(ANA, 4))


@BOTH_STORES
def test_a_member_deletes_the_household_and_nothing_of_it_remains(make_memory, face_probe, backend, tmp_path):
    """Nothing of a deleted household is read by anyone, nor left in a file: any file of a SQLite store, the
    database's files of a PostgreSQL store once VACUUM FULL has run (its WAL is not looked at)."""
    mem = make_memory("deleted.db", hnsw_threshold=3)
    home = build_home(mem, face_probe)
    group = home.group
    mem.add("The bins go out on Tuesday night", probe=face_probe(BEN, 2), scope=group.id)
    assert len(mem.search(QUERY, probe=face_probe(ANA, 4)).notes) == 4  # builds the household's hnsw index
    if backend == "sqlite":
        mem.partitions.flush()
        index = tmp_path / "deleted.db.index"
        assert (index / f"owner-{group.id}.hnsw").exists()
        needles = {"wifi": b"tulip-meadow-42", "party": b"boathouse", "bins": b"Tuesday night",
                   **note_blobs(mem, [home.wifi.id, home.party.id])}
        assert files_holding(tmp_path, needles)
    else:
        needles = {"wifi": b"tulip-meadow-42", "party": b"boathouse", "bins": b"Tuesday night"}
        assert vacuumed_database_files_holding(mem, needles)
    total = mem.store.note_total()
    with pytest.raises(GroupNotFoundError):
        mem.delete_group(group.id, probe=face_probe(EVE, 3))
    with pytest.raises(StepUpRequiredError):
        mem.delete_group(group.id, probe=face_probe(CHLOE, 3))
    assert mem.delete_group(group.id, probe=face_probe(DAN, 3)) == group.id
    assert mem.store.note_total() == total - 3
    with pytest.raises(UnknownIdentityError):
        mem.store.group(group.id)
    for person, own in ((ANA, "My PIN is 1234"), (BEN, "I keep my bike in the shed"),
                        (DAN, "My favourite colour is teal")):
        probe = face_probe(person, 4)
        assert mem.groups(probe=probe) == []
        assert [n.content for n in mem.get_all(probe=probe)] == [own]
        assert [n.content for n in found(mem.search(QUERY, probe=probe, k=50, links=5))] == [own]
        with pytest.raises(GroupNotFoundError):
            mem.add("Still home?", probe=probe, scope=group.id)
    assert mem.search(QUERY, probe=face_probe(EVE, 4), k=1).notes[0][0].id == home.eve_wifi.id
    if backend == "sqlite":
        assert not list(index.glob(f"owner-{group.id}.*"))
        assert files_holding(tmp_path, needles) == {}
    else:
        assert vacuumed_database_files_holding(mem, needles) == {}


# ---- 4. a group is never enrolled into, matched or forgotten as a person ---------------------------------------


@BOTH_STORES
def test_a_group_has_no_templates_is_never_matched_and_is_not_a_person(home, face_probe):
    mem, group = home.mem, home.group
    before = written(mem)
    with pytest.raises((UnknownIdentityError, EnrolmentError)):
        mem.add_templates(group.id, [face_probe(CHLOE, 0), face_probe(CHLOE, 1)])
    with pytest.raises(StepUpRequiredError):  # Ana proving herself does not make the group her
        mem.add_templates(group.id, [face_probe(CHLOE, 0)], probe=face_probe(ANA, 3))
    with pytest.raises(UnknownIdentityError):
        mem.forget(identity=group.id)
    with pytest.raises(UnknownIdentityError):
        mem.groups(identity=group.id)
    with pytest.raises(UnknownIdentityError):
        mem.create_group("Sub-household", identity=group.id)
    with pytest.raises(UnknownIdentityError):  # a group is no member of a group
        mem.add_member(group.id, identity=home.eve_group.id)
    with pytest.raises(UnknownIdentityError):
        mem.session(face_probe(CHLOE, 2))
    assert written(mem) == before

    groups = {group.id, home.eve_group.id}
    ids, _ = mem.store.templates(FACE)
    assert not groups & set(ids.tolist())
    assert {i.id for i in mem.identities()} == {home.ana.id, home.ben.id, home.dan.id, home.eve.id}
    assert mem.get(home.wifi.id, probe=face_probe(ANA, 4)).content == WIFI  # the group is still whole
    mem.set_threshold(-1.0)  # every probe matches every enrolled template ("best" then finds each ambiguous)
    for person in (ANA, BEN, CHLOE, FINN):
        gate = mem.identify(face_probe(person, 1), policy="all")
        assert set(gate.admitted) == {home.ana.id, home.ben.id, home.dan.id, home.eve.id}
        assert not groups & set(gate.scores)


# ---- 5. a filter on scope or author never widens what the gate admitted ----------------------------------------


@BOTH_STORES
def test_a_filter_on_scope_or_author_can_never_widen_the_admitted_notes(home, face_probe):
    mem, group = home.mem, home.group
    ana = face_probe(ANA, 4)
    admitted = {n.id for n in mem.get_all(probe=ana)}
    assert admitted == {n.id for n in mem.store.all_notes(home.ana.id) + mem.store.all_notes(group.id)}
    assert home.eve_wifi.id not in admitted
    ana_wrote = {i for i in admitted if mem.get(i, probe=ana).author == home.ana.id}
    cases = [
        ({"scope": home.eve_group.id}, set()),
        ({"author": home.eve.id}, set()),
        ({"AND": [{"scope": home.eve_group.id}, {"author": home.eve.id}]}, set()),
        ({"scope": {"in": [home.eve_group.id, home.eve.id]}}, set()),
        ({"author": {"in": [home.eve.id, 99_999]}}, set()),
        ({"OR": [{"scope": home.eve_group.id}, {"scope": group.id}]}, {home.wifi.id, home.party.id}),
        ({"OR": [{"author": home.eve.id}, {"author": home.ana.id}]}, ana_wrote),
        ({"OR": [{"scope": home.eve_group.id}, {"tags": {"contains": ""}}]}, admitted),
        ({"NOT": {"scope": group.id}}, {n.id for n in mem.store.all_notes(home.ana.id)}),
        ({"scope": {"ne": home.eve_group.id}}, admitted),
        ({"author": {"nin": [home.ana.id]}}, {home.party.id}),
        ({"scope": {"in": [home.eve_group.id, None]}}, {n.id for n in mem.store.all_notes(home.ana.id)}),
    ]
    for where, expected in cases:
        assert {n.id for n in mem.get_all(probe=ana, filters=where)} == expected, where
        hits = mem.search(QUERY, probe=ana, k=50, links=5, filters=where)
        assert {n.id for n, _ in hits.notes} == expected, where
        assert {n.id for n in found(hits)} <= admitted
    eve = face_probe(EVE, 4)
    for where in ({"scope": group.id}, {"author": home.ana.id}, {"OR": [{"scope": group.id}, {"scope": None}]}):
        assert {n.owner for n in found(mem.search(QUERY, probe=eve, k=50, filters=where))} <= \
            {home.eve.id, home.eve_group.id}
        assert {n.owner for n in mem.get_all(probe=eve, filters=where)} <= {home.eve.id, home.eve_group.id}


# ---- 6. filters through the engine against a brute-force reference ---------------------------------------------

TOPICS = ["the dishwasher needs a new filter", "the electricity bill is due", "grandma visits in June",
          "the cat's vaccination appointment", "we need more olive oil", "the boiler makes a strange noise",
          "the football match on the weekend", "the school trip to the museum", "the car insurance renewal",
          "the garden hose is leaking", "book club meets at the library", "the plumber's phone number"]
KINDS = ["chore", "Chore", "bill", "event", "pet", ""]
LABELS = ["urgent", "kids", "money", "Urgent", "outside"]
STAMPS = ["2023-05-08T13:56:00", "2023-11-30T08:15:00", "2024-01-01T00:00:00", "2024-02-29T12:00:00",
          "2024-06-30T23:59:59", "2025-02-28T08:00:00"]


def random_metadata(rng: random.Random) -> dict:
    metadata = {}
    if rng.random() < 0.8:
        metadata["kind"] = rng.choice(KINDS)
    if rng.random() < 0.7:
        metadata["n"] = rng.choice([0, 1, 2, 3, 10, -1, 1.5, 2.0])
    if rng.random() < 0.5:
        metadata["flag"] = rng.choice([True, False, None])
    if rng.random() < 0.5:
        metadata["labels"] = rng.sample(LABELS, rng.randint(0, 3))
    return metadata


@dataclass
class Ledger:
    """Random notes of Ana's, her household's and others', with what the reference needs about each."""

    mem: BioMemory
    ana: Identity
    ben: Identity
    eve: Identity
    group: Group
    eve_group: Group
    readable: list[dict]  # the notes Ana may read, as filter_reference takes them, with their vectors
    tags: list[str]
    keywords: list[str]


@pytest.fixture
def ledger(make_memory, face_probe) -> Ledger:
    mem = make_memory()
    rng = random.Random(20240612)
    ana, ben, eve = (mem.enroll(name, [face_probe(p, 0), face_probe(p, 1)])
                     for name, p in (("Ana", ANA), ("Ben", BEN), ("Eve", EVE)))
    group = mem.create_group("Home", identity=ana.id)
    mem.add_member(group.id, identity=ben.id)
    eve_group = mem.create_group("Home", identity=eve.id)
    hidden_from_ana = set()
    places = [("ana", ana.id, None, ()), ("ana in the group", ana.id, group.id, ()),
              ("ben in the group", ben.id, group.id, ()), ("ben, hidden from ana", ben.id, group.id, (ana.id,)),
              ("imported into the group", group.id, None, ()), ("eve", eve.id, None, ()),
              ("eve's group", eve.id, eve_group.id, ())]
    for i in range(84):
        _, writer, scope, hidden = places[i % len(places)] if i < 14 else rng.choice(places)
        note = mem.add(f"{rng.choice(TOPICS).capitalize()} (note {i})", identity=writer, scope=scope,
                       hidden_from=hidden, metadata=random_metadata(rng), timestamp=rng.choice(STAMPS),
                       infer=rng.random() < 0.5)
        if hidden:
            hidden_from_ana.add(note.id)
    readable = []
    for owner in (ana.id, group.id):
        ids, vectors, _ = mem.store.note_vectors(owner)
        vector = {int(i): v for i, v in zip(ids, vectors)}
        for note in mem.store.all_notes(owner):
            if note.id not in hidden_from_ana:
                readable.append({"id": note.id, "owner_id": note.owner, "author_id": note.author,
                                 "tags": note.tags, "keywords": note.keywords, "timestamp": note.timestamp,
                                 "metadata": note.metadata, "vector": vector[note.id]})
    tags = sorted({t for n in readable for t in n["tags"]})
    keywords = sorted({k for n in readable for k in n["keywords"]})
    assert tags and keywords and len(hidden_from_ana) >= 2
    return Ledger(mem, ana, ben, eve, group, eve_group, readable, tags, keywords)


def random_condition(rng: random.Random, book: Ledger) -> dict:
    field = rng.choice(["scope", "author", "tags", "keywords", "timestamp", "metadata.kind", "metadata.n",
                        "metadata.flag", "metadata.labels", "metadata.missing"])
    if field in ("scope", "author"):
        values = [None, book.group.id, book.eve_group.id, book.ana.id, book.ben.id, book.eve.id]
        op = rng.choice(["eq", "ne", "in", "nin"])
        value = rng.sample(values, rng.randint(1, 3)) if op in ("in", "nin") else rng.choice(values)
    elif field in ("tags", "keywords"):
        words = book.tags if field == "tags" else book.keywords
        op = rng.choice(["eq", "ne", "in", "nin", "contains", "icontains"])
        if op in ("in", "nin"):
            value = rng.sample(words, min(len(words), rng.randint(1, 3)))
        elif op in ("contains", "icontains"):
            word = rng.choice(words)
            start = rng.randrange(len(word))
            value = word[start:start + rng.randint(1, 4)]
            value = value.upper() if op == "icontains" and rng.random() < 0.5 else value
        else:
            value = rng.choice(words)
    elif field == "timestamp":
        op = rng.choice(["eq", "ne", "gt", "gte", "lt", "lte", "in"])
        bounds = [*STAMPS, "2024-03-01", "2023-06-15", "9:00 am on 1 January, 2024"]
        value = rng.sample(STAMPS, 2) if op == "in" else rng.choice(bounds if op not in ("eq", "ne") else STAMPS)
    elif field == "metadata.kind" or field == "metadata.labels":
        words = KINDS if field == "metadata.kind" else LABELS
        op = rng.choice(["eq", "ne", "in", "nin", "contains", "icontains", "gt", "lte"])
        if op in ("in", "nin"):
            value = rng.sample(words, 2)
        elif op in ("contains", "icontains"):
            value = rng.choice(["ch", "CH", "urg", "e", "Ur", "oney"])
        else:
            value = rng.choice(words)
    elif field == "metadata.n":
        op = rng.choice(["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"])
        numbers = [0, 1, 2, 2.0, 1.5, 3, 10, -1]
        value = rng.sample(numbers, 2) if op in ("in", "nin") else rng.choice(numbers)
    else:
        op = rng.choice(["eq", "ne"])
        value = rng.choice([True, False, None])
    return {field: value if op == "eq" and rng.random() < 0.5 else {op: value}}


def random_filter(rng: random.Random, book: Ledger, depth: int = 0) -> dict:
    choice = rng.random()
    if depth >= 2 or choice < 0.4:
        return random_condition(rng, book)
    children = [random_filter(rng, book, depth + 1) for _ in range(rng.randint(2, 3))]
    if choice < 0.65:
        return {"AND": children}
    if choice < 0.85:
        return {"OR": children}
    return {"NOT": children[0]}


@BOTH_STORES
def test_filtered_search_and_listing_select_exactly_what_the_reference_selects(ledger, face_probe):
    mem, book = ledger.mem, ledger
    rng = random.Random(7)
    probe = face_probe(ANA, 3)
    session = mem.session(probe)
    assert session.broad
    queries = ["when is the bill due", "something about the pets", "a household repair", "a family visit"]
    vectors = {q: mem.text.encode_one(q) for q in queries}
    selective, plenty = 0, 0
    for case in range(40):
        where = random_filter(rng, book) if case else None
        tree = parse_filters(where, timestamp=parse_timestamp)  # the engine's reading of timestamps
        chosen = [n for n in book.readable if matches(tree, n)]
        selective += 0 < len(chosen) < len(book.readable)
        by_time = [n["id"] for n in sorted(chosen, key=lambda n: (n["timestamp"], n["id"]))]
        listing = mem.get_all(probe=probe, filters=where) if case % 8 == 0 else session.get_all(filters=where)
        assert [n.id for n in listing] == by_time, where
        query = queries[case % len(queries)]
        ranked = sorted(((float(n["vector"] @ vectors[query]), n["id"]) for n in chosen), key=lambda s: -s[0])
        for k in (1, 4, 10):
            search = mem.search if case % 8 == 0 else lambda q, probe, **kw: session.search(q, **kw)
            hits = search(query, probe=probe, k=k, filters=where).notes
            assert len(hits) == min(k, len(chosen)), where
            assert [n.id for n, _ in hits] == [i for _, i in ranked[:k]], (where, k)
            assert [s for _, s in hits] == pytest.approx([s for s, _ in ranked[:k]], abs=1e-5)
            plenty += k == 10 and len(chosen) >= k
        if len(ranked) >= 3:  # a threshold between two scores keeps those above it
            cut = rng.randrange(1, len(ranked))
            if ranked[cut - 1][0] - ranked[cut][0] > 1e-4:
                threshold = (ranked[cut - 1][0] + ranked[cut][0]) / 2
                kept = session.search(query, k=100, filters=where, threshold=threshold).notes
                assert [n.id for n, _ in kept] == [i for _, i in ranked[:cut]], where
        size = rng.choice([1, 3, 7])
        pages = [session.get_all(filters=where, page=page, page_size=size)
                 for page in range(1, len(chosen) // size + 3)]
        assert all(len(p) == size for p in pages[:len(chosen) // size])
        assert [n.id for p in pages for n in p] == by_time, (where, size)  # pages partition the listing
        assert pages[-1] == []
    assert selective >= 25 and plenty >= 8, "the random filters should select some notes and not others"


# ---- 7. forgetting a member ------------------------------------------------------------------------------------

MARKER = "Ben's locker combination is quokka-7731"
MARKER2 = "Ben hid the birthday presents behind the xylophone-5150"


@BOTH_STORES
def test_forget_of_a_member_erases_every_note_they_wrote_in_every_group(make_memory, face_probe, backend, tmp_path):
    """To the byte: in any file of a SQLite store, in the database's files of a PostgreSQL store once VACUUM FULL
    has run (its WAL is not looked at)."""
    mem = make_memory("forget.db", hnsw_threshold=3)
    home = build_home(mem, face_probe)
    group = home.group
    ben = face_probe(BEN, 2)
    locker = mem.add(MARKER, probe=ben, scope=group.id, timestamp="2024-03-05T09:00:00")
    presents = mem.add(MARKER2, probe=ben, scope=group.id, hidden_from=[home.ana.id],
                       timestamp="2024-03-05T10:00:00")
    shed = mem.add("The lawnmower lives in the shed", probe=face_probe(ANA, 2), scope=group.id,
                   timestamp="2024-03-05T11:00:00")
    workshop = mem.create_group("Workshop", probe=ben)  # Ben's alone
    mem.add("The drill bits are in the red box", probe=ben, scope=workshop.id)
    doomed = mem.add("The spare fuse is in the kitchen drawer", probe=face_probe(ANA, 2), scope=group.id)
    mem.delete(doomed.id, probe=face_probe(BEN, 3))  # Ben is the actor of its delete event
    assert mem.store.history(group.id, doomed.id)[-1]["actor"] == home.ben.id
    for person in (ANA, DAN):  # builds the household's hnsw index (more than 3 notes)
        assert locker.id in [n.id for n, _ in mem.search("locker combination", probe=face_probe(person, 4)).notes]
    hidden_from_ana = mem.search(MARKER2, probe=face_probe(ANA, 4), k=50, links=5)
    assert presents.id not in [n.id for n in found(hidden_from_ana)]  # the indexed household hides it too
    by_ben = mem.search(MARKER2, probe=face_probe(ANA, 4), k=50, filters={"author": home.ben.id}).notes
    assert sorted(n.id for n, _ in by_ben) == sorted([home.party.id, locker.id])
    if backend == "sqlite":
        mem.partitions.flush()
        assert (tmp_path / "forget.db.index" / f"owner-{group.id}.hnsw").exists()
        needles = {"marker": MARKER.encode(), "marker2": MARKER2.encode(), "quokka": b"quokka-7731",
                   **note_blobs(mem, [locker.id, presents.id])}
        assert files_holding(tmp_path, needles)  # the needles are findable before the forget
    else:
        needles = {"marker": MARKER.encode(), "marker2": MARKER2.encode(), "quokka": b"quokka-7731"}
        assert vacuumed_database_files_holding(mem, needles)
    ben_wrote = [n.id for n in mem.store.all_notes(group.id) if n.author == home.ben.id]
    assert sorted(ben_wrote) == sorted([home.party.id, locker.id, presents.id])
    total = mem.store.note_total()

    assert mem.forget(probe=face_probe(BEN, 3)) == home.ben.id

    assert mem.store.note_total() == total - 1 - 3 - 1  # his own note, his three household notes, Workshop's
    assert mem.store.group(group.id).members == [home.ana.id, home.dan.id]
    with pytest.raises(UnknownIdentityError):
        mem.store.group(workshop.id)  # left without members: gone
    assert {g.id for g in mem.store.all_groups()} == {group.id, home.eve_group.id}
    for person in (ANA, DAN):
        probe = face_probe(person, 4)
        for query in (MARKER, MARKER2, "locker combination", "surprise party", "birthday presents"):
            assert all(n.author != home.ben.id for n in found(mem.search(query, probe=probe, k=50, links=5)))
        listing = mem.get_all(probe=probe)
        assert {home.wifi.id, shed.id} <= {n.id for n in listing}  # the household's other notes stay
        assert all(n.author != home.ben.id for n in listing)
        for gone in ben_wrote:
            with pytest.raises(NoteNotFoundError):
                mem.get(gone, probe=probe)
    events = mem.store.history(group.id, doomed.id)  # who he was in others' history goes too
    assert [(e["event"], e["actor"]) for e in events] == [("add", home.ana.id), ("delete", None)]
    if backend == "sqlite":
        db = mem.store.db
        assert db.execute("SELECT COUNT(*) FROM notes WHERE author_id = ?", [home.ben.id]).fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM history WHERE note_id IN (?, ?, ?)",
                          [locker.id, presents.id, home.party.id]).fetchone()[0] == 0
        mem.search("locker combination", probe=face_probe(ANA, 4))  # the household's index, rebuilt
        mem.partitions.flush()
        assert files_holding(tmp_path, needles) == {}
        mem.close()
        assert files_holding(tmp_path, needles) == {}
    else:
        assert vacuumed_database_files_holding(mem, needles) == {}


class Gossip(OfflineLLM):
    """The offline analysis, and an evolution that rewrites every neighbour's context with the new note's text,
    as a real LLM may ("related: <what the new note says>")."""

    def evolve(self, draft, neighbours):
        return Evolution(should_evolve=True, actions=["update_neighbor"], suggested_connections=[],
                         tags_to_update=draft.tags,
                         new_context_neighborhood=[f"related: {draft.content}" for _ in neighbours],
                         new_tags_neighborhood=[list(n.tags) for n, _ in neighbours])


@BOTH_STORES
def test_forget_of_a_member_erases_their_group_notes_to_the_byte_even_after_evolution(make_memory, face_probe, backend,
                                                                                     text_encoder, tmp_path):
    """An LLM's update_neighbor writes the new note's words into its neighbours (their context, and the history's
    "evolve" event). In a household, Ben's notes evolve only Ben's notes, so his words never reach Ana's note
    (nor hers his), and once Ben is forgotten nothing of his remains: not in what Ana reads, not in any file of a
    SQLite store, not in the database's files once PostgreSQL's VACUUM FULL has run (its WAL is not looked at)."""
    mem = make_memory("gossip.db", llm=Gossip(text_encoder))
    ana = mem.enroll("Ana", [face_probe(ANA, 0), face_probe(ANA, 1)])
    ben = mem.enroll("Ben", [face_probe(BEN, 0), face_probe(BEN, 1)])
    group = mem.create_group("Home", identity=ana.id)
    mem.add_member(group.id, identity=ben.id)
    mine = mem.add("The spare locker key hangs by the door", identity=ana.id, scope=group.id)
    his = mem.add("The spare bike key hangs by the window", identity=ben.id, scope=group.id)
    mem.add(MARKER, identity=ben.id, scope=group.id)
    assert MARKER in mem.store.get_note(group.id, his.id).context  # evolution runs among Ben's own notes
    assert MARKER not in mem.store.get_note(group.id, mine.id).context  # and never reaches Ana's
    mem.add("The spare car key hangs in the hall", identity=ana.id, scope=group.id)
    assert "car key" not in mem.store.get_note(group.id, his.id).context
    mem.forget(identity=ben.id)
    probe = face_probe(ANA, 3)
    seen = [n.as_dict() for n in mem.get_all(probe=probe)] + mem.history(mine.id, probe=probe)
    assert "quokka" not in json.dumps(seen)
    assert left_on_disk(mem, backend, tmp_path, {"marker": MARKER.encode(), "quokka": b"quokka-7731"}) == {}


@BOTH_STORES
def test_forget_of_a_member_erases_the_kept_history_of_their_deleted_group_notes(make_memory, face_probe, backend,
                                                                               tmp_path):
    """Ben's household note, deleted by Ana with keep_history=True, leaves its text in the household's history
    (the audit trail); it is Ben's, so forgetting Ben must erase it too: to the byte in any file of a SQLite store,
    in the database's files of a PostgreSQL store once VACUUM FULL has run (its WAL is not looked at)."""
    mem = make_memory("kept.db")
    ana = mem.enroll("Ana", [face_probe(ANA, 0), face_probe(ANA, 1)])
    ben = mem.enroll("Ben", [face_probe(BEN, 0), face_probe(BEN, 1)])
    group = mem.create_group("Home", identity=ana.id)
    mem.add_member(group.id, identity=ben.id)
    note = mem.add(MARKER, identity=ben.id, scope=group.id)
    mem.add("The spare locker key hangs by the door", identity=ana.id, scope=group.id)
    mem.delete(note.id, probe=face_probe(ANA, 3), keep_history=True)
    assert MARKER in json.dumps(mem.store.history(group.id, note.id))
    mem.forget(identity=ben.id)
    try:
        left = mem.store.history(group.id, note.id)
    except NoteNotFoundError:
        left = []
    assert "quokka" not in json.dumps(left)
    assert left_on_disk(mem, backend, tmp_path, {"marker": MARKER.encode(), "quokka": b"quokka-7731"}) == {}


# ---- 8. links and evolution never cross a partition or an audience ---------------------------------------------


class Hostile(OfflineLLM):
    """Suggests linking every note id it has ever seen (and made-up ones), and rewrites every neighbour it is
    shown; records what each new note was shown."""

    def __init__(self, text_encoder):
        super().__init__(text_encoder)
        self.seen: set[int] = set()
        self.shown: list[tuple[str, list[int]]] = []
        self.lock = threading.Lock()

    def evolve(self, draft, neighbours):
        with self.lock:
            self.seen |= {n.id for n, _ in neighbours}
            self.shown.append((draft.content, [n.id for n, _ in neighbours]))
            everything = sorted(self.seen) + [n + 1 for n in self.seen] + [1, 2, 3, 10_000]
        return Evolution(should_evolve=True, actions=["strengthen", "update_neighbor"],
                         suggested_connections=everything, tags_to_update=["hostile", *draft.tags[:1]],
                         new_context_neighborhood=[f"evolved by: {draft.content}"] * (len(neighbours) + 3),
                         new_tags_neighborhood=[["evolved"]] * (len(neighbours) + 3))


@BOTH_STORES
def test_links_and_evolution_stay_inside_one_partition_and_one_audience(make_memory, face_probe, text_encoder):
    llm = Hostile(text_encoder)
    mem = make_memory(llm=llm)
    ana, ben, dan = (mem.enroll(name, [face_probe(p, 0), face_probe(p, 1)])
                       for name, p in (("Ana", ANA), ("Ben", BEN), ("Dan", DAN)))
    group = mem.create_group("Home", identity=ana.id)
    for person in (ben, dan):
        mem.add_member(group.id, identity=person.id)
    party = "Dan's surprise party on Saturday: {}"
    writes = [  # (writer, scope, hidden_from, text): the same topic everywhere, so every note is a neighbour
        (ana, None, (), party.format("Ana's own reminder to buy a gift")),
        (ana, group.id, (), party.format("everyone bring snacks")),
        (ben, group.id, (dan.id,), party.format("the secret guest list")),
        (dan, None, (), party.format("Dan wonders what is planned")),
        (ben, None, (), party.format("Ben's own note about the cake")),
        (ana, group.id, (dan.id,), party.format("the secret venue is the boathouse")),
        (dan, group.id, (), party.format("Dan asks everyone to keep Saturday free")),
        (ben, group.id, (ana.id,), party.format("Ana's present is a surprise too")),
        (ben, group.id, (dan.id,), party.format("the secret cake is chocolate")),
        (ana, group.id, (), party.format("the house must be tidy by Saturday")),
        (ana, None, (), party.format("Ana's own second reminder")),
        (dan, group.id, (), party.format("Dan will be home by six on Saturday")),
        (group, None, (), party.format("an imported note about Saturday")),
        (ben, group.id, (ana.id,), party.format("Ana's present is a bicycle")),
    ]
    for writer, scope, hidden, text in writes:
        mem.add(text, identity=writer.id, scope=scope, hidden_from=hidden)
    notes = {n.id: n for owner in (ana.id, ben.id, dan.id, group.id) for n in mem.store.all_notes(owner)}
    assert len(notes) == len(writes)
    by_text = {n.content: n for n in notes.values()}

    def where(note: Note) -> tuple[int, frozenset[int]]:
        return note.owner, frozenset(note.hidden_from)

    assert any(neighbours for _, neighbours in llm.shown), "the hostile LLM was never asked"
    for text, neighbours in llm.shown:  # what the LLM saw for each note: its partition and audience only
        assert all(where(notes[i]) == where(by_text[text]) for i in neighbours), text
    linked = evolved = 0
    for note in notes.values():
        for target in note.links:  # every link joins two notes of one partition and one audience
            assert where(notes[target]) == where(note), (note.content, notes[target].content)
            linked += 1
        if note.context.startswith("evolved by: "):  # what evolved it was of its partition and audience
            source = by_text[note.context.removeprefix("evolved by: ")]
            assert where(source) == where(note), (note.content, source.content)
            evolved += 1
        for event in mem.store.history(note.owner, note.id):  # (strengthening its own tags is an evolve too)
            if event["event"] == "evolve" and event["after"]["context"].startswith("evolved by: "):
                source = by_text[event["after"]["context"].removeprefix("evolved by: ")]
                assert where(source) == where(note)
    assert linked >= 4 and evolved >= 4, "the hostile LLM should have linked and evolved within partitions"
    dan_reads = {n.id for n in mem.get_all(probe=face_probe(DAN, 3))}
    for note in mem.get_all(probe=face_probe(DAN, 3)):  # nothing Dan reads says a word of the secrets
        assert "secret" not in note.context and "secret" not in note.content
        assert set(note.links) <= dan_reads
    for owner in (ana.id, ben.id, dan.id):
        assert all(n.owner == owner and n.author == owner for n in mem.store.all_notes(owner))


# ---- 9. concurrent membership changes and searches -------------------------------------------------------------


@BOTH_STORES
def test_concurrent_membership_changes_never_hand_a_note_to_a_non_member(home, face_probe):
    mem, group = home.mem, home.group
    rounds = 12
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []
    ben_saw: list[bool] = []
    probes = {person: face_probe(person, 4) for person in (BEN, EVE, DAN)}

    def toggle() -> None:
        barrier.wait()
        for i in range(rounds):
            if i % 2:
                mem.add_member(group.id, identity=home.ben.id)
                mem.remove_member(group.id, home.ben.id, operator=True)
            else:
                mem.add_member(group.id, probe=face_probe(ANA, 3), member_probe=face_probe(BEN, 2))
                mem.remove_member(group.id, home.ben.id, probe=face_probe(ANA, 3))

    def search(person: int) -> None:
        barrier.wait()
        for i in range(rounds * 2):
            result = mem.search(QUERY if i % 2 else PARTY, probe=probes[person], k=10, links=3)
            owners = {n.owner for n in found(result)}
            if person == EVE:
                assert owners <= {home.eve.id, home.eve_group.id}
                with pytest.raises(NoteNotFoundError):
                    mem.get(home.wifi.id, probe=probes[EVE])
            elif person == DAN:
                assert all(n.id != home.party.id for n in found(result))
            else:
                ben_saw.append(group.id in owners)

    def run(work, *args) -> None:
        try:
            work(*args)
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)
            barrier.abort()

    mem.remove_member(group.id, home.ben.id, operator=True)
    threads = [threading.Thread(target=run, args=(toggle,))] + \
        [threading.Thread(target=run, args=(search, person)) for person in (BEN, EVE, DAN)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert len(ben_saw) == rounds * 2
    result = mem.search(QUERY, probe=probes[BEN], k=50, links=5)  # after the last removal returned
    assert {n.owner for n in found(result)} == {home.ben.id}
    assert {n.owner for n in mem.get_all(probe=probes[BEN])} == {home.ben.id}
    assert mem.store.group(group.id).members == [home.ana.id, home.dan.id]


# ---- 10. update and delete of a household's note ---------------------------------------------------------------


@BOTH_STORES
def test_the_author_updates_a_household_note_any_member_deletes_it_and_history_says_who(home, face_probe):
    mem, group, wifi = home.mem, home.group, home.wifi
    with pytest.raises(NotAuthorisedError):
        mem.update(wifi.id, "The wifi password is ben-was-here", probe=face_probe(BEN, 3))
    with mem.session(face_probe(DAN, 4)) as dan:
        with pytest.raises(NotAuthorisedError):
            dan.update(wifi.id, "The wifi password is dan-was-here", probe=face_probe(DAN, 3))
    with pytest.raises(NoteNotFoundError):  # a non-member: no such note
        mem.update(wifi.id, "The wifi password is eve-was-here", probe=face_probe(EVE, 3))
    assert mem.get(wifi.id, probe=face_probe(BEN, 4)).content == WIFI
    updated = mem.update(wifi.id, "The wifi password is now orchid-77", probe=face_probe(ANA, 3))
    assert (updated.owner, updated.author, updated.scope) == (group.id, home.ana.id, group.id)
    assert mem.search(QUERY, probe=face_probe(DAN, 4), k=1).notes[0][0].content == updated.content
    events = mem.history(wifi.id, probe=face_probe(BEN, 4))
    assert [(e["event"], e["actor"]) for e in events] == [("add", home.ana.id), ("update", home.ana.id)]
    assert events[-1]["before"]["content"] == WIFI and events[-1]["after"]["content"] == updated.content

    moved = mem.update(home.party.id, "Dan's surprise party moved to Sunday at the boathouse",
                       probe=face_probe(BEN, 3))  # its author changes it: still hidden from Dan
    assert moved.hidden_from == [home.dan.id]
    assert mem.get(home.party.id, probe=face_probe(ANA, 4)).content == moved.content
    with pytest.raises(NoteNotFoundError):
        mem.get(home.party.id, probe=face_probe(DAN, 4))
    assert all(n.id != home.party.id for n in found(mem.search(moved.content, probe=face_probe(DAN, 4), k=50)))

    imported = mem.add("The landlord's number is 555-0100", identity=group.id)  # the operator's: no author
    assert imported.author is None and imported.scope == group.id
    with pytest.raises(NotAuthorisedError):
        mem.update(imported.id, "The landlord's number changed", probe=face_probe(ANA, 3))
    assert mem.history(imported.id, probe=face_probe(ANA, 4))[0]["actor"] is None

    with pytest.raises(StepUpRequiredError):  # a member deletes with a fresh step-up probe only
        mem.delete(wifi.id, probe=face_probe(CHLOE, 3))
    with pytest.raises(NoteNotFoundError):
        mem.delete(wifi.id, probe=face_probe(EVE, 3))
    deleted = mem.delete(wifi.id, probe=face_probe(BEN, 3))  # Ana wrote it; Ben is a member
    assert deleted.id == wifi.id
    for person in (ANA, BEN, DAN):
        with pytest.raises(NoteNotFoundError):
            mem.get(wifi.id, probe=face_probe(person, 4))
        assert all(n.id != wifi.id for n in found(mem.search(QUERY, probe=face_probe(person, 4), k=50)))
    events = mem.store.history(group.id, wifi.id)
    assert [(e["event"], e["actor"]) for e in events] == \
        [("add", home.ana.id), ("update", home.ana.id), ("delete", home.ben.id)]
    assert all(e["before"] is None and e["after"] is None for e in events)  # the text went from history too
    with mem.session(face_probe(DAN, 4)) as dan:
        assert dan.delete(imported.id, probe=face_probe(DAN, 3)).id == imported.id
    assert mem.store.history(group.id, imported.id)[-1]["actor"] == home.dan.id


# ---- 11. bad input ---------------------------------------------------------------------------------------------


@BOTH_STORES
def test_bad_household_input_is_refused_clearly_and_stores_nothing(home, face_probe):
    mem, group = home.mem, home.group
    ana = face_probe(ANA, 3)
    before = written(mem)
    everyone = [home.ana.id, home.ben.id, home.dan.id]
    cases = [
        ("not members", lambda: mem.add("x", probe=ana, scope=group.id, hidden_from=[home.eve.id])),
        ("not members", lambda: mem.add("x", probe=ana, scope=group.id, hidden_from=[home.ben.id, 99_999])),
        ("yourself", lambda: mem.add("x", probe=ana, scope=group.id, hidden_from=[home.ana.id])),
        ("yourself", lambda: mem.add("x", probe=ana, scope=group.id, hidden_from=everyone)),
        ("every member", lambda: mem.add("x", identity=group.id, hidden_from=everyone)),
        ("scope", lambda: mem.add("x", probe=ana, hidden_from=[home.ben.id])),
        ("scope", lambda: mem.add("x", identity=home.ana.id, hidden_from=[home.ben.id])),
        ("hidden_from", lambda: mem.add("x", probe=ana, scope=group.id, hidden_from=str(home.ben.id))),
        ("hidden_from", lambda: mem.add("x", probe=ana, scope=group.id, hidden_from=home.ben.id)),
        ("identity id", lambda: mem.add("x", probe=ana, scope=group.id, hidden_from=[True])),
        ("identity id", lambda: mem.add("x", probe=ana, scope=group.id, hidden_from=["Ben"])),
        ("group id", lambda: mem.add("x", probe=ana, scope="Home")),
        ("group id", lambda: mem.add("x", probe=ana, scope=0)),
        ("takes no scope", lambda: mem.add("x", identity=group.id, scope=group.id)),
        ("bytes", lambda: mem.add("x", probe=ana, metadata={f"k{i}": "y" * 400 for i in range(12)})),
        ("nested", lambda: mem.add("x", probe=ana, metadata={"address": {"street": "Elm"}})),
        ("nested", lambda: mem.add("x", probe=ana, metadata={"rooms": [{"name": "hall"}]})),
        ("JSON object", lambda: mem.add("x", probe=ana, metadata=["hall"])),
        ("key", lambda: mem.add("x", probe=ana, metadata={"room.name": "hall"})),
        ("key", lambda: mem.add("x", probe=ana, metadata={"1st": "hall"})),
        ("finite", lambda: mem.add("x", probe=ana, metadata={"n": float("nan")})),
        ("2\\*\\*53", lambda: mem.add("x", probe=ana, metadata={"n": 2**60})),
        ("unknown filter field", lambda: mem.search(QUERY, probe=ana, filters={"colour": "red"})),
        ("group id", lambda: mem.search(QUERY, probe=ana, filters={"scope": "Home"})),
        ("non-empty list", lambda: mem.search(QUERY, probe=ana, filters={"AND": []})),
        ("upper case", lambda: mem.search(QUERY, probe=ana, filters={"and": [{"tags": "work"}]})),
        ("unknown operator", lambda: mem.get_all(probe=ana, filters={"metadata.n": {"between": [1, 2]}})),
        ('does not take "gt"', lambda: mem.get_all(probe=ana, filters={"tags": {"gt": "a"}})),
        ("JSON object", lambda: mem.get_all(probe=ana, filters="tags=work")),
        ("timestamp", lambda: mem.search(QUERY, probe=ana, filters={"timestamp": "next Tuesday-ish"})),
        ("page_size", lambda: mem.get_all(probe=ana, page_size=0)),
        ("page_size", lambda: mem.get_all(probe=ana, page_size=1001)),
        ("page_size", lambda: mem.get_all(probe=ana, page_size=True)),
        ("page is", lambda: mem.get_all(probe=ana, page=0, page_size=5)),
        ("needs a page_size", lambda: mem.get_all(probe=ana, page=2)),
        ("threshold", lambda: mem.search(QUERY, probe=ana, threshold=1.5)),
        ("threshold", lambda: mem.search(QUERY, probe=ana, threshold="high")),
    ]
    for message, call in cases:
        with pytest.raises(InvalidInputError, match=message):
            call()
    with mem.session(ana) as me:
        with pytest.raises(InvalidInputError, match="scope"):
            me.add("x", hidden_from=[home.ben.id])
        with pytest.raises(InvalidInputError, match="page_size"):
            me.get_all(page_size=0)
        with pytest.raises(InvalidInputError, match="unknown filter field"):
            me.search(QUERY, filters={"colour": "red"})
    with pytest.raises(DuplicateLabelError):  # Ana already has a "Home"
        mem.create_group("home", probe=ana)
    with pytest.raises(DuplicateLabelError):  # so has Eve: she cannot join hers under that name
        mem.add_member(group.id, probe=ana, member_probe=face_probe(EVE, 2))
    with pytest.raises(GroupNotFoundError):  # another family's household
        mem.add("x", probe=ana, scope=home.eve_group.id)
    with pytest.raises(GroupNotFoundError):  # a person is no household
        mem.add("x", probe=ana, scope=home.ben.id)
    assert written(mem) == before
    with pytest.raises(InvalidInputError):
        mem.remove_member(group.id, home.ben.id)  # neither a probe nor operator=True
    with pytest.raises(InvalidInputError):
        mem.add_member(group.id, probe=ana)  # the newcomer's own probe is missing
    with pytest.raises(InvalidInputError):
        mem.add_member(group.id, probe=ana, member_probe=face_probe(BEN, 2))  # already a member
    assert written(mem) == before
