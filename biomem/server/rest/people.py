"""/v1/health, /v1/sessions and /v1/identities: the service's status, a requester's session, enrolment and
forgetting."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Path, Request, Response

from ... import __version__
from ...engine import access
from ...errors import InvalidInputError, UnknownIdentityError
from ..auth import Caller, caller, maybe_caller
from ..deps import Memory, Workers
from ..errors import ApiError
from ..models import EnrolBody, SessionBody, StepUpBody
from ..probes import parse
from ..replies import ForgetReply, HealthReply, IdentityReply, SessionReply
from .common import KEPT, acting, body_doc, fresh_probe, resource_router, session_of

router = resource_router()


@router.get("/health", response_model=HealthReply, **KEPT, summary="Status (counts for an admin key only)")
async def health(request: Request, mem: Memory, amem: Workers, who: Caller = Depends(maybe_caller)) -> dict[str, Any]:
    """Status and version; with an admin key also the store's counts, encoder, τ, LLM and policy, and its
    households (`per_group`: "id: label" -> notes and member ids, as `biomem stats` shows them) and what each
    modality's τ guards (`identification`: N enrolled, calibrated FMR, expected FPIR, largest N under target)."""
    reply: dict[str, Any] = {"status": "ok", "version": __version__}
    if access.allowed("rest:store counts", who.role):
        stats = await amem.run(mem.stats)
        reply["store"] = {**await amem.run(mem.overview), "per_group": stats["per_group"],
                          "identification": stats["identification"]}
    return reply


@router.post("/sessions", status_code=201, response_model=SessionReply, openapi_extra=body_doc(SessionBody),
             summary="Open a requester session: the gate runs once")
async def open_session(request: Request, mem: Memory, amem: Workers, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Run the gate once on the probe: a token that acts as that person (bound to this API key)."""
    body = await parse(request, SessionBody, who, mem)
    if body.probe is None:
        raise InvalidInputError("a session is opened with a probe")
    session = await amem.run(mem.session, body.probe, client=who.clients, ttl=body.fields.ttl, bound_to=who.tag)
    return {"session": session.token, "expires_in": round(session.expires_in, 1), "label": session.label,
            "broad": session.broad}


@router.delete("/sessions", status_code=204, summary="End the session of the X-Biomem-Session header")
async def end_session(request: Request, mem: Memory, amem: Workers, who: Caller = Depends(caller)) -> Response:
    """End the session now (it also ends by itself after `ttl`, and when its person is forgotten)."""
    session = await session_of(request, amem, who, required=True)
    session.close()  # type: ignore[union-attr]
    return Response(status_code=204)


@router.post("/identities", status_code=201, response_model=IdentityReply, summary="Enrol a person",
             openapi_extra=body_doc(EnrolBody, {"images": "one or more captures of one person",
                                                "images_<modality>": "captures of another kind (a palm)"}))
async def enrol(request: Request, mem: Memory, amem: Workers, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Create an identity from one or more captures of one person (refused if they are enrolled already)."""
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
async def forget_me(request: Request, mem: Memory, amem: Workers, who: Caller = Depends(caller)) -> dict[str, Any]:
    """Erase the person a fresh step-up probe proves (and, with a session, only the session's person)."""
    body = await parse(request, StepUpBody, who, mem)
    probe, session = fresh_probe(body, "Forgetting you"), await session_of(request, amem, who)
    target, whom = acting(mem, session, who, probe, step_up=True)
    erased = await amem.run(target.forget, **whom)
    return {"id": erased, "forgotten": True}


@router.delete("/identities/{identity_id}", response_model=ForgetReply, summary="Forget an identity (admin)")
async def forget_identity(request: Request, mem: Memory, amem: Workers, identity_id: int = Path(gt=0, lt=2**63),
                          who: Caller = Depends(caller)) -> dict[str, Any]:
    """Erase an identity by id: notes, links, history, templates, index files (admin key)."""
    try:
        erased = await amem.forget(identity=identity_id)
    except UnknownIdentityError:
        raise ApiError(404, "UnknownIdentityError", f"No identity {identity_id}.", title="No such identity") from None
    return {"id": erased, "forgotten": True}
