"""`biomem serve` over real HTTP: uvicorn in a thread on 127.0.0.1, httpx as the client.

Every route as owner, non-owner and stranger; sessions bound to their key; API keys and roles;
every bad input a 4xx JSON error that writes nothing and shows no internals; the bind refusal of a
store without keys; SIGTERM and SIGINT closing the store; and a kill -9 in the middle of a burst of adds (slow).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import httpx
import numpy as np
import pytest

from biomem import BioMemory
from biomem.engine.demo import build_demo, demo_capture, usable_capture
from biomem.engine.keys import create_key, revoke_key
from biomem.errors import LLMError, ModelUnavailableError
from biomem.identity.samples import group_photo_path
from biomem.notes.llamacpp import free_port
from biomem.server import create_app, served
from biomem.server.auth import loopback
from biomem.server.errors import MAX_MESSAGE
from biomem.server.probes import MAX_BODY
from biomem.settings import Settings
from biomem.vocabulary import AttemptLimits
from modalities.palmsynth import palm_capture

from .shared import ANA, BEN, CHLOE, STRANGER, Tracebacks, b64, error_of, module_store, png, rest_service, written

SESSION = "X-Biomem-Session"


@pytest.fixture(scope="module")
def faces(face_encoder) -> SimpleNamespace:
    """PNG probes: fresh captures (asking), enrolment photos (clear enough for step-up), a stranger."""
    fresh = {p: png(usable_capture(face_encoder, p, range(10, 40))) for p in (ANA, BEN, CHLOE, STRANGER)}
    clear = {p: png(demo_capture(p, 0)) for p in (ANA, BEN, CHLOE)}
    return SimpleNamespace(fresh=fresh, clear=clear)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def service(request, tmp_path_factory, text_encoder, face_encoder):
    """The demo store (Ana, Ben, Chloe, enrolled as ordinary people: their probes write, where the demo's sample
    people's would not, tests/test_samples_read_only.py) with admin, agent, second-agent and revoked keys, served
    once on each store: REST, MCP and the page, as `biomem serve` builds them."""
    mem = BioMemory(module_store(request, tmp_path_factory, "server"), text_model=text_encoder,
                    encoder=face_encoder, limits="off")
    ids = build_demo(mem, sample=False)
    keys = {name: create_key(mem.store, name, "admin" if name == "admin" else "agent")[0]
            for name in ("admin", "agent", "other", "revoked")}
    revoke_key(mem.store, 4)
    with rest_service(mem) as (url, http):
        def call(method: str, path: str, *, key: str | None = "agent", session: str | None = None,
                 probe: bytes | None = None, **kwargs) -> httpx.Response:
            headers = {**({"Authorization": f"Bearer {keys[key]}"} if key else {}),
                       **({SESSION: session} if session else {}), **kwargs.pop("headers", {})}
            if probe is not None:
                kwargs["files"] = {"probe": ("probe.png", probe, "image/png")}
            return http.request(method, f"/v1{path}", headers=headers, **kwargs)
        yield SimpleNamespace(url=url, mem=mem, ids=ids, keys=keys, call=call, http=http)
    mem.close()


def open_session(service, person_png: bytes, key: str = "agent", **data) -> dict:
    response = service.call("POST", "/sessions", key=key, probe=person_png, data=data)
    assert response.status_code == 201, response.text
    return response.json()


# ---- service and keys -------------------------------------------------------------------------

def test_health_shows_counts_to_an_admin_only(service):
    assert service.call("GET", "/health", key=None).json() == {"status": "ok", "version": "0.1.0"}
    assert service.call("GET", "/health", key="revoked").json() == {"status": "ok", "version": "0.1.0"}
    agent = service.call("GET", "/health").json()
    assert "store" not in agent and "Ana" not in json.dumps(agent)
    store = service.call("GET", "/health", key="admin").json()["store"]
    assert store["people"] == 3 and store["notes"] >= 11


def test_a_missing_unknown_or_revoked_key_is_401_and_a_wrong_role_403(service, faces):
    before = written(service.mem)
    for key, headers in ((None, {}), (None, {"Authorization": "Bearer bm_nope"}), (None, {"X-API-Key": "bm_x"}),
                         ("revoked", {})):
        response = service.call("POST", "/search", key=key, headers=headers, probe=faces.fresh[ANA],
                                data={"query": "PIN"})
        error_of(response, 401, "AuthenticationError")
        assert response.headers["www-authenticate"] == "Bearer"
    assert service.call("POST", "/search", key=None, headers={"X-API-Key": service.keys["agent"]},
                        probe=faces.fresh[ANA], data={"query": "PIN"}).status_code == 200
    error_of(service.call("DELETE", f"/identities/{service.ids['Chloe']}"), 403, "NotAuthorisedError")
    error_of(service.call("POST", "/memories", json={"text": "planted", "identity": service.ids["Ana"]}),
             403, "NotAuthorisedError")
    embedding = {"embedding": [0.1] * 512, "modality": "face-arcface-s"}
    error_of(service.call("POST", "/search", json={"query": "PIN", "probe": embedding}), 403, "NotAuthorisedError")
    assert written(service.mem) == before
    assert service.http.post("/mcp", json={}).status_code == 401  # MCP is mounted and checks keys too


def test_the_page_mcp_and_the_openapi_document_are_served(service):
    page = service.http.get("/")
    assert page.status_code == 200 and "<html" in page.text.lower()
    spec = service.http.get("/v1/openapi.json").json()
    assert {"/v1/search", "/v1/ask", "/v1/memories", "/v1/memories/{note_id}", "/v1/sessions",
            "/v1/identities", "/v1/identities/me", "/v1/health"} <= set(spec["paths"])
    body = spec["paths"]["/v1/search"]["post"]["requestBody"]["content"]
    assert {"application/json", "multipart/form-data"} <= set(body)
    assert "probe" in body["multipart/form-data"]["schema"]["properties"]
    assert spec["components"]["schemas"]["SearchBody"]["examples"]
    assert "ErrorReply" in spec["components"]["schemas"]
    tools = service.http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers={
        "Authorization": f"Bearer {service.keys['agent']}", "Accept": "application/json, text/event-stream"})
    assert {t["name"] for t in tools.json()["result"]["tools"]} == {"remember", "recall", "ask", "forget_note",
                                                                    "my_groups"}


# ---- reads as owner, non-owner and stranger ------------------------------------------------------

def test_search_and_ask_return_only_the_requester_s_notes(service, faces):
    for person, pin in ((ANA, "4821"), (BEN, "7390")):
        reply = service.call("POST", "/search", probe=faces.fresh[person], data={"query": "bank card PIN", "k": "3"})
        assert reply.status_code == 200
        found = reply.json()
        assert pin in found["results"][0]["memory"] and found["gate"]["matched"]
        assert {n["owner"] for n in found["results"]} == {service.ids[["Ana", "Ben"][person]]}
        assert found["gated_out"]["total"] > 0 and "owners" not in found["gated_out"]  # private disclosure
        answer = service.call("POST", "/ask", json={"question": "What is my bank card PIN?",
                                                    "probe": b64(faces.fresh[person])}).json()
        assert pin in answer["answer"]
    stranger = service.call("POST", "/search", probe=faces.fresh[STRANGER], data={"query": "bank card PIN"}).json()
    assert stranger == {"results": [], "gate": {"matched": False, "modality": "face-arcface-s"}, "gated_out": None}
    answer = service.call("POST", "/ask", probe=faces.fresh[STRANGER], data={"question": "What is my PIN?"}).json()
    assert answer["results"] == [] and not any(pin in answer["answer"] for pin in ("4821", "7390", "1156"))


def test_people_asking_at_once_each_get_only_their_own_notes(service, faces):
    """Probes of four people encoded side by side (the face encoder runs unlocked, 8 requests in
    flight): no reply ever carries a note of anyone but the probe's owner, the stranger's none."""
    owner_of = {ANA: service.ids["Ana"], BEN: service.ids["Ben"], CHLOE: service.ids["Chloe"], STRANGER: None}

    def search(person: int) -> tuple[int, httpx.Response]:
        return person, service.call("POST", "/search", probe=faces.fresh[person],
                                    data={"query": "bank card PIN", "k": "10"})
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(search, [person for _ in range(6) for person in owner_of]))
    for person, reply in replies:
        assert reply.status_code == 200, reply.text
        owners = {note["owner"] for note in reply.json()["results"]}
        assert owners == ({owner_of[person]} if owner_of[person] else set())


def test_add_stores_for_the_probe_s_owner_only(service, faces):
    added = service.call("POST", "/memories", probe=faces.fresh[CHLOE], data={"text": "My gym locker is 31"})
    assert added.status_code == 201
    note = added.json()["results"][0]
    assert note["event"] == "ADD" and note["owner"] == service.ids["Chloe"] and note["memory"] == "My gym locker is 31"
    ben = service.call("POST", "/search", probe=faces.fresh[BEN], data={"query": "gym locker", "k": "10"}).json()
    assert note["id"] not in [n["id"] for n in ben["results"]]
    before = written(service.mem)
    error_of(service.call("POST", "/memories", probe=faces.fresh[STRANGER], data={"text": "Planted"}),
             403, "UnknownIdentityError")
    assert written(service.mem) == before


def test_messages_with_infer_false_are_stored_as_given(service, faces):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "I moved to Lisbon"},
                {"role": "assistant", "content": "Noted: you live in Lisbon"}]
    reply = service.call("POST", "/memories", json={"messages": messages, "infer": False,
                                                    "probe": b64(faces.fresh[BEN])})
    assert reply.status_code == 201
    notes = reply.json()["results"]
    assert [n["memory"] for n in notes] == ["I moved to Lisbon", "Noted: you live in Lisbon"]
    assert all(n["keywords"] == [] and n["tags"] == [] and n["context"] == "" for n in notes)
    assert all(n["owner"] == service.ids["Ben"] for n in notes)


def test_an_admin_imports_by_identity_id_and_an_unknown_id_is_404(service):
    reply = service.call("POST", "/memories", key="admin", json={"text": "Imported", "identity": service.ids["Ana"],
                                                                   "timestamp": "2024-01-02T03:04:05"})
    assert reply.status_code == 201 and reply.json()["results"][0]["owner"] == service.ids["Ana"]
    before = written(service.mem)
    error_of(service.call("POST", "/memories", key="admin", json={"text": "x", "identity": 9999}),
             404, "UnknownIdentityError")
    error_of(service.call("DELETE", "/identities/9999", key="admin"), 404, "UnknownIdentityError")
    assert written(service.mem) == before


# ---- sessions and by-id calls ------------------------------------------------------------------------

def test_a_session_acts_without_a_probe_and_is_bound_to_its_key(service, faces):
    opened = open_session(service, faces.clear[ANA])
    assert opened["label"] == "Ana" and opened["broad"] and 0 < opened["expires_in"] <= 120
    token = opened["session"]
    found = service.call("POST", "/search", session=token, json={"query": "bank card PIN", "k": 1}).json()
    assert "4821" in found["results"][0]["memory"]
    mine = service.call("GET", "/memories", session=token).json()["results"]
    assert mine and {n["owner"] for n in mine} == {service.ids["Ana"]}
    first = mine[0]["id"]
    assert service.call("GET", f"/memories/{first}", session=token).json()["id"] == first
    assert service.call("GET", f"/memories/{first}/history", session=token).json()["results"][0]["event"] == "ADD"
    error_of(service.call("GET", "/memories", key="other", session=token), 401, "SessionExpiredError")
    error_of(service.call("GET", "/memories", key="admin", session=token), 401, "SessionExpiredError")
    error_of(service.call("GET", "/memories"), 401, "SessionExpiredError")  # no session at all
    error_of(service.call("POST", "/search", session=token, probe=faces.fresh[ANA], data={"query": "x"}),
             422, "InvalidInputError")  # a probe or a session, not both
    assert service.call("DELETE", "/sessions", session=token).status_code == 204
    error_of(service.call("POST", "/search", session=token, json={"query": "PIN"}), 401, "SessionExpiredError")


def test_a_session_expires_and_a_narrow_one_cannot_list_everything(service, faces):
    token = open_session(service, faces.clear[BEN], ttl="1")["session"]
    time.sleep(1.2)
    error_of(service.call("POST", "/search", session=token, json={"query": "PIN"}), 401, "SessionExpiredError")
    mem = service.mem
    step_up = mem.threshold(step_up=True)
    mem.set_threshold(0.999, step_up=True)  # no capture clears it: the session is narrow, whatever the capture
    try:
        narrow = open_session(service, faces.fresh[BEN])
    finally:
        mem.set_threshold(step_up, step_up=True)  # the same effective step-up τ as before, for the other tests
    assert not narrow["broad"]
    assert service.call("POST", "/search", session=narrow["session"], json={"query": "PIN"}).status_code == 200
    error_of(service.call("GET", "/memories", session=narrow["session"]), 403, "StepUpRequiredError")
    error_of(service.call("POST", "/sessions", probe=faces.fresh[STRANGER]), 403, "UnknownIdentityError")


def test_another_owner_s_note_is_404_like_a_missing_one(service, faces):
    ana = service.call("POST", "/memories", probe=faces.fresh[ANA], data={"text": "Ana's secret 5150"}).json()
    note_id = ana["results"][0]["id"]
    ben = open_session(service, faces.clear[BEN])["session"]
    missing = error_of(service.call("GET", "/memories/999999", session=ben), 404, "NoteNotFoundError")
    assert error_of(service.call("GET", f"/memories/{note_id}", session=ben), 404, "NoteNotFoundError") == missing
    error_of(service.call("GET", f"/memories/{note_id}/history", session=ben), 404, "NoteNotFoundError")
    before = written(service.mem)
    error_of(service.call("PUT", f"/memories/{note_id}", probe=faces.clear[BEN], data={"text": "mine now"}),
             404, "NoteNotFoundError")
    error_of(service.call("DELETE", f"/memories/{note_id}", probe=faces.clear[BEN]), 404, "NoteNotFoundError")
    assert written(service.mem) == before
    ana_session = open_session(service, faces.clear[ANA])["session"]
    assert service.call("GET", f"/memories/{note_id}", session=ana_session).json()["memory"] == "Ana's secret 5150"


def test_update_and_delete_need_a_fresh_step_up_probe(service, faces):
    note_id = service.call("POST", "/memories", probe=faces.fresh[CHLOE],
                           data={"text": "My bike lock is 777"}).json()["results"][0]["id"]
    before = written(service.mem)
    error_of(service.call("PUT", f"/memories/{note_id}", json={"text": "changed"}), 403, "StepUpRequiredError")
    error_of(service.call("PUT", f"/memories/{note_id}", probe=faces.fresh[STRANGER], data={"text": "changed"}),
             403, "StepUpRequiredError")
    token = open_session(service, faces.clear[CHLOE])["session"]
    error_of(service.call("DELETE", f"/memories/{note_id}", session=token, probe=faces.clear[ANA]),
             403, "StepUpRequiredError")  # a fresh probe of another person than the session's
    assert written(service.mem) == before
    updated = service.call("PUT", f"/memories/{note_id}", session=token, probe=faces.clear[CHLOE],
                           data={"text": "My bike lock is 778"})
    assert updated.status_code == 200 and updated.json()["event"] == "UPDATE"
    events = service.call("GET", f"/memories/{note_id}/history", session=token).json()["results"]
    assert [e["event"] for e in events][-1] == "UPDATE" and events[-1]["new_memory"] == "My bike lock is 778"
    deleted = service.call("DELETE", f"/memories/{note_id}", json={"probe": b64(faces.clear[CHLOE])})
    assert deleted.status_code == 200 and deleted.json()["event"] == "DELETE"
    error_of(service.call("GET", f"/memories/{note_id}", session=token), 404, "NoteNotFoundError")


# ---- identities ---------------------------------------------------------------------------------------

def test_enrol_then_forget_me_ends_the_session(service, faces, newcomer):
    photos = [png(newcomer(0, 0)), png(newcomer(0, 1))]
    files = [("images", (f"{i}.png", p, "image/png")) for i, p in enumerate(photos)]
    created = service.call("POST", "/identities", data={"label": "Dana"}, files=files)
    assert created.status_code == 201, created.text
    assert created.json()["label"] == "Dana" and created.json()["templates"] == 2
    before = written(service.mem)
    someone_else = [("images", ("5.png", png(newcomer(1, 0)), "image/png"))]
    for key in ("admin", "agent"):  # an admin is told which collided; an agent cannot tell them apart
        error_of(service.call("POST", "/identities", key=key, data={"label": "dana"}, files=someone_else), 409,
                 "DuplicateLabelError" if key == "admin" else "EnrolmentRefusedError")
        error_of(service.call("POST", "/identities", key=key, json={"label": "Dee", "images": [b64(photos[0])]}),
                 409, "AlreadyEnrolledError" if key == "admin" else "EnrolmentRefusedError")
    error_of(service.call("POST", "/identities", data={"label": "Text"},
                          files=[("images", ("a.png", b"not an image", "image/png"))]), 422, "InvalidImageError")
    error_of(service.call("POST", "/identities", data={"label": "Nobody"}), 422, "InvalidInputError")
    assert written(service.mem) == before
    token = open_session(service, photos[0])["session"]
    error_of(service.call("DELETE", "/identities/me", session=token, probe=faces.clear[ANA]),
             403, "StepUpRequiredError")  # someone else's probe cannot erase the session's person
    forgotten = service.call("DELETE", "/identities/me", session=token, probe=photos[0])
    assert forgotten.json() == {"id": created.json()["id"], "forgotten": True}
    error_of(service.call("POST", "/search", session=token, json={"query": "x"}), 401, "SessionExpiredError")
    error_of(service.call("POST", "/search", key="admin", json={"query": "x", "identity": 1}), 422,
             "InvalidInputError")  # search never takes an identity, not even from an admin


def test_an_admin_forgets_by_identity_id(service, newcomer):
    photos = [png(newcomer(2, 0)), png(newcomer(2, 1))]
    created = service.call("POST", "/identities", json={"label": "Eve", "images": [b64(p) for p in photos]})
    assert created.status_code == 201, created.text
    reply = service.call("DELETE", f"/identities/{created.json()['id']}", key="admin")
    assert reply.json() == {"id": created.json()["id"], "forgotten": True}
    assert "Eve" not in [i.label for i in service.mem.identities()]


# ---- refusals: 4xx, one JSON shape, nothing written -------------------------------------------------

def _bad_requests(faces) -> dict:
    blank = png(np.full((256, 256, 3), 128, np.uint8))
    text = {"text": "planted note"}
    return {
        "oversized body": (413, "PayloadTooLarge", {"content": b"x" * (MAX_BODY + 1),
                                                    "headers": {"content-type": "application/json"}}),
        "oversized, chunked": (413, "PayloadTooLarge", {"content": iter([b" " * 1024 * 1024] * (MAX_BODY // 2**20 + 1)),
                                                        "headers": {"content-type": "application/json"}}),
        "oversized upload": (413, "PayloadTooLarge", {"data": text, "files": {
            "probe": ("big.png", b"\x89PNG" + bytes(MAX_BODY), "image/png")}}),
        "wrong content type": (415, "UnsupportedMediaType", {"content": b"text=hi",
                                                             "headers": {"content-type": "text/plain"}}),
        "malformed JSON": (422, "InvalidInputError", {"content": b'{"text": "x", ',
                                                      "headers": {"content-type": "application/json"}}),
        "not an image": (422, "InvalidImageError",
                         {"data": text, "files": {"probe": ("a.png", b"hello", "image/png")}}),
        "text upload": (422, "InvalidImageError", {"data": text, "files": {"probe": ("a.txt", b"hi", "text/plain")}}),
        "not base64": (422, "InvalidInputError",
                       {"json": {**text, "probe": {"data": "%%%", "mime_type": "image/png"}}}),
        "non-image MIME type": (422, "InvalidImageError", {"json": {**text, "probe": b64(b"hi", "text/plain")}}),
        "no face": (422, "NoFaceError", {"data": text, "files": {"probe": ("a.png", blank, "image/png")}}),
        "two faces": (422, "MultipleFacesError", {"data": text, "files": {
            "probe": ("g.jpg", group_photo_path().read_bytes(), "image/jpeg")}}),
        "wrong modality": (422, "ModalityMismatchError", {"data": text, "files": {
            "probe_palm-compcode": ("p.png", png(palm_capture(1, 3)), "image/png")}}),
        "a user id": (422, "InvalidInputError", {"json": {**text, "user_id": "ana", "probe": b64(faces.fresh[ANA])}}),
        "no probe": (422, "InvalidInputError", {"json": text}),
        "a path as probe": (422, "InvalidInputError", {"data": {**text, "probe": "/etc/hostname"}}),
        "a path in JSON": (422, "InvalidInputError", {"json": {**text, "probe": "/etc/hostname"}}),
        "blank text": (422, "InvalidInputError", {"data": {"text": "  "}, "files": {
            "probe": ("a.png", faces.fresh[ANA], "image/png")}}),
        "bad timestamp": (422, "InvalidInputError", {"json": {**text, "timestamp": "someday",
                                                              "probe": b64(faces.fresh[ANA])}}),
    }


def test_every_bad_input_is_a_4xx_json_error_that_writes_nothing(service, faces):
    before = written(service.mem)
    for name, (status, kind, request) in _bad_requests(faces).items():
        response = service.call("POST", "/memories", **request)
        assert response.status_code == status, f"{name}: {response.text}"
        error_of(response, status, kind)
    for k in ("0", "101", "ten"):
        error_of(service.call("POST", "/search", probe=faces.fresh[ANA], data={"query": "PIN", "k": k}),
                 422, "InvalidInputError")
    error_of(service.call("GET", "/memories/abc", session="x"), 422, "InvalidInputError")
    error_of(service.call("GET", "/nowhere"), 404, "NotFound")
    assert written(service.mem) == before


DEEP = "[" * 100_000 + "]" * 100_000  # nested far past any sane depth


def _unsent_inputs(faces, session: str) -> dict:
    """Requests no form sends: {name: (key, route, request, what the 422's message names)}."""
    ana = b64(faces.fresh[ANA])
    probe = {"probe": ("a.png", faces.fresh[ANA], "image/png")}
    as_json = {"content-type": "application/json"}
    form = {"content-type": "application/x-www-form-urlencoded", SESSION: session}  # a session: no probe needed
    embedding = '{"query": "PIN", "probe": {"modality": "face-arcface-s", "embedding": [%s]}}'

    def embedded(value: str, count: int = 512) -> dict:
        return {"content": (embedding % ",".join([value] * count)).encode(), "headers": as_json}
    return {
        "a deep JSON body": ("agent", "/memories", {"content": f'{{"text": {DEEP}}}'.encode(), "headers": as_json},
                             "JSON"),
        "deep JSON in a form field": ("agent", "/memories", {"data": {"messages": DEEP}, "files": probe}, "JSON"),
        "deep JSON in a urlencoded field": ("agent", "/memories", {"content": f"messages={DEEP}".encode(),
                                                                    "headers": form}, "JSON"),
        "a huge embedding": ("admin", "/search", embedded("0.5", 1_000_000), "embedding"),
        "a huge message list": ("agent", "/memories", {"json": {"messages": [{"role": "user", "content": "x"}] * 50_000,
                                                                "probe": ana}}, "messages"),
        "NaN in an embedding": ("admin", "/search", embedded("NaN"), "JSON"),
        "Infinity in an embedding": ("admin", "/search", embedded("Infinity"), "JSON"),
        "1e400 in an embedding": ("admin", "/search", embedded("1e400"), "finite"),
        "past float32 in an embedding": ("admin", "/search", embedded("1e39"), "finite"),
        "a number as text": ("agent", "/memories", {"json": {"text": 5, "probe": ana}}, "text"),
        "a list as query": ("agent", "/search", {"json": {"query": ["PIN"], "probe": ana}}, "query"),
        "a string as probe": ("agent", "/search", {"json": {"query": "PIN", "probe": "ana"}}, "probe"),
        "a list as probes": ("agent", "/search", {"json": {"query": "PIN", "probes": [ana]}}, "probes"),
        "a word as k": ("agent", "/search", {"json": {"query": "PIN", "k": "many", "probe": ana}}, "k:"),
        "an object as ttl": ("agent", "/sessions", {"json": {"ttl": {}, "probe": ana}}, "ttl"),
        "a list as the body": ("agent", "/search", {"json": [{"query": "PIN"}]}, "dictionary"),
        "a user id": ("agent", "/search", {"json": {"query": "PIN", "user_id": "ana", "probe": ana}}, "user_id"),
        "a user id in a form": ("agent", "/search", {"data": {"query": "PIN", "user_id": "ana"}, "files": probe},
                                "user_id"),
        "NUL in a note": ("agent", "/memories", {"json": {"text": "My PIN\x00 is 1", "infer": False, "probe": ana}},
                          "NUL"),
        "NUL in a form field": ("agent", "/memories", {"data": {"text": "My PIN\x00 is 1"}, "files": probe}, "NUL"),
        "NUL in a query": ("agent", "/search", {"json": {"query": "PIN\x00", "probe": ana}}, "NUL"),
        "NUL in a label": ("admin", "/identities", {"json": {"label": "Eve\x00", "images": [ana]}}, "NUL"),
        "invalid UTF-8 JSON": ("agent", "/memories", {"content": b'{"text": "caf\xe9", "infer": false}',
                                                      "headers": as_json}, "JSON"),
        "invalid UTF-8 in a form field": ("agent", "/memories", {"files": {"text": (None, b"caf\xe9"),
                                                                           "infer": (None, b"false"), **probe}},
                                          "UTF-8"),
        "invalid UTF-8 urlencoded": ("agent", "/memories", {"content": b"text=caf%E9&infer=false", "headers": form},
                                     "UTF-8"),
        "a field twice": ("agent", "/memories", {"data": {"text": ["one", "two"], "infer": "false"}, "files": probe},
                          "twice"),
        "a burst past its frames": ("agent", "/memories", {"data": {"text": "one", "infer": "false"},
                                                           "files": [("probe", probe["probe"])] * 11}, "frames"),
        "a urlencoded field twice": ("agent", "/memories", {"content": b"text=one&text=two&infer=false",
                                                            "headers": form}, "twice"),
    }


@pytest.fixture
def tracebacks() -> Iterator[list[logging.LogRecord]]:
    """The records with a traceback logged during the test."""
    handler = Tracebacks()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler.records
    for logger in loggers:
        logger.removeHandler(handler)


def connection_of(response: httpx.Response) -> tuple:
    """The client side (address, port) of the connection that carried `response`."""
    return response.extensions["network_stream"].get_extra_info("client_addr")


def test_inputs_no_form_sends_are_a_422_that_keeps_the_connection_and_writes_nothing(service, faces, tracebacks):
    session = open_session(service, faces.clear[ANA])["session"]
    before = written(service.mem)
    connection = connection_of(service.call("GET", "/health"))
    for name, (key, path, request, named) in _unsent_inputs(faces, session).items():
        response = service.call("POST", path, key=key, **request)
        assert response.status_code == 422, f"{name}: {response.text[:300]}"
        assert named.lower() in error_of(response, 422, "InvalidInputError")["message"].lower(), name
        assert connection_of(service.call("GET", "/health")) == connection, f"{name}: the connection was dropped"
    assert written(service.mem) == before
    assert [record.getMessage() for record in tracebacks] == []


def test_a_body_with_hundreds_of_bad_fields_gets_a_short_422_naming_the_first(service):
    long_names = {f"field_{number}_" + "x" * 2_000: 1 for number in range(300)}  # each name a caller's own
    response = service.call("POST", "/search", json={"query": "PIN", "user_id": "ana", **long_names})
    message = error_of(response, 422, "InvalidInputError")["message"]
    assert len(message) <= MAX_MESSAGE
    assert message.lower().startswith("user_id: extra inputs are not permitted")
    assert message.endswith(f"; and {301 - message.count('Extra inputs')} more")


def test_a_json_key_sent_twice_is_a_422_naming_it_and_writes_nothing(service, faces):
    """Parsers disagree on which of two values of one key counts (here the last won): a JSON body whose object, at
    the top or nested (metadata, a probe), holds a key twice is refused and the key named, on MCP too."""
    before = written(service.mem)
    probe = json.dumps(b64(faces.fresh[ANA]))
    other = json.dumps(base64.b64encode(faces.fresh[BEN]).decode())
    json_type = {"Content-Type": "application/json"}
    for path, body, key in (
            ("/memories", f'{{"text": "Lunch at noon", "text": "My PIN is 0000", "probe": {probe}}}', "text"),
            ("/memories", f'{{"text": "Lunch", "metadata": {{"room": "kitchen", "room": "hall"}}, "probe": {probe}}}',
             "room"),
            ("/search", f'{{"query": "PIN", "probe": {probe[:-1]}, "data": {other}}}}}', "data"),  # one face or another
            ("/search", f'{{"query": "PIN", "{"k" * 5_000}": 1, "{"k" * 5_000}": 2, "probe": {probe}}}', "k" * 40)):
        response = service.call("POST", path, content=body.encode(), headers=json_type)
        message = error_of(response, 422, "InvalidInputError")["message"]
        assert f"'{key}'" in message and "twice" in message and len(message) <= MAX_MESSAGE, message
    mcp = service.http.post("/mcp", content=b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "tools/list"}',
                            headers={**json_type, "Authorization": f"Bearer {service.keys['agent']}",
                                     "Accept": "application/json, text/event-stream"})
    assert mcp.status_code == 400 and mcp.json()["error"]["code"] == -32700 and "'id'" in mcp.json()["error"]["message"]
    for path, data, key in (("/memories", {"text": "Lunch", "metadata": '{"room": "kitchen", "room": "hall"}'}, "room"),
                            ("/search", {"query": "PIN", "filters": '{"scope": null, "scope": 4}'}, "scope")):
        form = service.call("POST", path, probe=faces.fresh[ANA], data=data)  # a JSON form field: the same
        assert f"'{key}'" in error_of(form, 422, "InvalidInputError")["message"]
    assert written(service.mem) == before
    once = service.call("POST", "/search", content=f'{{"query": "PIN", "probe": {probe}}}'.encode(), headers=json_type)
    assert once.status_code == 200 and once.json()["gate"]["matched"]  # the body read once is the route's as it was


def test_an_llm_or_encoder_failure_is_502_or_503_and_a_fault_500_without_internals(service, faces):
    mem = service.mem
    with mock.patch.object(mem.llm, "answer", side_effect=LLMError("http://10.0.0.5:8080 refused")):
        error_of(service.call("POST", "/ask", probe=faces.fresh[ANA], data={"question": "PIN?"}), 502, "LLMError")
    missing = ModelUnavailableError("/srv/weights/x.onnx missing")
    with mock.patch.object(type(mem.biometrics), "encoder", side_effect=missing):
        error_of(service.call("POST", "/search", probe=faces.fresh[ANA], data={"query": "PIN"}),
                 503, "ModelUnavailableError")
    with mock.patch.object(type(mem.retrieval), "search", side_effect=RuntimeError("/srv/secret exploded")):
        response = service.call("POST", "/search", probe=faces.fresh[ANA], data={"query": "PIN"})
        assert "secret" not in error_of(response, 500, "InternalError")["message"]


# ---- attempt limits, keyless stores, the CLI ------------------------------------------------------------

def test_attempt_limits_count_per_address_not_per_key_and_answer_429(tmp_path, text_encoder, face_encoder, faces):
    limits = AttemptLimits(misses=2, window=600.0, cooldown=60.0, budget=2)
    mem = BioMemory(tmp_path / "l.db", text_model=text_encoder, encoder=face_encoder, limits=limits)
    mem.enroll("Ana", [demo_capture(ANA, 0), demo_capture(ANA, 1)], sample=True)
    one, _ = create_key(mem.store, "one")
    two, _ = create_key(mem.store, "two")
    seen: list[list[str]] = []
    miss = mem.limiter.miss
    # another address on the loopback network: the same key from a second device
    second = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=60)
    with mock.patch.object(mem.limiter, "miss", side_effect=lambda c: (seen.append(list(c)), miss(c))), \
            served(create_app(mem, ui=False, mcp=False)) as url, second:
        stranger = {"probe": ("s.png", faces.fresh[STRANGER], "image/png")}
        ana = {"probe": ("a.png", faces.fresh[ANA], "image/png")}
        for _ in range(2):  # the daily budget of two misses, spent at 127.0.0.1
            assert httpx.post(f"{url}/v1/search", headers={"Authorization": f"Bearer {one}"}, data={"query": "x"},
                              files=stranger).status_code == 200
        refused = httpx.post(f"{url}/v1/ask", headers={"Authorization": f"Bearer {one}"},
                             data={"question": "x"}, files=ana)
        error_of(refused, 429, "TooManyAttemptsError")
        assert limits.budget_window - 60 <= int(refused.headers["retry-after"]) <= limits.budget_window  # a day
        other_key = httpx.post(f"{url}/v1/search", headers={"Authorization": f"Bearer {two}"},
                               data={"query": "x"}, files=stranger)  # same address: refused as well
        error_of(other_key, 429, "TooManyAttemptsError")
        elsewhere = second.post(f"{url}/v1/search", headers={"Authorization": f"Bearer {one}"},
                                data={"query": "x"}, files=ana)  # the same key at another address: served
        assert elsewhere.status_code == 200 and elsewhere.json()["gate"]["matched"] is True
    assert seen[0] == ["key:1", "address:127.0.0.1"]
    mem.close()


def test_a_store_without_keys_serves_local_agents_only(tmp_path, text_encoder, face_encoder, faces):
    mem = BioMemory(tmp_path / "k.db", text_model=text_encoder, encoder=face_encoder, limits="off")
    with served(create_app(mem, ui=False, mcp=False)) as url:
        assert httpx.post(f"{url}/v1/search", data={"query": "x"},
                          files={"probe": ("a.png", faces.fresh[ANA], "image/png")}).status_code == 200
        error_of(httpx.delete(f"{url}/v1/identities/1"), 403, "NotAuthorisedError")  # an agent, not an admin
        error_of(httpx.post(f"{url}/v1/search", headers={"Authorization": "Bearer bm_x"}, json={"query": "x"}),
                 401, "AuthenticationError")  # a key that is not one is refused, even here
        for header in ({"Host": "evil.example"}, {"Origin": "http://evil.example"}):  # DNS rebinding, a web page
            error_of(httpx.post(f"{url}/v1/search", headers=header, data={"query": "x"},
                                files={"probe": ("a.png", faces.fresh[ANA], "image/png")}), 403, "AuthenticationError")
    public = create_app(mem, Settings.from_env().model_copy(update={"host": "0.0.0.0"}), ui=False, mcp=False)
    with served(public) as url:  # bound (here, said to be bound) beyond loopback: a key is always needed
        error_of(httpx.post(f"{url}/v1/search", json={"query": "x"}), 401, "AuthenticationError")
    mem.close()
    assert loopback("127.0.0.1") and loopback("localhost") and loopback("::1")
    assert not loopback("0.0.0.0") and not loopback("192.168.1.5") and not loopback("example.org")


def test_serve_refuses_a_public_address_without_keys_and_keys_are_managed_by_cli(tmp_path, capsys):
    from biomem import cli
    from biomem.engine.keys import authenticate
    from biomem.stores.sqlite import Store

    db = str(tmp_path / "c.db")
    assert cli.main(["--db", db, "serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "refusing to serve on 0.0.0.0" in capsys.readouterr().err
    assert cli.main(["--db", db, "keys", "create", "kiosk", "--role", "admin"]) == 0
    out = capsys.readouterr()
    secret = out.out.strip()
    assert secret.startswith("bm_") and "shown only this once" in out.err
    assert cli.main(["--db", db, "keys", "list"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing[0]["name"] == "kiosk" and listing[0]["role"] == "admin" and secret not in json.dumps(listing)
    assert cli.main(["--db", db, "keys", "revoke", "1"]) == 0
    assert cli.main(["--db", db, "keys", "revoke", "1"]) == 2
    store = Store(db)
    assert authenticate(store, secret) is None
    store.close()


def test_infer_false_stores_the_text_without_the_llm(make_memory):
    mem = make_memory()
    ana = mem.enroll("Ana", [demo_capture(ANA, 0)])
    mem.add("My PIN is 1234", identity=ana.id)
    with mock.patch.object(mem.llm, "analyze", side_effect=AssertionError("analysed")), \
            mock.patch.object(mem.llm, "evolve", side_effect=AssertionError("evolved")):
        note = mem.add("  My locker is 42 ", identity=ana.id, infer=False)
    assert (note.content, note.keywords, note.tags, note.context, note.links) == ("My locker is 42", [], [], "", [])
    assert mem.search("locker", probe=demo_capture(ANA, 0), k=1).notes[0][0].id == note.id


# ---- stopping: a signal, or kill -9 in the middle of a burst of adds ------------------------------------

def _start(db: str, port: int, log) -> subprocess.Popen:
    env = {**os.environ, "BIOMEM_ATTEMPTS": "off", "BIOMEM_LOG": "WARNING", "BIOMEM_LOAD_DEMO": "0"}
    return subprocess.Popen([sys.executable, "-m", "biomem.cli", "--db", db, "serve", "--host", "127.0.0.1",
                             "--port", str(port), "--no-ui", "--no-mcp"], env=env, stdout=log, stderr=log)


def _wait(url: str, process: subprocess.Popen, timeout: float = 180, path: str = "/v1/health") -> None:
    """Until `path` answers 200 (the server is up); fails if the process exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "the server exited"
        try:
            if httpx.get(f"{url}{path}", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("the server did not start")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_closes_the_store_and_exits_cleanly(tmp_path, stop):
    """SIGTERM (a service manager, `docker stop`) or SIGINT (Ctrl-C) stops `biomem serve` with its store closed:
    the write-ahead log is checkpointed and gone, the file is whole, and the exit is 0 without a traceback."""
    db = tmp_path / "stop.db"
    wal, shm = db.with_name("stop.db-wal"), db.with_name("stop.db-shm")
    port = free_port()
    with open(tmp_path / "serve.log", "wb") as log:
        server = _start(str(db), port, log)
        try:
            _wait(f"http://127.0.0.1:{port}", server)
            assert wal.exists()  # the store is open
            server.send_signal(stop)
            assert server.wait(60) == 0
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(30)
    assert not wal.exists() and not shm.exists()
    assert "Traceback" not in (tmp_path / "serve.log").read_text()
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_the_demo_page_stopped_by_sigterm_closes_its_store(tmp_path):
    """`python app.py` (the Space's entry point) stopped as a Space restart stops it: the page and the store close,
    the write-ahead log is checkpointed and gone, the exit is 0 without a traceback."""
    db = tmp_path / "page.db"
    port = free_port()
    env = {**os.environ, "BIOMEM_DB": str(db), "GRADIO_SERVER_PORT": str(port), "BIOMEM_LOAD_DEMO": "0",
           "BIOMEM_LOG": "WARNING", "GRADIO_TEMP_DIR": str(tmp_path / "uploads")}
    with open(tmp_path / "app.log", "wb") as log:
        app = subprocess.Popen([sys.executable, str(Path(__file__).parents[1] / "app.py")], env=env,
                               stdout=log, stderr=log)
        try:
            _wait(f"http://127.0.0.1:{port}", app, path="/")
            assert db.with_name("page.db-wal").exists()  # the store is open
            app.send_signal(signal.SIGTERM)
            assert app.wait(60) == 0, (tmp_path / "app.log").read_text()
        finally:
            if app.poll() is None:
                app.kill()
                app.wait(30)
    assert not db.with_name("page.db-wal").exists() and not db.with_name("page.db-shm").exists()
    assert "Traceback" not in (tmp_path / "app.log").read_text()


def _burst(url: str, key: str, tokens: dict[str, str], kill: threading.Event) -> dict[str, str]:
    """Adds from 4 threads, alternating owners; returns the acknowledged texts -> owner label."""
    acked: dict[str, str] = {}

    def add(i: int) -> None:
        label = ("Ana", "Ben")[i % 2]
        text = f"burst note {i} of {label}: parcel code {1000 + i}"
        try:
            reply = httpx.post(f"{url}/v1/memories", json={"text": text}, timeout=30,
                               headers={"Authorization": f"Bearer {key}", SESSION: tokens[label]})
        except httpx.TransportError:
            return
        if reply.status_code == 201:
            acked[text] = label
            if len(acked) >= 12:
                kill.set()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(add, range(80)))
    return acked


@pytest.mark.slow
def test_kill_9_in_a_burst_of_adds_loses_no_acknowledged_note(tmp_path, text_encoder, face_encoder, faces):
    db = str(tmp_path / "crash.db")
    with BioMemory(db, text_model=text_encoder, encoder=face_encoder) as mem:
        ids = build_demo(mem, sample=False)
        key, _ = create_key(mem.store, "burst")
    log = open(tmp_path / "serve.log", "wb")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = _start(db, port, log)
    try:
        _wait(url, server)
        auth = {"Authorization": f"Bearer {key}"}
        tokens = {label: httpx.post(f"{url}/v1/sessions", headers=auth, timeout=30, files={
            "probe": ("p.png", faces.clear[person], "image/png")}).json()["session"]
            for label, person in (("Ana", ANA), ("Ben", BEN))}
        kill = threading.Event()
        threading.Thread(target=lambda: (kill.wait(120), os.kill(server.pid, signal.SIGKILL)), daemon=True).start()
        acked = _burst(url, key, tokens, kill)
        server.wait(30)
        assert server.returncode == -signal.SIGKILL and 12 <= len(acked) < 80
        server = _start(db, port, log)
        _wait(url, server)
        for label, person in (("Ana", ANA), ("Ben", BEN)):
            token = httpx.post(f"{url}/v1/sessions", headers=auth, timeout=30, files={
                "probe": ("p.png", faces.clear[person], "image/png")}).json()["session"]
            notes = httpx.get(f"{url}/v1/memories", headers={**auth, SESSION: token}, timeout=30).json()["results"]
            contents = [n["memory"] for n in notes]
            assert {n["owner"] for n in notes} == {ids[label]}
            for text, owner in acked.items():
                assert contents.count(text) == (1 if owner == label else 0), text
            for content in (c for c in contents if c.startswith("burst")):  # whole notes, the right owner's
                number = int(content.split()[2])
                assert content == f"burst note {number} of {label}: parcel code {1000 + number}"
            probe = sorted(t for t, o in acked.items() if o == label)[0]
            hit = httpx.post(f"{url}/v1/search", headers={**auth, SESSION: token}, timeout=30,
                             json={"query": probe, "k": 1}).json()["results"][0]
            assert hit["memory"] == probe  # the index was rebuilt from the store
    finally:
        server.kill()
        server.wait(30)
        log.close()
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = con.execute("SELECT content, length(embedding) FROM notes WHERE content LIKE 'burst%'").fetchall()
    assert len(rows) == len({content for content, _ in rows}) >= len(acked)
    assert all(size == 4 * text_encoder.dim for _, size in rows)
