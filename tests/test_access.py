"""Every door has an owner: the access table (biomem.engine.access) names every REST route, MCP tool and page
event, and each one, called the way an outsider would call it, opens only for the role the table says.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from fastapi.routing import APIRoute
from mcp.server.mcpserver import MCPServer

from biomem import BioMemory
from biomem.engine import access
from biomem.engine.demo import build_demo
from biomem.engine.keys import create_key
from biomem.server import create_app, rest, served
from biomem.server.mcp import register_tools
from biomem.settings import Settings
from tests.shared import served_app

# Doors that are parts of a route's body, not routes (checked by the route's own tests).
BODY_DOORS = {"rest:add by identity id", "rest:precomputed embedding", "rest:store counts"}


def rest_doors() -> dict[str, APIRoute]:
    """{access door: route} of every route of the REST router, named as biomem.server.auth.door_of names them."""
    doors = {}
    for route in rest.router.routes:
        if isinstance(route, APIRoute):
            methods = route.methods - {"HEAD"}
            doors[f"rest:{next(iter(methods)) if len(methods) == 1 else '*'} {route.path}"] = route
    return doors


def mcp_doors(mem: BioMemory) -> set[str]:
    server = MCPServer("probe")
    register_tools(server, type("Async", (), {"mem": mem})())
    return {f"mcp:{tool.name}" for tool in asyncio.run(server.list_tools())}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, text_encoder, face_encoder):
    """The demo store with an agent and an admin key, served as `biomem serve` serves it."""
    mem = BioMemory(tmp_path_factory.mktemp("access") / "a.db", text_model=text_encoder, encoder=face_encoder)
    build_demo(mem)
    keys = {role: create_key(mem.store, role, role)[0] for role in ("agent", "admin")}
    app = create_app(mem, Settings.from_env().model_copy(update={"host": "127.0.0.1"}))
    with served(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        yield mem, app, keys, http
    mem.close()


def test_the_table_names_every_route_and_tool_and_nothing_else(keyed):
    mem, app, _, _ = keyed
    declared = {door for door in access.REQUIRED if door.startswith(("rest:", "mcp:"))} - BODY_DOORS
    assert set(rest_doors()) | mcp_doors(mem) == declared
    assert set(access.REQUIRED.values()) <= set(access.ROLES)


def test_an_undeclared_door_opens_for_nobody():
    assert not access.allowed("page:something new", "admin")
    assert access.allowed("page:ask", "public") and not access.allowed("page:enrol", "public")
    assert access.allowed("page:enrol", "admin") and not access.allowed("page:store_tau", "agent")


def test_every_route_opens_only_for_its_role(keyed):
    """Each route with no key, an agent key and an admin key: refused (401/403) exactly below its role,
    and refused before the handler reads the body (an empty body gets the role's answer, not a 422)."""
    mem, app, keys, http = keyed
    before = mem.store.counts()
    for door, route in rest_doors().items():
        method = next(iter(route.methods - {"HEAD"})) if len(route.methods - {"HEAD"}) == 1 else "POST"
        path = "/v1" + route.path.replace("{identity_id}", "999").replace("{note_id}", "1")
        path = path.replace("{path:path}", "nowhere")
        for role, headers in (("public", {}), *((r, {"Authorization": f"Bearer {k}"}) for r, k in keys.items())):
            reply = http.request(method, path, headers=headers)
            refused = reply.json().get("error", {}).get("type") if reply.status_code >= 400 else None
            if access.allowed(door, role):
                assert refused not in ("AuthenticationError", "NotAuthorisedError"), (door, role, reply.text)
            else:
                expected = ("AuthenticationError", 401) if role == "public" else ("NotAuthorisedError", 403)
                assert (refused, reply.status_code) == expected, (door, role, reply.text)
    assert mem.store.counts() == before


def call_event(url: str, fn_index: int, data: list, session: str, headers: dict[str, str] | None = None) -> dict:
    """One page event called the way an outsider would: POST to Gradio's queue (no browser, no key; `headers`
    added to the POST), then read the stream to the event's last message."""
    joined = httpx.post(f"{url}gradio_api/queue/join", headers=headers, json={
        "data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None})
    assert joined.status_code == 200, joined.text
    with httpx.stream("GET", f"{url}gradio_api/queue/data?session_hash={session}", timeout=120) as events:
        for line in events.iter_lines():
            if line.startswith("data:") and '"process_completed"' in line:
                return json.loads(line[5:])
    raise AssertionError(f"event {fn_index} never completed")


@pytest.fixture
def keyed_page(tmp_path, text_encoder, face_encoder):
    """The page over the demo store with an agent key in the store (as under `biomem serve`)."""
    mem = BioMemory(tmp_path / "page.db", text_model=text_encoder, encoder=face_encoder)
    build_demo(mem)
    secret = create_key(mem.store, "operator", "agent")[0]
    with served_app(mem, tmp_path / "cache") as served:
        yield served, secret
    mem.close()


def test_every_page_event_is_a_door_and_opens_only_for_its_role(keyed_page):
    """Every event the running page registers, posted to the queue without a key with the values its
    inputs hold on load: only the public ones answer anything but the door's refusal, and nothing is
    written. Then an operator signs in with the key in one tab: that tab may enrol, another may not."""
    served, secret = keyed_page
    config = httpx.get(f"{served.url}config").json()
    values = {c["id"]: c.get("props", {}).get("value") for c in config["components"]}
    events = {d["id"]: d for d in config["dependencies"]}
    assert set(events) == set(served.demo.fns)
    before = served.mem.store.counts()
    for fn_index, fn in served.demo.fns.items():
        name = getattr(fn.fn, "door", None)
        assert name in access.PAGE, f"event {fn_index} ({fn.name}) is not a door of biomem.engine.access"
        reply = call_event(served.url, fn_index, [values.get(i) for i in events[fn_index]["inputs"]], f"out{fn_index}")
        refused = "this caller's role is public" in json.dumps(reply)
        assert refused == (not access.allowed(name, "public")), (fn_index, name, reply)
    assert served.mem.store.counts() == before

    enrol = next(i for i, fn in served.demo.fns.items() if fn.fn.door == "page:enrol")
    sign_in = next(i for i, fn in served.demo.fns.items() if fn.fn.door == "page:sign_in"
                   and len(events[i]["inputs"]) == 1)
    wrong = call_event(served.url, sign_in, ["bm_not-a-key"], "operator")
    assert wrong["success"] is False and "unknown or revoked" in json.dumps(wrong)
    assert call_event(served.url, sign_in, [secret], "operator")["success"] is True
    # no images or recordings: the door opens, then enrolment asks for them
    enrolment = ["Dana", None, None, None, None, None, None, None]
    assert "No images" in json.dumps(call_event(served.url, enrol, enrolment, "operator"))
    assert "this caller's role is public" in json.dumps(call_event(served.url, enrol, enrolment, "someone else"))
