"""The REST API under /v1: Mem0-shaped routes over the engine, the requester always decided by a probe.

A requester is the probe in the request (multipart file `probe`, or JSON `probe`), or a session
opened with one (`POST /v1/sessions`, then header `X-Biomem-Session`). Reads without a body
(`GET /v1/memories...`) need a session; changes (`PUT`/`DELETE`) need a fresh step-up probe in
the body, with or without a session. Every engine call runs in AsyncBioMemory's worker threads,
with the caller's attempt-limit keys ([key tag, "address:<ip>"]).

Households (`/v1/groups`): founding one, adding someone (the member's and the newcomer's fresh probes),
removing a member and deleting one take fresh step-up probes in the body, never a session; a household
the requester is not in is a 404 exactly like one that does not exist. An admin key acts by id under
`/v1/admin/groups`.
"""

from __future__ import annotations

from ..errors import ApiError
from ..models import (
    AddBody,
    AdminGroupBody,
    AdminMemberBody,
    AskBody,
    EnrolBody,
    GroupBody,
    MemberBody,
    ProbeBody,
    SearchBody,
    SessionBody,
    StepUpBody,
    UpdateBody,
)
from . import households, memories, people
from .common import resource_router

router = resource_router()
for resource in (people, memories, households):  # their routes, in the order the API docs list them
    router.routes.extend(resource.router.routes)


@router.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
async def no_such_route(path: str) -> None:
    """Anything else under /v1 is the API's 404, not the page's."""
    raise ApiError(404, "NotFound", "No such route.")


# every body model a route parses: app.py puts their JSON schemas in the OpenAPI document
BODIES: list[type] = [SessionBody, AddBody, SearchBody, AskBody, UpdateBody, StepUpBody, EnrolBody, ProbeBody,
                      GroupBody, MemberBody, AdminGroupBody, AdminMemberBody]
