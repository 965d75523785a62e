"""The MCP tools and households, through the SDK's own streamable HTTP client on 127.0.0.1: remember into a
household (`scope`, `hidden_from`, `metadata`), recall with `filters` and `threshold`, my_groups; a non-member's
scope is refused as a household that does not exist, and undeclared or malformed arguments are refused."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from biomem import BioMemory
from biomem.engine.aio import AsyncBioMemory
from biomem.engine.demo import build_demo
from biomem.identity.samples import demo_capture
from biomem.server.mcp import build_mcp

from .shared import ANA, BEN, CHLOE, STRANGER
from .test_mcp import calls, error_text, fastapi_host, probe, serving, session

NEVER = 2**62  # a household id that never existed


@pytest.fixture(scope="module")
def flat(tmp_path_factory, text_encoder, face_encoder) -> Iterator[SimpleNamespace]:
    """The demo store (its people enrolled as ordinary people, whose probes write) with a household "Flat" of Ana
    and Ben (Chloe is not in it), served at /mcp."""
    mem = BioMemory(tmp_path_factory.mktemp("mcp-groups") / "g.db", text_model=text_encoder, encoder=face_encoder,
                    limits="off")
    ids = build_demo(mem, sample=False)
    group = mem.create_group("Flat", probe=demo_capture(ANA, 0))
    mem.add_member(group.id, probe=demo_capture(ANA, 0), member_probe=demo_capture(BEN, 0))
    amem = AsyncBioMemory(mem, workers=2)
    try:
        with serving(fastapi_host(build_mcp(amem))) as url:
            yield SimpleNamespace(url=url, mem=mem, ids=ids, gid=group.id)
    finally:
        amem.close()


def test_the_tools_declare_households_and_filters(flat):
    tools = {tool.name: tool for tool in session(flat.url, lambda client: client.list_tools()).tools}
    assert set(tools) == {"remember", "recall", "ask", "forget_note", "my_groups"}
    assert {"scope", "hidden_from", "metadata"} <= set(tools["remember"].input_schema["properties"])
    assert {"filters", "threshold"} <= set(tools["recall"].input_schema["properties"])
    assert tools["remember"].input_schema["required"] == ["text", "probe"]
    listing = tools["my_groups"]
    assert listing.input_schema["required"] == ["probe"] and listing.annotations.read_only_hint
    assert "face in `probe`" in listing.description and "never by a name" in listing.description
    assert all(tool.input_schema["additionalProperties"] is False for tool in tools.values())


def test_remember_into_a_household_reaches_its_members_only(flat):
    ids, gid = flat.ids, flat.gid
    shared, hidden, ana_groups, chloe_groups = calls(
        flat.url,
        ("remember", {"text": "The flat's bin day is Thursday", "probe": probe(ANA, 3), "scope": gid,
                      "metadata": {"chore": "bins"}}),
        ("remember", {"text": "Ben's birthday cake for the flat is in the freezer", "probe": probe(ANA, 4),
                      "scope": gid, "hidden_from": [ids["Ben"]]}),
        ("my_groups", {"probe": probe(ANA, 5)}),
        ("my_groups", {"probe": probe(CHLOE, 3)}))
    note = shared.structured_content["results"][0]
    assert not shared.is_error and (note["scope"], note["author"], note["owner"]) == (gid, ids["Ana"], gid)
    assert note["metadata"] == {"chore": "bins"} and note["event"] == "ADD"
    cake = hidden.structured_content["results"][0]
    assert cake["hidden_from"] == [ids["Ben"]]
    flat_group = next(g for g in ana_groups.structured_content["results"] if g["id"] == gid)
    assert flat_group["label"] == "Flat" and set(flat_group["member_labels"]) == {"Ana", "Ben"}
    assert gid not in {g["id"] for g in chloe_groups.structured_content["results"]}

    ben, chloe, stranger, filtered, strict = calls(
        flat.url,
        ("recall", {"query": "bin day birthday cake freezer", "probe": probe(BEN, 3), "k": 50}),
        ("recall", {"query": "bin day birthday cake freezer", "probe": probe(CHLOE, 4), "k": 50}),
        ("recall", {"query": "bin day", "probe": probe(STRANGER, 3)}),
        ("recall", {"query": "when do the bins go out", "probe": probe(ANA, 6), "k": 50,
                    "filters": {"metadata.chore": "bins"}}),
        ("recall", {"query": "bin day", "probe": probe(BEN, 4), "threshold": 1.0}))
    bens = {r["id"]: r for r in ben.structured_content["results"]}
    assert note["id"] in bens and cake["id"] not in bens and bens[note["id"]]["scope"] == gid
    assert not {note["id"], cake["id"]} & {r["id"] for r in chloe.structured_content["results"]}
    assert stranger.structured_content["results"] == []
    assert [r["id"] for r in filtered.structured_content["results"]] == [note["id"]]
    assert strict.structured_content["results"] == []


def test_a_non_member_s_scope_is_refused_like_a_household_that_never_existed(flat):
    before = flat.mem.store.note_total()
    member_of, never, stranger = calls(
        flat.url, ("remember", {"text": "planted", "probe": probe(CHLOE, 5), "scope": flat.gid}),
        ("remember", {"text": "planted", "probe": probe(CHLOE, 6), "scope": NEVER}),
        ("my_groups", {"probe": probe(STRANGER, 4)}))
    assert error_text(member_of) == error_text(never) and error_text(member_of).startswith("No such household")
    assert str(flat.gid) not in error_text(member_of) and "Flat" not in error_text(member_of)
    assert error_text(stranger).startswith("Not recognised")
    assert flat.mem.store.note_total() == before


def test_malformed_or_undeclared_household_arguments_are_refused(flat):
    before = flat.mem.store.note_total()
    ana = probe(ANA, 7)
    results = calls(
        flat.url,
        ("remember", {"text": "x", "probe": ana, "scope": flat.gid, "metadata": {"a": {"b": 1}}}),
        ("remember", {"text": "x", "probe": ana, "scope": flat.gid, "hidden_from": 3}),
        ("remember", {"text": "x", "probe": ana, "scope": 0}),
        ("remember", {"text": "x", "probe": ana, "group": flat.gid}),
        ("recall", {"query": "x", "probe": ana, "filters": {"owner": 1}}),
        ("recall", {"query": "x", "probe": ana, "filters": "scope"}),
        ("recall", {"query": "x", "probe": ana, "threshold": 5}),
        ("my_groups", {"probe": ana, "user_id": "ana"}))
    named = ["nested", "hidden_from", "scope", "group", "owner", "filters", "threshold", "user_id"]
    for result, name in zip(results, named, strict=True):
        message = error_text(result)
        assert message.startswith("Invalid input") and name in message, message
        assert "input_value" not in message and "pydantic" not in message
    (no_scope,) = calls(flat.url, ("remember", {"text": "x", "probe": ana, "hidden_from": [flat.ids["Ben"]]}))
    assert error_text(no_scope).startswith("Invalid input") and "scope" in error_text(no_scope)
    assert flat.mem.store.note_total() == before
