"""/v1/groups and /v1/admin/groups: households founded, joined, left and erased in person (fresh step-up
probes), or by ids with an admin key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Depends, Request

from ...engine.aio import AsyncBioMemory
from ...engine.memory import BioMemory
from ...errors import InvalidInputError, StepUpRequiredError, UnknownIdentityError
from ...stores.records import Group
from ..auth import Caller, caller
from ..deps import Memory, Workers
from ..errors import ApiError
from ..models import AdminGroupBody, AdminMemberBody, GroupBody, MemberBody, ProbeBody
from ..probes import Body, parse
from ..replies import GroupDeletedReply, GroupItem, GroupsReply, MembershipReply
from .common import (
    KEPT,
    PROBE_FILES,
    SESSION_HEADER,
    GroupId,
    MemberId,
    body_doc,
    fresh_probe,
    json_doc,
    requester,
    resource_router,
)

T = TypeVar("T")

router = resource_router()


async def household_change(request: Request, model: type[Body], who: Caller, mem: BioMemory,
                           action: str) -> tuple[Any, Any]:
    """(body, its fresh probe) of a household change, which fresh probes in the body alone prove: a session
    header is refused, not ignored."""
    if request.headers.get(SESSION_HEADER):
        raise InvalidInputError(f"{action} takes fresh probes in the body, not an {SESSION_HEADER} header")
    body = await parse(request, model, who, mem)
    return body, fresh_probe(body, action)


def membership(group_id: int, member_id: int, after: Group | None) -> dict[str, Any]:
    """The reply of a removal: the household as it is now, or null once its last member left."""
    return {"id": group_id, "removed": member_id, "group": after.as_dict() if after else None,
            "deleted": after is None}


@router.post("/groups", status_code=201, response_model=GroupItem, **KEPT, openapi_extra=body_doc(GroupBody),
             summary="Found a household (fresh step-up probe): the requester is its first member")
async def create_group(request: Request, mem: Memory, amem: Workers, who: Caller = Depends(caller)) -> dict[str, Any]:
    """A new household founded by the person a fresh step-up probe proves."""
    body, probe = await household_change(request, GroupBody, who, mem, "Founding a household")
    group = await amem.run(mem.create_group, body.fields.label, probe=probe, client=who.clients)
    return group.as_dict()


@router.post("/groups/mine", response_model=GroupsReply, **KEPT, openapi_extra=body_doc(ProbeBody),
             summary="The requester's households, with their members")
async def my_groups(request: Request, mem: Memory, amem: Workers, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Every household the probe's (or the session's) person belongs to, with its members' ids and labels."""
    body = await parse(request, ProbeBody, who, mem)
    session = await requester(request, amem, who, body)
    groups = await amem.run(session.groups) if session is not None else \
        await amem.run(mem.groups, probe=body.probe, client=who.clients)
    return {"results": [group.as_dict() for group in groups]}


@router.post("/groups/{group_id}/members", response_model=GroupItem, **KEPT, openapi_extra=body_doc(MemberBody, {
             **PROBE_FILES, "member_probe": "the newcomer's image, taken now",
             "member_probe_<modality>": "one image of the newcomer per modality"}),
             summary="Add someone to a household: a member's and the newcomer's fresh step-up probes")
async def add_member(request: Request, mem: Memory, amem: Workers,
                     group_id: int = GroupId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """A member (`probe`) brings the newcomer in, who shows up in person (`member_probe`)."""
    body, probe = await household_change(request, MemberBody, who, mem, "Adding someone to a household")
    if body.member_probe is None:
        raise StepUpRequiredError("Adding someone to a household needs the newcomer's own fresh probe "
                                  "(`member_probe`): nobody joins without showing up. Nothing was changed")
    group = await amem.run(mem.add_member, group_id, probe=probe, member_probe=body.member_probe,
                           client=who.clients)
    return group.as_dict()


@router.delete("/groups/{group_id}/members/{member_id}", response_model=MembershipReply, **KEPT,
               openapi_extra=body_doc(ProbeBody),
               summary="Take a member out of a household, oneself included (fresh step-up probe of a member)")
async def remove_member(request: Request, mem: Memory, amem: Workers,
                        group_id: int = GroupId, member_id: int = MemberId,
                        who: Caller = Depends(caller)) -> dict[str, Any]:
    """Any member may take anyone out; the last member leaving erases the household and its notes."""
    _, probe = await household_change(request, ProbeBody, who, mem, "Removing a member")
    after = await amem.run(mem.remove_member, group_id, member_id, probe=probe, client=who.clients)
    return membership(group_id, member_id, after)


@router.delete("/groups/{group_id}", response_model=GroupDeletedReply, **KEPT, openapi_extra=body_doc(ProbeBody),
               summary="Erase a household and its notes (fresh step-up probe of a member)")
async def delete_group(request: Request, mem: Memory, amem: Workers,
                       group_id: int = GroupId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Erase a household: its notes, links and history, as forgetting a person erases theirs."""
    _, probe = await household_change(request, ProbeBody, who, mem, "Deleting a household")
    return {"id": await amem.run(mem.delete_group, group_id, probe=probe, client=who.clients), "deleted": True}


async def as_operator(request: Request, amem: AsyncBioMemory, body: Body | None, action: Callable[..., T], *args: Any,
                      **kwargs: Any) -> T:
    """An operator's household call by id: no probe, no session; an unknown person or household is a 404."""
    if body is not None and body.probe is not None or request.headers.get(SESSION_HEADER):
        raise InvalidInputError("an operator's call by id takes no probe or session")
    try:
        return await amem.run(action, *args, **kwargs)
    except UnknownIdentityError as exc:
        detail = str(exc)
        raise ApiError(404, "UnknownIdentityError", f"{detail[:1].upper()}{detail[1:]}.",
                       title="No such person or household") from None


@router.post("/admin/groups", status_code=201, response_model=GroupItem, **KEPT, openapi_extra=json_doc(AdminGroupBody),
             summary="Found a household for a person, by identity id (admin)")
async def admin_create_group(request: Request, mem: Memory, amem: Workers,
                             who: Caller = Depends(caller)) -> dict[str, Any]:
    """A new household whose first member is person `identity` (admin key)."""
    body = await parse(request, AdminGroupBody, who, mem)
    group = await as_operator(request, amem, body, mem.create_group, body.fields.label, identity=body.fields.identity)
    return group.as_dict()


@router.post("/admin/groups/{group_id}/members", response_model=GroupItem, **KEPT,
             openapi_extra=json_doc(AdminMemberBody), summary="Add a person to a household, by ids (admin)")
async def admin_add_member(request: Request, mem: Memory, amem: Workers,
                           group_id: int = GroupId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Add person `identity` to household `group_id` (admin key)."""
    body = await parse(request, AdminMemberBody, who, mem)
    group = await as_operator(request, amem, body, mem.add_member, group_id, identity=body.fields.identity)
    return group.as_dict()


@router.delete("/admin/groups/{group_id}/members/{member_id}", response_model=MembershipReply, **KEPT,
               summary="Take a member out of a household, by ids (admin)")
async def admin_remove_member(request: Request, mem: Memory, amem: Workers,
                              group_id: int = GroupId, member_id: int = MemberId,
                              who: Caller = Depends(caller)) -> dict[str, Any]:
    """Take person `member_id` out of household `group_id`; the last member leaving erases it (admin key)."""
    after = await as_operator(request, amem, None, mem.remove_member, group_id, member_id, operator=True)
    return membership(group_id, member_id, after)


@router.delete("/admin/groups/{group_id}", response_model=GroupDeletedReply, **KEPT,
               summary="Erase a household and its notes, by id (admin)")
async def admin_delete_group(request: Request, mem: Memory, amem: Workers, group_id: int = GroupId,
                             who: Caller = Depends(caller)) -> dict[str, Any]:
    """Erase household `group_id`: its notes, links and history (admin key)."""
    return {"id": await as_operator(request, amem, None, mem.delete_group, group_id, operator=True), "deleted": True}
