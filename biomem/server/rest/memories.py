"""/v1/memories, /v1/search and /v1/ask: a requester's notes, read and changed, and the gated retrieval."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Query, Request

from ...engine.checks import MAX_PAGE_SIZE
from ...engine.memory import BioMemory
from ...engine.sessions import Session
from ...errors import InvalidInputError, UnknownIdentityError
from ...notes.timeparse import parse_timestamp
from ...stores.filters import check_metadata
from ...stores.records import Note
from ..auth import Caller, caller
from ..deps import Memory, Workers
from ..errors import ApiError
from ..models import FILTERS, AddBody, AskBody, SearchBody, StepUpBody, UpdateBody, valid_filters
from ..probes import json_text, parse
from ..replies import AnswerReply, HistoryReply, MemoriesReply, MemoryItem, SearchReply
from .common import (
    KEPT,
    SESSION_HEADER,
    NoteId,
    acting,
    body_doc,
    fresh_probe,
    item,
    requester,
    resource_router,
    session_of,
)

router = resource_router()


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
async def add(request: Request, mem: Memory, amem: Workers, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Store `text`, or each non-system message, for the probe's (or the session's) owner."""
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
        session = await requester(request, amem, who, body)
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
async def get_all(request: Request, mem: Memory, amem: Workers, who: Caller = Depends(caller),
                  filters: str | None = Query(None, max_length=20_000, description=f"JSON: {FILTERS}"),
                  page: int = Query(1, ge=1, le=2**31, description="page number, from 1 (needs page_size)"),
                  page_size: int | None = Query(None, ge=1, le=MAX_PAGE_SIZE, description="notes per page")
                  ) -> dict[str, Any]:
    """The notes the session's person may read (their own and their households'), oldest first, that match
    `filters`; page `page` of `page_size` (default: all). A session opened with a step-up-clear probe."""
    where = valid_filters(json_text(filters, "filters")) if filters is not None else None
    session = await session_of(request, amem, who, required=True)
    notes = await amem.run(session.get_all, filters=where, page=page,  # type: ignore[union-attr]
                                         page_size=page_size)
    return {"results": [item(note) for note in notes]}


@router.get("/memories/{note_id}", response_model=MemoryItem, **KEPT, summary="One of the session's notes")
async def get(request: Request, mem: Memory, amem: Workers,
              note_id: int = NoteId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """One of the session's person's notes; another owner's id is a 404 like a missing one."""
    session = await session_of(request, amem, who, required=True)
    return item(await amem.run(session.get, note_id))  # type: ignore[union-attr]


@router.get("/memories/{note_id}/history", response_model=HistoryReply, **KEPT, summary="A note's events")
async def history(request: Request, mem: Memory, amem: Workers,
                  note_id: int = NoteId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """A note's add / update / evolve / delete events, oldest first."""
    session = await session_of(request, amem, who, required=True)
    events = await amem.run(session.history, note_id)  # type: ignore[union-attr]
    return {"results": [{**event, "memory_id": event["note_id"], "event": event["event"].upper(),
                         "old_memory": (event["before"] or {}).get("content"),
                         "new_memory": (event["after"] or {}).get("content"), "created_at": event["at"]}
                        for event in events]}


@router.put("/memories/{note_id}", response_model=MemoryItem, **KEPT, openapi_extra=body_doc(UpdateBody),
            summary="Rewrite a note (fresh step-up probe)")
async def update(request: Request, mem: Memory, amem: Workers,
                 note_id: int = NoteId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Rewrite one of the requester's notes (analysed and embedded again)."""
    body = await parse(request, UpdateBody, who, mem)
    probe, session = fresh_probe(body, "Changing a note"), await session_of(request, amem, who)
    target, whom = acting(mem, session, who, probe, step_up=True)
    note = await amem.run(target.update, note_id, body.fields.text, **whom)
    return item(note, "UPDATE")


@router.delete("/memories/{note_id}", response_model=MemoryItem, **KEPT, openapi_extra=body_doc(StepUpBody),
               summary="Delete a note, its text erased from history too (fresh step-up probe)")
async def delete(request: Request, mem: Memory, amem: Workers,
                 note_id: int = NoteId, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Delete one of the requester's notes; its text goes from the history too unless keep_history."""
    body = await parse(request, StepUpBody, who, mem)
    probe, session = fresh_probe(body, "Deleting a note"), await session_of(request, amem, who)
    target, whom = acting(mem, session, who, probe, step_up=True)
    note = await amem.run(target.delete, note_id, keep_history=body.fields.keep_history, **whom)
    return item(note, "DELETE")


@router.post("/search", response_model=SearchReply, **KEPT, openapi_extra=body_doc(SearchBody),
             summary="Gated search: only the requester's notes can come back")
async def search(request: Request, mem: Memory, amem: Workers, who: Caller = Depends(caller)) -> dict[str, Any]:
    """The requester's notes closest to `query`; a stranger gets empty results and no memory."""
    body = await parse(request, SearchBody, who, mem)
    fields, session = body.fields, await requester(request, amem, who, body)
    target, whom = acting(mem, session, who, body.probe)
    result = await amem.run(target.search, fields.query, k=fields.k, links=fields.links, filters=fields.filters,
                            threshold=fields.threshold, **whom)
    return result.as_dict()


@router.post("/ask", response_model=AnswerReply, **KEPT, openapi_extra=body_doc(AskBody),
             summary="Answer from the requester's own notes only (a stranger's LLM sees none)")
async def ask(request: Request, mem: Memory, amem: Workers, who: Caller = Depends(caller)) -> dict[str, Any]:
    """An answer from the requester's own notes only; a stranger's LLM gets no memory context."""
    body = await parse(request, AskBody, who, mem)
    fields, session = body.fields, await requester(request, amem, who, body)
    target, whom = acting(mem, session, who, body.probe)
    answer = await amem.run(target.ask, fields.question, k=fields.k, links=fields.links, **whom)
    return answer.as_dict()
