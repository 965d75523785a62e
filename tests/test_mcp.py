"""The MCP server (biomem.server.mcp) through the SDK's own streamable HTTP client, on 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import io
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import httpx2
import numpy as np
import pytest
from fastapi import FastAPI
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult
from PIL import Image

from biomem import BioMemory
from biomem.engine.aio import AsyncBioMemory
from biomem.engine.demo import build_demo
from biomem.engine.keys import create_key, revoke_key
from biomem.identity.limits import client_tag
from biomem.identity.samples import DEMO_PALM_SEEDS, STRANGER_PALM_SEED, demo_capture, demo_palm, group_photo_path
from biomem.server.app import served
from biomem.server.mcp import MCPApp, build_mcp
from biomem.vocabulary import AttemptLimits

from .shared import ANA, BEN, STRANGER


def probe(person: int, seed: int) -> dict[str, str]:
    """A fresh capture of a sample person as the tools' probe object."""
    return image_probe(demo_capture(person, seed))


def image_probe(image: np.ndarray) -> dict[str, str]:
    """An RGB array as a PNG probe object."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return {"data": base64.b64encode(buffer.getvalue()).decode(), "mime_type": "image/png"}


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """`app` under uvicorn in a thread on a free port of 127.0.0.1 (biomem.server.served); yields the MCP URL."""
    with served(app) as base:
        yield f"{base}/mcp"


def fastapi_host(mcp_app: MCPApp) -> FastAPI:
    """A FastAPI app serving `mcp_app` at /mcp the way the module docstring says to."""
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with mcp_app.lifespan():
            yield

    app = FastAPI(lifespan=lifespan)
    app.add_route("/mcp", mcp_app, include_in_schema=False)
    app.mount("/mcp", mcp_app)
    return app


def session(url: str, work: Callable[[ClientSession], Awaitable[Any]], key: str | None = None) -> Any:
    """Run `work` in an initialized MCP client session (with a bearer key when given)."""
    async def main() -> Any:
        headers = {"Authorization": f"Bearer {key}"} if key else None
        async with httpx2.AsyncClient(headers=headers, timeout=120) as http, \
                streamable_http_client(url, http_client=http) as (read, write), \
                ClientSession(read, write) as client:
            await client.initialize()
            return await work(client)
    return anyio.run(main)


def calls(url: str, *steps: tuple[str, dict[str, Any]], key: str | None = None) -> list[CallToolResult]:
    """Call the tools of `steps` in order in one session."""
    async def work(client: ClientSession) -> list[CallToolResult]:
        return [await client.call_tool(name, args) for name, args in steps]
    return session(url, work, key)


def error_text(result: CallToolResult) -> str:
    """The message of a tool error (asserting it is one, on one line, with no traceback or path)."""
    assert result.is_error, result.structured_content
    text = result.content[0].text
    assert "\n" not in text and "Traceback" not in text and not re.search(r"(/[\w.-]+){2,}|\.py\b", text), text
    return text


@pytest.fixture(scope="module")
def demo(tmp_path_factory, text_encoder, face_encoder) -> Iterator[tuple[str, BioMemory]]:
    """The demo store (its people enrolled as ordinary people, whose probes write) served through FastAPI at /mcp:
    (URL, engine)."""
    mem = BioMemory(tmp_path_factory.mktemp("mcp") / "demo.db", text_model=text_encoder, encoder=face_encoder)
    build_demo(mem, sample=False)
    amem = AsyncBioMemory(mem, workers=2)
    try:
        with serving(fastapi_host(build_mcp(amem))) as url:
            yield url, mem
    finally:
        amem.close()


def test_tools_are_listed_with_descriptions_and_the_probe_schema(demo):
    url, _ = demo
    tools = {tool.name: tool for tool in session(url, lambda client: client.list_tools()).tools}
    assert set(tools) == {"remember", "recall", "ask", "forget_note", "my_groups"}
    for tool in tools.values():
        assert "face in `probe`" in tool.description and "never by a name" in tool.description
        schema = tool.input_schema
        assert schema["properties"]["probe"]["$ref"] == "#/$defs/ImageProbe"
        image = schema["$defs"]["ImageProbe"]
        assert set(image["required"]) == {"data", "mime_type"}
        assert "base64" in image["properties"]["data"]["description"]
        assert tool.output_schema["type"] == "object"
    assert "empty list" in tools["recall"].description
    assert "fresh, clear" in tools["forget_note"].description and tools["forget_note"].annotations.destructive_hint
    assert tools["recall"].annotations.read_only_hint
    assert tools["recall"].input_schema["properties"]["k"]["default"] == 10
    assert tools["remember"].input_schema["required"] == ["text", "probe"]
    assert httpx2.get(url).status_code == 405  # stateless: no SSE stream to hold open


def test_a_note_is_recalled_by_its_owner_only(demo):
    url, mem = demo
    remembered, mine, asked, bens = calls(
        url, ("remember", {"text": "My gym locker code is 3141", "probe": probe(ANA, 3)}),
        ("recall", {"query": "gym locker code", "probe": probe(ANA, 4), "k": 3}),
        ("ask", {"question": "What is my gym locker code?", "probe": probe(ANA, 5)}),
        ("recall", {"query": "gym locker code", "probe": probe(BEN, 3), "k": 10}))
    note = remembered.structured_content["results"][0]
    assert not remembered.is_error and note["event"] == "ADD" and note["memory"] == "My gym locker code is 3141"
    ana = mem.store.identity(note["owner"])
    assert ana.label == "Ana"
    assert mine.structured_content["results"][0]["id"] == note["id"]
    assert mine.structured_content["gate"]["label"] == "Ana" and len(mine.structured_content["results"]) <= 3
    assert "3141" in asked.structured_content["answer"]
    ben = bens.structured_content
    assert ben["gate"]["label"] == "Ben" and ben["results"]
    assert note["id"] not in {r["id"] for r in ben["results"]} and {r["owner"] for r in ben["results"]} != {ana.id}
    assert "3141" not in str(ben) and "Ana" not in str(ben)


def test_a_stranger_gets_nothing_and_stores_nothing(demo):
    url, mem = demo
    before = mem.store.note_total()
    recalled, asked, remembered = calls(
        url, ("recall", {"query": "bank card PIN", "probe": probe(STRANGER, 3)}),
        ("ask", {"question": "What is my bank card PIN?", "probe": probe(STRANGER, 4)}),
        ("remember", {"text": "My PIN is 0000", "probe": probe(STRANGER, 5)}))
    assert recalled.structured_content["results"] == [] and recalled.structured_content["gate"]["matched"] is False
    assert asked.structured_content["results"] == [] and "no memories" in asked.structured_content["answer"]
    assert not any(c.isdigit() for c in asked.structured_content["answer"])
    assert error_text(remembered).startswith("Not recognised")
    assert mem.store.note_total() == before


def test_unusable_probes_are_readable_tool_errors(demo):
    url, mem = demo
    group = {"data": base64.b64encode(group_photo_path().read_bytes()).decode(), "mime_type": "image/jpeg"}
    junk = {"data": base64.b64encode(b"this is not an image").decode(), "mime_type": "image/png"}
    text = {"data": base64.b64encode(b"hello").decode(), "mime_type": "text/plain"}
    garbled = {"data": "%%% not base64 %%%", "mime_type": "image/png"}
    before = mem.store.note_total()
    results = calls(url, ("recall", {"query": "PIN", "probe": junk}), ("remember", {"text": "x", "probe": group}),
                    ("ask", {"question": "PIN?", "probe": text}), ("recall", {"query": "PIN", "probe": garbled}))
    messages = [error_text(r) for r in results]
    assert messages[0].startswith("Not a usable image")
    assert messages[1].startswith("More than one face")
    assert messages[2].startswith("Invalid input") and "text/plain" in messages[2]
    assert messages[3].startswith("Invalid input") and "base64" in messages[3]
    assert mem.store.note_total() == before


def test_arguments_no_host_sends_are_refused_as_rest_refuses_them(demo):
    """A `user_id` (or any argument a tool does not declare) is refused, never ignored; so is text with
    a NUL character or nested JSON in a string: each a readable tool error that writes nothing."""
    url, mem = demo
    before = mem.store.note_total()
    ana = probe(ANA, 7)
    results = calls(url, ("remember", {"text": "My PIN is 1", "probe": ana, "user_id": "ana"}),
                    ("recall", {"query": "PIN", "probe": ana, "user_id": "ben"}),
                    ("ask", {"question": "PIN?", "probe": {**ana, "user_id": "ben"}}),
                    ("remember", {"text": "My PIN\x00 is 1", "probe": ana}),
                    ("recall", {"query": "PIN", "probe": ana, "also": "[" * 100_000 + "]" * 100_000}),
                    ("forget_note", {"note_id": 1, "probe": ana, "k": 3}))
    named = ["user_id", "user_id", "user_id", "NUL", "also", "k"]
    for result, name in zip(results, named, strict=True):
        message = error_text(result)
        assert message.startswith("Invalid input") and name in message, message
        assert "input_value" not in message and "pydantic" not in message  # the arguments are not echoed
    assert mem.store.note_total() == before
    tools = session(url, lambda client: client.list_tools()).tools
    assert all(tool.input_schema["additionalProperties"] is False for tool in tools)


def test_forget_note_needs_the_owner(demo):
    url, mem = demo
    (added,) = calls(url, ("remember", {"text": "My spare key is under the blue pot", "probe": probe(ANA, 6)}))
    note_id = added.structured_content["results"][0]["id"]
    by_ben, missing, by_stranger = calls(
        url, ("forget_note", {"note_id": note_id, "probe": probe(BEN, 4)}),
        ("forget_note", {"note_id": 10**6, "probe": probe(BEN, 5)}),
        ("forget_note", {"note_id": note_id, "probe": probe(STRANGER, 6)}))
    assert error_text(by_ben) == error_text(missing) and error_text(by_ben).startswith("No such note")
    assert error_text(by_stranger).startswith("Fresh probe needed")
    assert mem.store.get_note(added.structured_content["results"][0]["owner"], note_id).id == note_id
    deleted, recalled = calls(url, ("forget_note", {"note_id": note_id, "probe": probe(ANA, 7)}),
                              ("recall", {"query": "spare key", "probe": probe(ANA, 8)}))
    assert deleted.structured_content["results"][0] == {**added.structured_content["results"][0], "event": "DELETE"}
    assert note_id not in {r["id"] for r in recalled.structured_content["results"]}


PALM = "palm-compcode"


def palm_probe(seed: int, capture: int, modality: str | None = PALM) -> dict[str, str]:
    """A synthetic palm capture as the tools' probe object, naming its modality."""
    return {**image_probe(demo_palm(seed, capture)), **({"modality": modality} if modality else {})}


@pytest.fixture(scope="module")
def with_palms(tmp_path_factory, text_encoder, face_encoder) -> Iterator[tuple[str, BioMemory, dict[str, int]]]:
    """The demo store with each person's synthetic palm enrolled beside their face (as ordinary people, whose
    probes write): (URL, engine, ids)."""
    mem = BioMemory(tmp_path_factory.mktemp("mcp-palms") / "demo.db", text_model=text_encoder, encoder=face_encoder)
    ids = build_demo(mem, palm_encoder=PALM, sample=False)
    amem = AsyncBioMemory(mem, workers=2)
    try:
        with serving(fastapi_host(build_mcp(amem))) as url:
            yield url, mem, ids
    finally:
        amem.close()


def test_a_palm_opens_its_owner_s_memory_and_a_face_and_palm_person_forgets_with_both(with_palms):
    url, mem, ids = with_palms
    ana_palm = DEMO_PALM_SEEDS["Ana"]
    remembered, by_palm, stranger = calls(
        url, ("remember", {"text": "My locker at the pool is 77", "probe": probe(ANA, 3)}),
        ("recall", {"query": "locker at the pool", "probe": palm_probe(ana_palm, 4), "k": 10}),
        ("recall", {"query": "locker at the pool", "probe": palm_probe(STRANGER_PALM_SEED, 4), "k": 10}))
    note = remembered.structured_content["results"][0]
    assert by_palm.structured_content["gate"]["label"] == "Ana"
    assert {r["owner"] for r in by_palm.structured_content["results"]} == {ids["Ana"]}
    assert note["id"] in {r["id"] for r in by_palm.structured_content["results"]}
    assert stranger.structured_content["results"] == [] and stranger.structured_content["gate"]["matched"] is False

    face_only, with_palm = calls(
        url, ("forget_note", {"note_id": note["id"], "probe": probe(ANA, 0)}),
        ("forget_note", {"note_id": note["id"], "probe": probe(ANA, 0), "also": [palm_probe(ana_palm, 0)]}))
    assert error_text(face_only).startswith("Fresh probe needed") and f"{PALM} missing" in error_text(face_only)
    assert with_palm.structured_content["results"][0] == {**note, "event": "DELETE"}
    assert note["id"] not in {n.id for n in mem.store.all_notes(ids["Ana"])}


def test_a_palm_of_someone_else_or_of_an_unknown_kind_deletes_nothing(with_palms):
    url, mem, ids = with_palms
    (remembered,) = calls(url, ("remember", {"text": "My bike lock code is 2468", "probe": probe(BEN, 3)}))
    note_id = remembered.structured_content["results"][0]["id"]
    before = mem.store.note_total()
    results = calls(
        url,
        ("forget_note", {"note_id": note_id, "probe": probe(BEN, 0), "also": [palm_probe(DEMO_PALM_SEEDS["Ana"], 0)]}),
        ("forget_note", {"note_id": note_id, "probe": probe(BEN, 0), "also": [palm_probe(2, 0, "palm-ccnet")]}),
        ("forget_note", {"note_id": note_id, "probe": probe(BEN, 0), "also": [probe(BEN, 1)]}),
        ("recall", {"query": "bike", "probe": palm_probe(DEMO_PALM_SEEDS["Ben"], 3, "face-arcface")}))
    messages = [error_text(r).lower() for r in results]
    assert messages[0].startswith("fresh probe needed")  # Ben's face with Ana's palm proves no one
    assert "no 'palm-ccnet' templates" in messages[1] and "two images of face-arcface-s" in messages[2]
    assert "no 'face-arcface' templates" in messages[3]
    assert mem.store.note_total() == before and mem.store.get_note(ids["Ben"], note_id).id == note_id


def refused(url: str, key: str | None) -> int:
    """The HTTP status of an MCP message sent with `key`, after checking the SDK client is refused too."""
    with pytest.raises(Exception) as failure:  # an ExceptionGroup from the client's task group
        session(url, lambda client: client.list_tools(), key)
    assert failure.group_contains(MCPError, depth=None)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    reply = httpx2.post(url, headers={**headers, "Accept": "application/json, text/event-stream"},
                        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert reply.headers.get("www-authenticate", "").startswith("Bearer") and "error" in reply.json()
    return reply.status_code


def test_keys_and_attempt_limits(make_memory, caplog):
    mem = make_memory("keys.db", limits=AttemptLimits(misses=2, window=600.0, cooldown=60.0, budget=2))
    amem = AsyncBioMemory(mem, workers=1)
    try:
        with serving(build_mcp(amem)) as url:  # the app on its own, running its own lifespan
            assert len(session(url, lambda client: client.list_tools()).tools) == 5  # no key in the store: local
            secret, key = create_key(mem.store, "kiosk", "agent")
            assert refused(url, None) == 401
            assert refused(url, "bm_not-a-key") == 401
            stranger = ("recall", {"query": "PIN", "probe": probe(STRANGER, 2)})
            first, second, third = calls(url, stranger, stranger, stranger, key=secret)
            assert first.structured_content["results"] == [] and second.structured_content["results"] == []
            assert error_text(third).startswith("Too many attempts")
            cooled = {line.split()[1].rstrip(":") for line in caplog.messages if "cool-down" in line}
            assert cooled == {client_tag("address:127.0.0.1")}  # limits per address: the key is shared by devices
            assert revoke_key(mem.store, key.id)
            assert refused(url, secret) == 401
    finally:
        amem.close()
