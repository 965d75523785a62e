"""Listing a person's notes needs the step-up match on every surface, however it is asked for.

get_all has always needed it; a search of many notes, or one narrowed by filters (a window of time pages through
everything), lists as much, so it needs it too. k has one maximum for the engine, sessions, REST and MCP.
A capture that clears τ but not the step-up τ still reads a few notes by meaning, as asking needs.
"""

from __future__ import annotations

import httpx
import pytest

from biomem.engine.checks import BROAD_K, MAX_K
from biomem.engine.keys import create_key
from biomem.errors import InvalidInputError, StepUpRequiredError

from .conftest import BOTH_STORES
from .shared import ANA, CHLOE, png, rest_service

NOTES = 30


@pytest.fixture
def crowded(make_memory, capture):
    """Ana with 30 notes, and a step-up τ no capture clears: every capture of hers is a τ-only one."""
    mem = make_memory(limits="off")
    ana = mem.enroll("ana", [capture(ANA, 0), capture(ANA, 1)])
    mem.add_many([f"Errand number {i}: collect parcel {i} from the depot" for i in range(NOTES)], identity=ana.id)
    mem.set_threshold(0.999, step_up=True)
    return mem, ana


@BOTH_STORES
def test_a_probe_that_only_clears_tau_cannot_list_through_search(crowded, capture):
    mem, ana = crowded
    probe = capture(ANA, 3)
    assert len(mem.search("parcel", probe=probe).notes) == mem.k  # reading by meaning: as before
    assert len(mem.search("parcel", probe=probe, k=BROAD_K).notes) == BROAD_K
    with pytest.raises(StepUpRequiredError):
        mem.get_all(probe=probe)
    listings = [lambda: mem.search("parcel", probe=probe, k=BROAD_K + 1),
                lambda: mem.search("parcel", probe=probe, k=5, filters={"timestamp": {"gte": "2000-01-01"}}),
                lambda: mem.search("parcel", probe=probe, k=1, filters={"tags": {"contains": ""}}),
                lambda: mem.ask("Which parcels?", probe=probe, k=BROAD_K + 1)]
    for listing in listings:
        with pytest.raises(StepUpRequiredError, match="lists your notes"):
            listing()
    for too_many in (MAX_K + 1, 10**6):
        with pytest.raises(InvalidInputError, match=f"from 1 to {MAX_K}"):
            mem.search("parcel", probe=probe, k=too_many)
        with pytest.raises(InvalidInputError):
            mem.ask("Which parcels?", probe=probe, k=too_many)

    with mem.session(probe) as me:  # a narrow session: the same rule
        assert not me.broad and len(me.search("parcel").notes) == mem.k
        for listing in (lambda: me.search("parcel", k=BROAD_K + 1), lambda: me.ask("Which?", k=BROAD_K + 1),
                        lambda: me.search("parcel", filters={"timestamp": {"gte": "2000-01-01"}})):
            with pytest.raises(StepUpRequiredError):
                listing()
        with pytest.raises(InvalidInputError):
            me.search("parcel", k=MAX_K + 1)

    # a stranger's listing is an empty memory, as any stranger's search
    stranger = mem.search("parcel", probe=capture(CHLOE, 3), k=MAX_K, filters={"scope": None})
    assert stranger.gate.identity is None and stranger.notes == []

    # a clear probe, at the step-up τ, lists: up to MAX_K by search, everything by get_all
    mem.set_threshold(mem.threshold(), step_up=True)
    assert len(mem.search("parcel", probe=probe, k=MAX_K).notes) == NOTES
    assert len(mem.search("parcel", probe=probe, k=5, filters={"timestamp": {"gte": "2000-01-01"}}).notes) == 5
    assert len(mem.get_all(probe=probe)) == NOTES


def test_rest_applies_the_same_rule_and_bound(crowded, capture):
    mem, _ = crowded
    key = create_key(mem.store, "agent", "agent")[0]
    probe = png(capture(ANA, 3))
    with rest_service(mem, ui=False, mcp=False) as (_, http):
        def call(path: str, **fields) -> httpx.Response:
            return http.post(f"/v1/{path}", headers={"Authorization": f"Bearer {key}"},
                             files={"probe": ("p.png", probe, "image/png")},
                             data={k: str(v) for k, v in fields.items()})
        assert len(call("search", query="parcel").json()["results"]) == mem.k
        for path, fields in (("search", {"query": "parcel", "k": BROAD_K + 1}),
                             ("search", {"query": "parcel", "filters": '{"scope": null}'}),
                             ("ask", {"question": "Which parcels?", "k": BROAD_K + 1})):
            refused = call(path, **fields)
            assert refused.status_code == 403 and refused.json()["error"]["type"] == "StepUpRequiredError"
        for path, fields in (("search", {"query": "parcel", "k": MAX_K + 1}),
                             ("ask", {"question": "Which parcels?", "k": MAX_K + 1})):
            assert call(path, **fields).status_code == 422
