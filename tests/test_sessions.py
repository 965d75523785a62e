"""Requester sessions, service keys and the async face: the engine side of `biomem serve`.

A session is one gate decision reused: it acts only as the person the probe showed, ends when it
expires, is closed or its person is forgotten, and never lets a change through without a fresh
step-up probe of that same person.
"""

from __future__ import annotations

import asyncio

import pytest

from biomem import AsyncBioMemory
from biomem.engine.keys import any_keys, authenticate, create_key, list_keys, revoke_key
from biomem.engine.sessions import Sessions
from biomem.errors import (
    InvalidInputError,
    NoteNotFoundError,
    SessionExpiredError,
    StepUpRequiredError,
    TooManyAttemptsError,
    UnknownIdentityError,
)
from biomem.stores.sqlite import Store
from biomem.vocabulary import AttemptLimits

from .conftest import BOTH_STORES
from .shared import ANA, BEN, CHLOE


@BOTH_STORES
def test_a_session_acts_as_the_probe_s_person_only(family, capture, face_probe):
    mem, ana, ben = family
    ben_note = mem.store.all_notes(ben.id)[0]
    with mem.session(face_probe(ANA, 3)) as me:
        assert (me.identity, me.label) == (ana.id, "ana")
        assert [n.content for n, _ in me.search("my PIN", k=1).notes] == ["My PIN is 1234"]
        assert "1234" in me.ask("What is my PIN?").text
        added = me.add("Locker 42 at the pool")
        assert added.owner == ana.id and me.get(added.id).content == "Locker 42 at the pool"
        with pytest.raises(NoteNotFoundError):
            me.get(ben_note.id)  # another owner's id looks missing
        assert [h["event"] for h in me.history(added.id)] == ["add"]
    with pytest.raises(SessionExpiredError):
        me.search("my PIN")  # closed on leaving the block
    with pytest.raises(UnknownIdentityError):
        mem.session(face_probe(CHLOE, 1))


def test_a_session_reuses_the_gate_decision_instead_of_encoding_again(family, capture):
    mem, ana, _ = family
    encoder = mem.encoder()
    calls = []
    original = encoder.capture  # a live probe is encoded through the quality gate
    encoder.capture = lambda image, quality="probe": calls.append(1) or original(image, quality)
    try:
        me = mem.session(capture(ANA, 4))
        for question in ("my PIN", "locker", "anything else"):
            me.search(question)
        me.ask("What is my PIN?")
    finally:
        del encoder.capture
    assert len(calls) == 1


@BOTH_STORES
def test_changes_in_a_session_need_a_fresh_step_up_probe_of_the_same_person(family, face_probe):
    mem, ana, ben = family
    me = mem.session(face_probe(ANA, 3))
    note = me.add("Temporary note")
    with pytest.raises(StepUpRequiredError):
        me.delete(note.id, probe=face_probe(BEN, 3))  # Ben's own fresh probe is not Ana's
    assert me.get(note.id).content == "Temporary note"
    assert me.delete(note.id, probe=face_probe(ANA, 5)).id == note.id
    with pytest.raises(NoteNotFoundError):
        me.get(note.id)


def test_a_change_in_a_session_verifies_its_fresh_probe_once(family, capture, monkeypatch):
    """One encoding and one attempt-limit check per change: the session's step-up is the only one."""
    mem, ana, _ = family
    me = mem.session(capture(ANA, 3))
    note = me.add("Temporary note")
    encoder, limiter = mem.encoder(), mem.limiter
    encodes, checks = [], []
    monkeypatch.setattr(encoder, "capture", lambda image, quality="probe", capture=encoder.capture:
                        encodes.append(1) or capture(image, quality))
    monkeypatch.setattr(limiter, "check", lambda clients, check=limiter.check: checks.append(1) or check(clients))
    assert me.update(note.id, "Changed note", probe=capture(ANA, 0)).content == "Changed note"
    assert (len(encodes), len(checks)) == (1, 1)
    assert me.delete(note.id, probe=capture(ANA, 1)).id == note.id
    assert (len(encodes), len(checks)) == (2, 2)
    assert me.forget(probe=capture(ANA, 0)) == ana.id
    assert (len(encodes), len(checks)) == (3, 3)
    with pytest.raises(SessionExpiredError):
        me.search("PIN")  # its person is gone


def test_a_session_reads_one_clock_its_registry_s(family, face_probe, clock):
    mem, _, _ = family
    mem.sessions = Sessions(clock=clock)
    me = mem.session(face_probe(ANA, 3), ttl=60.0)
    assert me.expires_in == 60.0
    clock.now += 59.0
    assert me.expires_in == 1.0 and me.search("PIN").notes
    clock.now += 1.0
    assert me.expires_in == 0.0
    with pytest.raises(SessionExpiredError):
        me.search("PIN")


def test_listing_everything_needs_a_session_opened_at_step_up(family, face_probe):
    mem, ana, _ = family
    assert [n.content for n in mem.session(face_probe(ANA, 3)).get_all()] == [
        "My PIN is 1234", "I adopted a beagle puppy called Rex"]
    mem.set_threshold(0.999, step_up=True)  # no capture clears this: the session is not "broad"
    narrow = mem.session(face_probe(ANA, 3))
    with pytest.raises(StepUpRequiredError):
        narrow.get_all()
    assert narrow.search("PIN").notes  # gated reads still work


@BOTH_STORES
def test_sessions_expire_and_end_when_their_person_is_forgotten(family, face_probe):
    mem, ana, ben = family
    short = mem.session(face_probe(ANA, 3), ttl=0.0)
    with pytest.raises(SessionExpiredError):
        short.search("PIN")
    alive = mem.session(face_probe(ANA, 3))
    token = alive.token
    assert mem.sessions.get(token) is alive
    mem.forget(identity=ana.id)
    for call in (lambda: alive.search("PIN"), lambda: alive.add("after"), lambda: mem.sessions.get(token)):
        with pytest.raises(SessionExpiredError):
            call()
    assert mem.store.note_total() == 2  # Ben's notes only: nothing was added after the forget


def test_a_session_token_works_only_for_the_caller_it_was_bound_to(family, face_probe):
    mem, ana, _ = family
    session = mem.session(face_probe(ANA, 3), bound_to="key:1")
    assert mem.sessions.get(session.token, "key:1") is session
    for token, caller in ((session.token, "key:2"), (session.token, None), ("forged", "key:1"), (None, "key:1")):
        with pytest.raises(SessionExpiredError):
            mem.sessions.get(token, caller)


def test_opening_sessions_counts_misses_against_the_attempt_limits(family, face_probe):
    mem, ana, _ = family
    mem.limiter.limits = AttemptLimits(misses=3, budget=3)
    client = ["key:9", "address:203.0.113.5"]
    for _ in range(3):
        with pytest.raises(UnknownIdentityError):
            mem.session(face_probe(CHLOE, 1), client=client)
    with pytest.raises(TooManyAttemptsError) as refused:  # the address's daily budget is spent
        mem.session(face_probe(ANA, 3), client=client)
    assert refused.value.retry_after == pytest.approx(mem.limiter.limits.budget_window, abs=60)
    with mem.session(face_probe(ANA, 3), client=["key:9", "address:203.0.113.6"]) as mine:  # the key elsewhere
        assert mine.identity == ana.id


def test_keys_are_stored_as_digests_and_revoked_at_once(tmp_path):
    store = Store(tmp_path / "keys.db")
    assert not any_keys(store)
    secret, key = create_key(store, "kiosk", "agent")
    admin_secret, admin = create_key(store, "ops", "admin")
    assert authenticate(store, secret) == key and authenticate(store, admin_secret).role == "admin"
    raw = (tmp_path / "keys.db").read_bytes() + (tmp_path / "keys.db-wal").read_bytes()
    assert secret.encode() not in raw and secret[10:30].encode() not in raw  # only its digest and prefix
    assert [k["name"] for k in list_keys(store)] == ["kiosk", "ops"] and "digest" not in list_keys(store)[0]
    for bad in (None, "", "bm_" + "x" * 43, secret + "x", 42, "bm_" + "y" * 500):
        assert authenticate(store, bad) is None
    assert revoke_key(store, key.id) and not revoke_key(store, key.id)
    assert authenticate(store, secret) is None and any_keys(store)
    with pytest.raises(InvalidInputError):
        create_key(store, "x", "root")
    with pytest.raises(InvalidInputError):
        create_key(store, "  ", "agent")
    store.close()


def test_the_async_face_has_the_same_semantics(family, face_probe):
    mem, ana, _ = family
    amem = AsyncBioMemory(mem, workers=2)

    async def scenario() -> tuple:
        mine, strangers = await asyncio.gather(amem.search("PIN", probe=face_probe(ANA, 3)),
                                               amem.search("PIN", probe=face_probe(CHLOE, 1)))
        async with await amem.session(face_probe(ANA, 3)) as me:
            added = await me.add("Async note")
            got = await me.get(added.id)
        return mine, strangers, got

    mine, strangers, got = asyncio.run(scenario())
    assert {n.owner for n, _ in mine.notes} == {ana.id} and strangers.notes == []
    assert got.owner == ana.id
