"""Who may do what: every door the service opens (a REST route, an MCP tool, a page event) and the
role it needs, in one table that the surfaces check in their handlers and the tests walk in full.

    require("page:enrol", role)      # NotAuthorisedError unless `role` is agent or admin

Roles, weakest first:
    public   anyone who reaches the page; the person is always the probe, and probes are limited
    agent    a caller holding an API key the operator issued (every caller of a store without keys)
    admin    an admin key: act by identity id, store τ, server paths, precomputed embeddings

A door's visibility (Gradio's `api_visibility`, a hidden tab) is never the check: anyone who reads
the page's config can post to any event. A door missing from the table is refused, never open.

Whatever the role, the demo's sample people are read-only to probes (check_writer): the page hands a
capture of them to anyone, so a probe of Ana proves nothing about who shows it. Reading as them stays
open; their memories, captures and households change only through the operator's calls by id.
"""

from __future__ import annotations

from ..errors import NotAuthorisedError, SampleReadOnlyError
from ..stores.records import Identity
from ..vocabulary import ADMIN, AGENT, PUBLIC, ROLES

SAMPLE_READ_ONLY = ("{label} is one of the demo's sample people: anyone can show {label}'s sample photo, so "
                    "{label}'s memories are read-only here. Enrol yourself to try remembering and forgetting.")

# The page: what the README declares public is probe-gated (ask, remember, compare, one's own notes
# with fresh probes) or touches no memory (sample captures, the status line, views of one's own
# results); whatever creates people or changes the gate needs a key.
PAGE: dict[str, str] = {
    "page:status": PUBLIC, "page:sample": PUBLIC, "page:view": PUBLIC, "page:sign_in": PUBLIC,
    "page:ask": PUBLIC, "page:remember": PUBLIC, "page:compare": PUBLIC,
    "page:unlock": PUBLIC, "page:delete_note": PUBLIC, "page:forget": PUBLIC,
    # households: one's own (the probe's), founded and joined with fresh probes of everyone concerned
    "page:households": PUBLIC, "page:found_household": PUBLIC, "page:join_household": PUBLIC,
    "page:leave_household": PUBLIC,
    "page:calibrate_samples": PUBLIC,
    "page:load_demo": AGENT, "page:enrol": AGENT,
    "page:calibrate_folder": ADMIN, "page:store_tau": ADMIN, "page:import_locomo": ADMIN,
}
# REST ("METHOD path" as the router declares it, under /v1); every route but health needs a key.
REST: dict[str, str] = {
    "rest:GET /health": PUBLIC, "rest:* /{path:path}": PUBLIC,
    "rest:POST /sessions": AGENT, "rest:DELETE /sessions": AGENT,
    "rest:POST /identities": AGENT, "rest:DELETE /identities/me": AGENT,
    "rest:DELETE /identities/{identity_id}": ADMIN,
    "rest:POST /memories": AGENT, "rest:GET /memories": AGENT, "rest:GET /memories/{note_id}": AGENT,
    "rest:GET /memories/{note_id}/history": AGENT, "rest:PUT /memories/{note_id}": AGENT,
    "rest:DELETE /memories/{note_id}": AGENT,
    "rest:POST /search": AGENT, "rest:POST /ask": AGENT,
    # households: a requester's calls are probe-keyed; the operator's by id are an admin's
    "rest:POST /groups": AGENT, "rest:POST /groups/mine": AGENT, "rest:POST /groups/{group_id}/members": AGENT,
    "rest:DELETE /groups/{group_id}/members/{member_id}": AGENT, "rest:DELETE /groups/{group_id}": AGENT,
    "rest:POST /admin/groups": ADMIN, "rest:POST /admin/groups/{group_id}/members": ADMIN,
    "rest:DELETE /admin/groups/{group_id}/members/{member_id}": ADMIN, "rest:DELETE /admin/groups/{group_id}": ADMIN,
    # what a route's body may ask beyond the route itself
    "rest:add by identity id": ADMIN, "rest:precomputed embedding": ADMIN, "rest:store counts": ADMIN,
}
MCP: dict[str, str] = {"mcp:remember": AGENT, "mcp:recall": AGENT, "mcp:ask": AGENT, "mcp:forget_note": AGENT,
                       "mcp:my_groups": AGENT}
REQUIRED: dict[str, str] = {**PAGE, **REST, **MCP}


def required(door: str) -> str:
    """The role `door` needs; a door nobody declared needs a role nobody has."""
    return REQUIRED.get(door, "nobody")


def allowed(door: str, role: str) -> bool:
    """Whether a caller of `role` may use `door`."""
    need = required(door)
    return need in ROLES and role in ROLES and ROLES.index(role) >= ROLES.index(need)


def require(door: str, role: str, what: str = "This") -> None:
    """NotAuthorisedError unless a caller of `role` may use `door`."""
    if not allowed(door, role):
        need = required(door)
        raise NotAuthorisedError(f"{what} needs an {need} key; this caller's role is {role}." if need in ROLES
                                 else f"{what} is not offered here.")


def check_writer(person: Identity) -> int:
    """`person`'s id, for a change a probe proved; SampleReadOnlyError for a sample person, whose captures anyone
    can show (a probe of them proves nothing)."""
    if person.sample:
        raise SampleReadOnlyError(SAMPLE_READ_ONLY.format(label=person.label))
    return person.id
