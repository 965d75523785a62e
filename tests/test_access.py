"""Every door has an owner: the access table (biomem.access) names every REST route, MCP tool and page
event, and each one, called the way an outsider would call it, opens only for the role the table says.
"""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest
from fastapi.routing import APIRoute
from mcp.server.mcpserver import MCPServer

from biomem import BioMemory, access
from biomem.demo import build_demo
from biomem.keys import create_key
from biomem.server import create_app, served
from biomem.server import rest
from biomem.server.mcp import register_tools
from biomem.settings import Settings

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
    app = create_app(mem, dataclasses.replace(Settings.from_env(), host="127.0.0.1"))
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
        path = "/v1" + route.path.replace("{identity_id}", "999").replace("{note_id}", "1").replace("{path:path}", "nowhere")
        for role, headers in (("public", {}), *((r, {"Authorization": f"Bearer {k}"}) for r, k in keys.items())):
            reply = http.request(method, path, headers=headers)
            refused = reply.json().get("error", {}).get("type") if reply.status_code >= 400 else None
            if access.allowed(door, role):
                assert refused not in ("AuthenticationError", "NotAuthorisedError"), (door, role, reply.text)
            else:
                expected = ("AuthenticationError", 401) if role == "public" else ("NotAuthorisedError", 403)
                assert (refused, reply.status_code) == expected, (door, role, reply.text)
    assert mem.store.counts() == before
