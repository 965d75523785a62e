"""What the REST routes share: the session header, the error replies, the OpenAPI of a body, and the
requester of a call (a session or a probe)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Header, Path, Request

from ...engine.aio import AsyncBioMemory
from ...engine.memory import BioMemory
from ...engine.sessions import Session
from ...errors import InvalidInputError, SessionExpiredError, StepUpRequiredError
from ...identity.disclosure import note_view
from ...stores.records import Note
from ..auth import Caller, authorised
from ..probes import MAX_BODY, Body
from ..replies import ErrorReply

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


def resource_router() -> APIRouter:
    """A router of /v1 routes: each declares the session header and takes the caller's key, with the error replies."""
    return APIRouter(responses=ERRORS, dependencies=[Depends(session_header), Depends(authorised)])


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


async def session_of(request: Request, amem: AsyncBioMemory, who: Caller, *,
                     required: bool = False) -> Session | None:
    """The live session of the X-Biomem-Session header, opened under this caller's key (401 otherwise)."""
    token = request.headers.get(SESSION_HEADER)
    if not token:
        if required:
            raise SessionExpiredError(f"this needs a session: open one with POST /v1/sessions and send its token "
                                      f"as {SESSION_HEADER}")
        return None
    return await amem.run(amem.mem.sessions.get, token, who.tag)


async def requester(request: Request, amem: AsyncBioMemory, who: Caller, body: Body) -> Session | None:
    """For reads and adds: a session or a probe, exactly one."""
    session = await session_of(request, amem, who)
    if session is not None and body.probe is not None:
        raise InvalidInputError(f"send a probe or an {SESSION_HEADER} header, not both")
    if session is None and body.probe is None:
        raise InvalidInputError(f"a probe is needed (an image file `probe`, or JSON `probe`), or an "
                                f"{SESSION_HEADER} header")
    return session


def acting(mem: BioMemory, session: Session | None, who: Caller, probe: Any, *,
           step_up: bool = False) -> tuple[BioMemory | Session, dict[str, Any]]:
    """(what a requester's call goes through, the keywords it takes): the session's person when there is a session
    (a change still with its fresh step-up `probe`), else the engine, gating `probe` with the caller's
    attempt-limit keys. BioMemory and Session share the calls (search, ask, update, delete, forget)."""
    if session is None:
        return mem, {"probe": probe, "client": who.clients}
    return session, {"probe": probe} if step_up else {}


def fresh_probe(body: Body, action: str) -> Any:
    """Changes need a fresh step-up probe in the body, session or not."""
    if body.probe is None:
        raise StepUpRequiredError(f"{action} needs a fresh probe in the body: nothing was changed")
    return body.probe


def item(note: Note, event: str | None = None) -> dict[str, Any]:
    """A note as the API shows it (disclosure's note view), with Mem0's event when there is one."""
    return {**note_view(note), **({"event": event} if event else {})}
