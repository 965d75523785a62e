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

from typing import Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response

from .. import __version__
from ..engine import access
from ..engine.checks import MAX_PAGE_SIZE
from ..engine.memory import BioMemory
from ..engine.sessions import Session
from ..errors import InvalidInputError, SessionExpiredError, StepUpRequiredError, UnknownIdentityError
from ..identity.disclosure import note_view
from ..notes.timeparse import parse_timestamp
from ..stores.filters import check_metadata
from ..stores.records import Group, Note
from .auth import Caller, authorised, caller, maybe_caller
from .errors import ApiError
from .models import (
    FILTERS,
    AddBody,
    AdminGroupBody,
    AdminMemberBody,
    AnswerReply,
    AskBody,
    EnrolBody,
    ErrorReply,
    ForgetReply,
    GroupBody,
    GroupDeletedReply,
    GroupItem,
    GroupsReply,
    HealthReply,
    HistoryReply,
    IdentityReply,
    MemberBody,
    MembershipReply,
    MemoriesReply,
    MemoryItem,
    ProbeBody,
    SearchBody,
    SearchReply,
    SessionBody,
    SessionReply,
    StepUpBody,
    UpdateBody,
    valid_filters,
)
from .probes import MAX_BODY, Body, json_text, parse

SESSION_HEADER = "X-Biomem-Session"
ERRORS = {status: {"model": ErrorReply, "description": text} for status, text in {
    401: "no valid API key, or the session ended", 403: "wrong role, not recognised, or step-up failed",
    413: f"body over {MAX_BODY // 2**20} MB", 415: "neither multipart, JSON nor a urlencoded form",
    422: "bad input: image, face, modality, field",
    429: "too many non-matching probes (Retry-After)", 502: "the LLM did not answer",
    503: "an encoder is not available"}.items()}


def session_header(token: str | None = Header(None, alias=SESSION_HEADER, description=(
        "a session token from POST /v1/sessions: the requester without a probe"))) -> str | None:
    """Declares the session header in the OpenAPI document (session_of reads it)."""
    return token


router = APIRouter(responses=ERRORS, dependencies=[Depends(session_header), Depends(authorised)])
BODIES: list[type] = [SessionBody, AddBody, SearchBody, AskBody, UpdateBody, StepUpBody, EnrolBody, ProbeBody,
                      GroupBody, MemberBody, AdminGroupBody, AdminMemberBody]
NoteId = Path(gt=0, lt=2**63, description="a note id")
GroupId = Path(gt=0, lt=2**63, description="a household's id")
MemberId = Path(gt=0, lt=2**63, description="a member's identity id")
KEPT = {"response_model_exclude_unset": True}  # replies hold exactly the engine view's keys
PROBE_FILES = {"probe": "the requester's image; sent several times, a burst of one person's frames fused into one",
               "probe_<modality>": "one image per modality, for a probe of several modalities (repeat it for a burst)"}


def body_doc(model: type, files: dict[str, str] | None = None) -> dict[str, Any]:
    """OpenAPI requestBody of a route that takes JSON (`model`) or multipart (its fields + image files)."""
    files = files or PROBE_FILES
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    fields = {k: v for k, v in schema.get("properties", {}).items()
              if k not in ("probe", "probes", "images", "captures")}
    binary = {name: {"type": "array", "items": {"type": "string", "format": "binary"}, "description": text}
              if name.startswith("images") else {"type": "string", "format": "binary", "description": text}
              for name, text in files.items()}
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}},
        "multipart/form-data": {"schema": {"type": "object", "properties": {**fields, **binary}}}}}}


def json_doc(model: type) -> dict[str, Any]:
    """OpenAPI requestBody of an admin route that takes JSON only (no probe)."""
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


def engine(request: Request) -> tuple[BioMemory, Any]:
    """(BioMemory, AsyncBioMemory) of the app."""
    return request.app.state.mem, request.app.state.amem


async def session_of(request: Request, who: Caller, *, required: bool = False) -> Session | None:
    """The live session of the X-Biomem-Session header, opened under this caller's key (401 otherwise)."""
    token = request.headers.get(SESSION_HEADER)
    if not token:
        if required:
            raise SessionExpiredError(f"this needs a session: open one with POST /v1/sessions and send its token "
                                      f"as {SESSION_HEADER}")
        return None
    mem, amem = engine(request)
    return await amem.run(mem.sessions.get, token, who.tag)


async def requester(request: Request, who: Caller, body: Body) -> Session | None:
    """For reads and adds: a session or a probe, exactly one."""
    session = await session_of(request, who)
    if session is not None and body.probe is not None:
        raise InvalidInputError(f"send a probe or an {SESSION_HEADER} header, not both")
    if session is None and body.probe is None:
        raise InvalidInputError(f"a probe is needed (an image file `probe`, or JSON `probe`), or an "
                                f"{SESSION_HEADER} header")
    return session


async def as_requester(request: Request, who: Caller, session: Session | None, action: str, *args: Any,
                       probe: Any, step_up: bool = False, **kwargs: Any) -> Any:
    """BioMemory's `action` (search, ask, update, delete, forget) for the requester: as the session's person
    when there is a session (a change still with its fresh step-up probe), else as whoever `probe` shows,
    with the caller's attempt-limit keys."""
    mem, amem = engine(request)
    if session is None:
        return await amem.run(getattr(mem, action), *args, probe=probe, client=who.clients, **kwargs)
    return await amem.run(getattr(session, action), *args, **({"probe": probe} if step_up else {}), **kwargs)


def fresh_probe(body: Body, action: str) -> Any:
    """Changes need a fresh step-up probe in the body, session or not."""
    if body.probe is None:
        raise StepUpRequiredError(f"{action} needs a fresh probe in the body: nothing was changed")
    return body.probe


def item(note: Note, event: str | None = None) -> dict[str, Any]:
    """A note as the API shows it (disclosure's note view), with Mem0's event when there is one."""
    return {**note_view(note), **({"event": event} if event else {})}


# ---- service --------------------------------------------------------------------------------------

@router.get("/health", response_model=HealthReply, **KEPT, summary="Status (counts for an admin key only)")
async def health(request: Request, who: Caller = Depends(maybe_caller)) -> dict[str, Any]:
    """Status and version; with an admin key also the store's counts, encoder, τ, LLM and policy, and its
    households (`per_group`: "id: label" -> notes and member ids, as `biomem stats` shows them) and what each
    modality's τ guards (`identification`: N enrolled, calibrated FMR, expected FPIR, largest N under target)."""
    reply: dict[str, Any] = {"status": "ok", "version": __version__}
    if access.allowed("rest:store counts", who.role):
        mem, amem = engine(request)
        stats = await amem.run(mem.stats)
        reply["store"] = {**await amem.run(mem.overview), "per_group": stats["per_group"],
                          "identification": stats["identification"]}
    return reply


@router.post("/sessions", status_code=201, response_model=SessionReply, openapi_extra=body_doc(SessionBody),
             summary="Open a requester session: the gate runs once")
async def open_session(request: Request, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Run the gate once on the probe: a token that acts as that person (bound to this API key)."""
    mem, amem = engine(request)
    body = await parse(request, SessionBody, who, mem)
    if body.probe is None:
        raise InvalidInputError("a session is opened with a probe")
    session = await amem.run(mem.session, body.probe, client=who.clients, ttl=body.fields.ttl, bound_to=who.tag)
    return {"session": session.token, "expires_in": round(session.expires_in, 1), "label": session.label,
            "broad": session.broad}


@router.delete("/sessions", status_code=204, summary="End the session of the X-Biomem-Session header")
async def end_session(request: Request, who: Caller = Depends(caller)) -> Response:
    """End the session now (it also ends by itself after `ttl`, and when its person is forgotten)."""
    session = await session_of(request, who, required=True)
    session.close()  # type: ignore[union-attr]
    return Response(status_code=204)


# ---- identities -----------------------------------------------------------------------------------

@router.post("/identities", status_code=201, response_model=IdentityReply, summary="Enrol a person",
             openapi_extra=body_doc(EnrolBody, {"images": "one or more captures of one person",
                                                "images_<modality>": "captures of another kind (a palm)"}))
async def enrol(request: Request, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Create an identity from one or more captures of one person (refused if they are enrolled already)."""
    mem, amem = engine(request)
    body = await parse(request, EnrolBody, who, mem)
    if not body.images and not body.captures:
        raise InvalidInputError("enrolment needs one or more images (`images`, or `captures` of several kinds)")
    modality = body.fields.modality or mem.modality
    samples = body.enrolment(modality)
    # a gated attempt: limited per client, and which collision refused it is told to an admin only; an admin
    # may enrol a look-alike relative of someone enrolled when a second kind of capture tells them apart
    identity = await amem.enroll(body.fields.label, samples, modality, client=who.clients, admin=who.admin)
    counts = {name: len(images) for name, images in samples.items()} if isinstance(samples, dict) \
        else {modality: len(samples)}
    return {"id": identity.id, "label": identity.label, "modality": next(iter(counts)), "modalities": counts,
            "templates": sum(counts.values())}


@router.delete("/identities/me", response_model=ForgetReply, openapi_extra=body_doc(StepUpBody),
               summary="Forget me: notes, links, history, templates (fresh step-up probe)")
async def forget_me(request: Request, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Erase the person a fresh step-up probe proves (and, with a session, only the session's person)."""
    body = await parse(request, StepUpBody, who, engine(request)[0])
    probe, session = fresh_probe(body, "Forgetting you"), await session_of(request, who)
    erased = await as_requester(request, who, session, "forget", probe=probe, step_up=True)
    return {"id": erased, "forgotten": True}


@router.delete("/identities/{identity_id}", response_model=ForgetReply, summary="Forget an identity (admin)")
async def forget_identity(request: Request, identity_id: int = Path(gt=0, lt=2**63),
                          who: Caller = Depends(caller)) -> dict[str, Any]:
    """Erase an identity by id: notes, links, history, templates, index files (admin key)."""
    mem, amem = engine(request)
    try:
        erased = await amem.forget(identity=identity_id)
    except UnknownIdentityError:
        raise ApiError(404, "UnknownIdentityError", f"No identity {identity_id}.", title="No such identity") from None
    return {"id": erased, "forgotten": True}


# ---- memories ---------------------------------------------------------------------------------------

def _add(mem: BioMemory, texts: list[str], *, probe: Any, session: Session | None, identity: int | None,
         infer: bool, timestamp: str | None, clients: list[str], scope: int | None = None,
         hidden_from: list[int] | None = None, metadata: dict[str, Any] | None = None) -> list[Note]:
    """Store every text for one writer: the session's, the identity's (admin) or the probe's (gated once), in
    their own notes or, with `scope`, in a household of theirs."""
    parse_timestamp(timestamp)  # a bad timestamp writes nothing
    check_metadata(metadata)  # nor does bad metadata
    placed: dict[str, Any] = {"scope": scope, "hidden_from": hidden_from or (), "metadata": metadata,
                              "timestamp": timestamp, "infer": infer}
    if identity is not None:
        return [mem.add(text, identity=identity, **placed) for text in texts]
    if session is not None:
        return [session.add(text, **placed) for text in texts]
    with mem.session(probe, client=clients) as once:  # the gate runs once for every text
        return [once.add(text, **placed) for text in texts]


@router.post("/memories", status_code=201, response_model=MemoriesReply, **KEPT, openapi_extra=body_doc(AddBody),
             summary="Remember, as the probe's (or session's) owner")
async def add(request: Request, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Store `text`, or each non-system message, for the probe's (or the session's) owner."""
    mem, amem = engine(request)
    body = await parse(request, AddBody, who, mem)
    fields: AddBody = body.fields
    try:
        texts = fields.texts()
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
    session = None
    if fields.identity is not None:
        who.require("rest:add by identity id", "Adding by identity id")
        if body.probe is not None or request.headers.get(SESSION_HEADER):
            raise InvalidInputError("send an identity (admin import) or a probe / session, not both")
    else:
        session = await requester(request, who, body)
    try:
        notes = await amem.run(_add, mem, texts, probe=body.probe, session=session, identity=fields.identity,
                               infer=fields.infer, timestamp=fields.timestamp, clients=who.clients,
                               scope=fields.scope, hidden_from=fields.hidden_from, metadata=fields.metadata)
    except UnknownIdentityError:
        if fields.identity is None:
            raise
        raise ApiError(404, "UnknownIdentityError", f"No identity {fields.identity}.",
                       title="No such identity") from None
    return {"results": [item(note, "ADD") for note in notes]}


@router.get("/memories", response_model=MemoriesReply, **KEPT,
            summary="All of the session's person's notes (a session opened with a step-up-clear probe)")
async def get_all(request: Request, who: Caller = Depends(caller),
                  filters: str | None = Query(None, max_length=20_000, description=f"JSON: {FILTERS}"),
                  page: int = Query(1, ge=1, le=2**31, description="page number, from 1 (needs page_size)"),
                  page_size: int | None = Query(None, ge=1, le=MAX_PAGE_SIZE, description="notes per page")
                  ) -> dict[str, Any]:
    """The notes the session's person may read (their own and their households'), oldest first, that match
    `filters`; page `page` of `page_size` (default: all). A session opened with a step-up-clear probe."""
    where = valid_filters(json_text(filters, "filters")) if filters is not None else None
    session = await session_of(request, who, required=True)
    notes = await engine(request)[1].run(session.get_all, filters=where, page=page,  # type: ignore[union-attr]
                                         page_size=page_size)
    return {"results": [item(note) for note in notes]}


@router.get("/memories/{note_id}", response_model=MemoryItem, **KEPT, summary="One of the session's notes")
async def get(request: Request, note_id: int = NoteId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """One of the session's person's notes; another owner's id is a 404 like a missing one."""
    session = await session_of(request, who, required=True)
    return item(await engine(request)[1].run(session.get, note_id))  # type: ignore[union-attr]


@router.get("/memories/{note_id}/history", response_model=HistoryReply, **KEPT, summary="A note's events")
async def history(request: Request, note_id: int = NoteId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """A note's add / update / evolve / delete events, oldest first."""
    session = await session_of(request, who, required=True)
    events = await engine(request)[1].run(session.history, note_id)  # type: ignore[union-attr]
    return {"results": [{**event, "memory_id": event["note_id"], "event": event["event"].upper(),
                         "old_memory": (event["before"] or {}).get("content"),
                         "new_memory": (event["after"] or {}).get("content"), "created_at": event["at"]}
                        for event in events]}


@router.put("/memories/{note_id}", response_model=MemoryItem, **KEPT, openapi_extra=body_doc(UpdateBody),
            summary="Rewrite a note (fresh step-up probe)")
async def update(request: Request, note_id: int = NoteId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Rewrite one of the requester's notes (analysed and embedded again)."""
    body = await parse(request, UpdateBody, who, engine(request)[0])
    probe, session = fresh_probe(body, "Changing a note"), await session_of(request, who)
    note = await as_requester(request, who, session, "update", note_id, body.fields.text, probe=probe, step_up=True)
    return item(note, "UPDATE")


@router.delete("/memories/{note_id}", response_model=MemoryItem, **KEPT, openapi_extra=body_doc(StepUpBody),
               summary="Delete a note, its text erased from history too (fresh step-up probe)")
async def delete(request: Request, note_id: int = NoteId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Delete one of the requester's notes; its text goes from the history too unless keep_history."""
    body = await parse(request, StepUpBody, who, engine(request)[0])
    probe, session = fresh_probe(body, "Deleting a note"), await session_of(request, who)
    note = await as_requester(request, who, session, "delete", note_id, probe=probe, step_up=True,
                              keep_history=body.fields.keep_history)
    return item(note, "DELETE")


# ---- retrieval ----------------------------------------------------------------------------------------

@router.post("/search", response_model=SearchReply, **KEPT, openapi_extra=body_doc(SearchBody),
             summary="Gated search: only the requester's notes can come back")
async def search(request: Request, who: Caller = Depends(caller)) -> dict[str, Any]:
    """The requester's notes closest to `query`; a stranger gets empty results and no memory."""
    body = await parse(request, SearchBody, who, engine(request)[0])
    fields, session = body.fields, await requester(request, who, body)
    result = await as_requester(request, who, session, "search", fields.query, probe=body.probe, k=fields.k,
                                links=fields.links, filters=fields.filters, threshold=fields.threshold)
    return result.as_dict()


@router.post("/ask", response_model=AnswerReply, **KEPT, openapi_extra=body_doc(AskBody),
             summary="Answer from the requester's own notes only (a stranger's LLM sees none)")
async def ask(request: Request, who: Caller = Depends(caller)) -> dict[str, Any]:
    """An answer from the requester's own notes only; a stranger's LLM gets no memory context."""
    body = await parse(request, AskBody, who, engine(request)[0])
    fields, session = body.fields, await requester(request, who, body)
    answer = await as_requester(request, who, session, "ask", fields.question, probe=body.probe, k=fields.k,
                                links=fields.links)
    return answer.as_dict()


# ---- households ---------------------------------------------------------------------------------------

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
async def create_group(request: Request, who: Caller = Depends(caller)) -> dict[str, Any]:
    """A new household founded by the person a fresh step-up probe proves."""
    mem, amem = engine(request)
    body, probe = await household_change(request, GroupBody, who, mem, "Founding a household")
    group = await amem.run(mem.create_group, body.fields.label, probe=probe, client=who.clients)
    return group.as_dict()


@router.post("/groups/mine", response_model=GroupsReply, **KEPT, openapi_extra=body_doc(ProbeBody),
             summary="The requester's households, with their members")
async def my_groups(request: Request, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Every household the probe's (or the session's) person belongs to, with its members' ids and labels."""
    mem, amem = engine(request)
    body = await parse(request, ProbeBody, who, mem)
    session = await requester(request, who, body)
    groups = await amem.run(session.groups) if session is not None else \
        await amem.run(mem.groups, probe=body.probe, client=who.clients)
    return {"results": [group.as_dict() for group in groups]}


@router.post("/groups/{group_id}/members", response_model=GroupItem, **KEPT, openapi_extra=body_doc(MemberBody, {
             **PROBE_FILES, "member_probe": "the newcomer's image, taken now",
             "member_probe_<modality>": "one image of the newcomer per modality"}),
             summary="Add someone to a household: a member's and the newcomer's fresh step-up probes")
async def add_member(request: Request, group_id: int = GroupId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """A member (`probe`) brings the newcomer in, who shows up in person (`member_probe`)."""
    mem, amem = engine(request)
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
async def remove_member(request: Request, group_id: int = GroupId, member_id: int = MemberId,
                        who: Caller = Depends(caller)) -> dict[str, Any]:
    """Any member may take anyone out; the last member leaving erases the household and its notes."""
    mem, amem = engine(request)
    _, probe = await household_change(request, ProbeBody, who, mem, "Removing a member")
    after = await amem.run(mem.remove_member, group_id, member_id, probe=probe, client=who.clients)
    return membership(group_id, member_id, after)


@router.delete("/groups/{group_id}", response_model=GroupDeletedReply, **KEPT, openapi_extra=body_doc(ProbeBody),
               summary="Erase a household and its notes (fresh step-up probe of a member)")
async def delete_group(request: Request, group_id: int = GroupId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Erase a household: its notes, links and history, as forgetting a person erases theirs."""
    mem, amem = engine(request)
    _, probe = await household_change(request, ProbeBody, who, mem, "Deleting a household")
    return {"id": await amem.run(mem.delete_group, group_id, probe=probe, client=who.clients), "deleted": True}


async def as_operator(request: Request, body: Body | None, action: Any, *args: Any, **kwargs: Any) -> Any:
    """An operator's household call by id: no probe, no session; an unknown person or household is a 404."""
    if body is not None and body.probe is not None or request.headers.get(SESSION_HEADER):
        raise InvalidInputError("an operator's call by id takes no probe or session")
    try:
        return await engine(request)[1].run(action, *args, **kwargs)
    except UnknownIdentityError as exc:
        detail = str(exc)
        raise ApiError(404, "UnknownIdentityError", f"{detail[:1].upper()}{detail[1:]}.",
                       title="No such person or household") from None


@router.post("/admin/groups", status_code=201, response_model=GroupItem, **KEPT, openapi_extra=json_doc(AdminGroupBody),
             summary="Found a household for a person, by identity id (admin)")
async def admin_create_group(request: Request, who: Caller = Depends(caller)) -> dict[str, Any]:
    """A new household whose first member is person `identity` (admin key)."""
    mem = engine(request)[0]
    body = await parse(request, AdminGroupBody, who, mem)
    group = await as_operator(request, body, mem.create_group, body.fields.label, identity=body.fields.identity)
    return group.as_dict()


@router.post("/admin/groups/{group_id}/members", response_model=GroupItem, **KEPT,
             openapi_extra=json_doc(AdminMemberBody), summary="Add a person to a household, by ids (admin)")
async def admin_add_member(request: Request, group_id: int = GroupId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Add person `identity` to household `group_id` (admin key)."""
    mem = engine(request)[0]
    body = await parse(request, AdminMemberBody, who, mem)
    group = await as_operator(request, body, mem.add_member, group_id, identity=body.fields.identity)
    return group.as_dict()


@router.delete("/admin/groups/{group_id}/members/{member_id}", response_model=MembershipReply, **KEPT,
               summary="Take a member out of a household, by ids (admin)")
async def admin_remove_member(request: Request, group_id: int = GroupId, member_id: int = MemberId,
                              who: Caller = Depends(caller)) -> dict[str, Any]:
    """Take person `member_id` out of household `group_id`; the last member leaving erases it (admin key)."""
    mem = engine(request)[0]
    after = await as_operator(request, None, mem.remove_member, group_id, member_id, operator=True)
    return membership(group_id, member_id, after)


@router.delete("/admin/groups/{group_id}", response_model=GroupDeletedReply, **KEPT,
               summary="Erase a household and its notes, by id (admin)")
async def admin_delete_group(request: Request, group_id: int = GroupId,
                             who: Caller = Depends(caller)) -> dict[str, Any]:
    """Erase household `group_id`: its notes, links and history (admin key)."""
    mem = engine(request)[0]
    return {"id": await as_operator(request, None, mem.delete_group, group_id, operator=True), "deleted": True}


@router.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
async def no_such_route(path: str) -> None:
    """Anything else under /v1 is the API's 404, not the page's."""
    raise ApiError(404, "NotFound", "No such route.")
