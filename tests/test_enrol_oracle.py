"""Enrolment is a gated attempt: it must not answer "is this face enrolled?" or "does this
name exist?" more often, or more precisely, than a probe may.

Before: a taken label answered "Name taken" when the face matched nobody and "Already enrolled" when it
matched someone, as often as a client liked, with no miss counted. Now each refusal is a miss for the
client, an enrolled face costs FACE_TAKEN_MISSES, and a requester gets one refusal for both causes;
the operator in-process and an admin key still get the precise one.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
from fastapi.testclient import TestClient

from biomem.engine.keys import create_key
from biomem.engine.messages import readable
from biomem.errors import (
    AlreadyEnrolledError,
    BioMemError,
    DuplicateLabelError,
    EnrolmentRefusedError,
    InconsistentSamplesError,
    TooManyAttemptsError,
)
from biomem.identity.enrolment import FACE_TAKEN_MISSES
from biomem.identity.limits import AttemptLimiter
from biomem.server import create_app
from biomem.settings import Settings
from biomem.ui.controller import Controller
from biomem.ui.messages import friendly
from biomem.vocabulary import AttemptLimits

from .conftest import BOTH_STORES
from .shared import png, upload

ANA, BEN, CARA = 0, 1, 2  # newcomer() people (none of the demo's sample people, whom no requester enrols); CARA
# is never enrolled
ANA_LABEL = "Anastasia Quellmark"
FACE = "face-arcface-s"
TRIES = 100


@pytest.fixture
def limited(make_memory, newcomer_probe, clock):
    """Ana enrolled; the default attempt limits with a daily budget of 20 misses (the floor of a large store) on a
    clock that stands still."""
    mem = make_memory()
    ana = mem.enroll(ANA_LABEL, [newcomer_probe(ANA, 0), newcomer_probe(ANA, 1)])
    mem.limiter = AttemptLimiter(AttemptLimits(budget=AttemptLimits().misses), mem.store, clock=clock)
    return mem, ana


def admitted(attempt) -> int:
    """How many of TRIES calls of `attempt` ran at all (were not refused as too many attempts)."""
    ran = 0
    for _ in range(TRIES):
        try:
            attempt()
        except TooManyAttemptsError:
            continue
        except BioMemError:
            pass
        ran += 1
    return ran


@BOTH_STORES
def test_enrolment_tries_are_throttled_within_the_budget_of_probes(limited, newcomer_probe):
    mem, ana = limited
    budget = mem.limiter.limits.budget
    before = mem.store.counts()
    probes = admitted(lambda: mem.identify(newcomer_probe(CARA, 0), client="prober"))
    names = admitted(lambda: mem.enroll(ANA_LABEL.upper(), [newcomer_probe(CARA, 0)], client="name-guesser"))
    faces = admitted(lambda: mem.enroll("Someone New", [newcomer_probe(ANA, 2)], client="face-tester"))
    mixed = admitted(lambda: mem.enroll("Visitor", [newcomer_probe(CARA, 0), newcomer_probe(BEN, 0)], client="mixer"))
    assert probes == budget == 20
    assert names == budget  # each taken name is a miss: existing names cost what probes cost
    assert faces == budget // FACE_TAKEN_MISSES == 4  # someone else's face costs five misses
    assert mixed == budget  # two people in one enrolment: a free 1:1 comparator, limited as well
    assert mem.store.counts() == before and [i.label for i in mem.identities()] == [ANA_LABEL]
    with pytest.raises(TooManyAttemptsError) as refused:  # a client whose budget is spent is refused before any
        mem.enroll("Fresh Name", [np.full((200, 200, 3), 127, np.uint8)], client="face-tester")  # encoding
    assert refused.value.retry_after == pytest.approx(mem.limiter.limits.budget_window)  # until its misses age out
    assert mem.identify(newcomer_probe(ANA, 2), client="ana-phone").identity == ana.id  # others are unaffected
    assert mem.enroll("Cara", [newcomer_probe(CARA, 0)], client="cara-phone").label == "Cara"


def test_a_requester_cannot_tell_a_taken_name_from_an_enrolled_face(limited, newcomer_probe):
    mem, ana = limited
    with pytest.raises(EnrolmentRefusedError) as name:
        mem.enroll(ANA_LABEL.lower(), [newcomer_probe(CARA, 0)], client="a")
    with pytest.raises(EnrolmentRefusedError) as face:
        mem.enroll("Someone New", [newcomer_probe(ANA, 2)], client="b")
    with pytest.raises(EnrolmentRefusedError) as both:
        mem.enroll(ANA_LABEL, [newcomer_probe(ANA, 2)], client="c")
    assert str(name.value) == str(face.value) == str(both.value)
    assert readable(name.value) == readable(face.value)
    assert ANA_LABEL.casefold() not in str(name.value).casefold() and str(ana.id) not in str(name.value)
    # The operator in-process, and an admin, are told which one collided.
    with pytest.raises(DuplicateLabelError):
        mem.enroll(ANA_LABEL, [newcomer_probe(CARA, 0)])
    with pytest.raises(AlreadyEnrolledError):
        mem.enroll("Someone New", [newcomer_probe(ANA, 2)])
    with pytest.raises(DuplicateLabelError):
        mem.enroll(ANA_LABEL, [newcomer_probe(CARA, 0)], client="admin-desk", admin=True)
    with pytest.raises(AlreadyEnrolledError):
        mem.enroll("Someone New", [newcomer_probe(ANA, 2)], client="admin-desk", admin=True)
    with pytest.raises(InconsistentSamplesError):  # about the samples alone: precise for everyone
        mem.enroll("Visitor", [newcomer_probe(CARA, 0), newcomer_probe(BEN, 0)], client="d")


# ---- the surfaces: REST with an agent key and the page's controller --------------------------------


@pytest.fixture
def api(limited):
    """REST over the limited store with an agent and an admin key (TestClient: no socket, no port)."""
    mem, ana = limited
    keys = {role: create_key(mem.store, role, role)[0] for role in ("agent", "admin")}
    app = create_app(mem, Settings.from_env().model_copy(update={"host": "127.0.0.1"}), ui=False, mcp=False)
    with TestClient(app, base_url="http://127.0.0.1") as http:
        def enrol(label: str, image: np.ndarray, role: str = "agent"):
            return http.post("/v1/identities", headers={"Authorization": f"Bearer {keys[role]}"},
                             data={"label": label}, files=[("images", ("capture.png", png(image), "image/png"))])
        yield SimpleNamespace(mem=mem, enrol=enrol)


def test_rest_replies_for_a_taken_name_and_an_enrolled_face_are_byte_identical_for_an_agent(api, newcomer):
    taken = api.enrol(ANA_LABEL, newcomer(CARA, 0))
    enrolled = api.enrol("Someone New", newcomer(ANA, 2))
    assert taken.status_code == enrolled.status_code == 409
    assert taken.content == enrolled.content
    assert taken.json()["error"]["type"] == "EnrolmentRefusedError" and ANA_LABEL not in taken.text
    admin_taken = api.enrol(ANA_LABEL, newcomer(CARA, 0), role="admin")
    admin_enrolled = api.enrol("Someone New", newcomer(ANA, 2), role="admin")
    assert (admin_taken.json()["error"]["type"], admin_enrolled.json()["error"]["type"]) == \
        ("DuplicateLabelError", "AlreadyEnrolledError")
    assert [i.label for i in api.mem.identities()] == [ANA_LABEL]


def test_rest_enrolment_tries_end_in_429(api, newcomer):
    statuses = [api.enrol("Someone New", newcomer(ANA, 2)).status_code for _ in range(6)]
    assert statuses == [409] * (api.mem.limiter.limits.budget // FACE_TAKEN_MISSES) + [429] * 2  # the budget spent
    refused = api.enrol("Someone New", newcomer(ANA, 2))
    assert int(refused.headers["retry-after"]) == pytest.approx(api.mem.limiter.limits.budget_window, abs=1)


def page_request(session: str) -> gr.Request:
    """What Gradio hands a handler: the tab's session and the browser's address."""
    return gr.Request(session_hash=session, client=SimpleNamespace(host="198.51.100.20"), headers={})


def test_page_replies_for_a_taken_name_and_an_enrolled_face_are_identical(limited, newcomer, tmp_path, monkeypatch):
    mem, _ = limited
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    page = Controller(mem, admin=False)
    replies = []
    for n, (label, image) in enumerate([(ANA_LABEL, newcomer(CARA, 0)), ("Someone New", newcomer(ANA, 2))]):
        with pytest.raises(gr.Error) as refused:
            friendly(page.enroll)(label, [upload(tmp_path, image, f"enrol{n}")], None, FACE,
                                  request=page_request(f"tab-{n}"))
        replies.append((refused.value.title, refused.value.message))
    assert replies[0] == replies[1] and replies[0][0] == "Not enrolled" and ANA_LABEL not in replies[0][1]
    admin = Controller(mem, admin=True)
    titles = []
    for n, (label, image) in enumerate([(ANA_LABEL, newcomer(CARA, 0)), ("Someone New", newcomer(ANA, 2))]):
        with pytest.raises(gr.Error) as refused:
            friendly(admin.enroll)(label, [upload(tmp_path, image, f"admin{n}")], None, FACE,
                                   request=page_request("operator"))
        titles.append(refused.value.title)
    assert titles == ["Name taken", "Already enrolled"]
