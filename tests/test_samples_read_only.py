"""The demo's sample people stay the demo's: the page hands anyone a capture of Ana, so a probe of Ana reads as
Ana and changes nothing of hers, and no requester enrols a sample person's face or palm, enrolled or not.

A real person enrolled beside them still changes their own memories and households, and the operator (calls
by id, the demo build) still changes the sample people's.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from biomem.client import BioMemoryClient
from biomem.engine.demo import DEMO_HOUSEHOLD, build_demo, demo_household, sample_capture
from biomem.engine.keys import create_key
from biomem.engine.messages import readable
from biomem.errors import SampleCaptureError, SampleReadOnlyError, TooManyAttemptsError
from biomem.identity.samples import STRANGER_PALM_SEED, demo_palm
from biomem.server.errors import status_of
from biomem.vocabulary import AttemptLimits

from .conftest import BOTH_STORES
from .shared import rest_service, written

PALM = "palm-compcode"
READ_ONLY = "Ana is one of the demo's sample people"


@pytest.fixture(scope="module")
def yao_faces(newcomer) -> list[np.ndarray]:
    """Three captures of a person who is none of the sample people: the photo, then two augmented captures."""
    return [newcomer(0, n) for n in range(3)]


@pytest.fixture
def demo_store(make_memory, yao_faces):
    """The demo store (Ana, Ben, Chloe and their household) beside Yao, a real person enrolled by a requester."""
    mem = make_memory(limits="off")
    ids = build_demo(mem, household=True)
    return mem, ids, mem.enroll("Yao", yao_faces[:2], client="visitor")


def encoded(image: np.ndarray, form: str = "JPEG") -> bytes:
    """`image` as a file of `form` (a JPEG: quality 70, pixels altered)."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format=form, **({"quality": 70} if form == "JPEG" else {}))
    return buffer.getvalue()


def jpeg(image: np.ndarray) -> np.ndarray:
    """`image` saved as a JPEG and read back: a re-encoded copy."""
    return np.asarray(Image.open(io.BytesIO(encoded(image))).convert("RGB"))


@BOTH_STORES
def test_a_probe_of_a_sample_person_changes_nothing_of_theirs(demo_store, yao_faces):
    mem, ids, _ = demo_store
    home = demo_household(mem)
    ana = sample_capture(mem, "Ana")
    note = mem.get_all(probe=ana)[0]
    before = written(mem)
    refused = [
        lambda: mem.add("planted", probe=ana),
        lambda: mem.add("planted in the household", probe=ana, scope=home.id),
        lambda: mem.update(note.id, "rewritten", probe=ana),
        lambda: mem.delete(note.id, probe=ana),
        lambda: mem.forget(probe=ana),
        lambda: mem.create_group("Ana's club", probe=ana),
        lambda: mem.add_member(home.id, probe=ana, member_probe=yao_faces[2]),  # Ana invites
        lambda: mem.remove_member(home.id, ids["Ben"], probe=ana),
        lambda: mem.remove_member(home.id, ids["Ana"], probe=ana),
        lambda: mem.delete_group(home.id, probe=ana),
        lambda: mem.add_templates(ids["Ana"], [demo_palm(50, 0)], PALM, probe=ana),
    ]
    for call in refused:
        with pytest.raises(SampleReadOnlyError, match=READ_ONLY):
            call()
        assert written(mem) == before
    club = mem.create_group("Yao's club", probe=yao_faces[2])
    before = written(mem)
    with pytest.raises(SampleReadOnlyError, match=READ_ONLY):  # a real person invites Ana: she joins nothing
        mem.add_member(club.id, probe=yao_faces[2], member_probe=ana)
    assert written(mem) == before


def test_a_sample_person_s_memories_stay_readable_by_probe(demo_store):
    mem, ids, _ = demo_store
    ana = sample_capture(mem, "Ana")
    found = mem.search("bank card PIN", probe=ana, k=3)
    assert "4821" in found.notes[0][0].content and found.gate.identity == ids["Ana"]
    assert "4821" in mem.ask("What is my bank card PIN?", probe=ana).text
    note = found.notes[0][0]
    assert mem.get(note.id, probe=ana) == note and mem.history(note.id, probe=ana)
    assert {n.content for n in mem.get_all(probe=ana)} >= {"My PIN for the bank card is 4821",
                                                            "The Wi-Fi password is tulip-river-42"}
    assert [g.label for g in mem.groups(probe=ana)] == [DEMO_HOUSEHOLD]


def test_a_sample_person_s_session_reads_but_changes_nothing(demo_store):
    mem, ids, _ = demo_store
    before = written(mem)
    with mem.session(sample_capture(mem, "Ana")) as me:
        note = me.search("bank card PIN", k=1).notes[0][0]
        assert "4821" in note.content and me.get(note.id) == note
        fresh = sample_capture(mem, "Ana")
        for call in (lambda: me.add("planted"), lambda: me.update(note.id, "rewritten", probe=fresh),
                     lambda: me.delete(note.id, probe=fresh), lambda: me.forget(probe=fresh)):
            with pytest.raises(SampleReadOnlyError, match=READ_ONLY):
                call()
    assert written(mem) == before and ids["Ana"] in {i.id for i in mem.identities()}


def test_a_real_person_still_changes_their_own_memories_and_households(demo_store, yao_faces):
    mem, _, yao = demo_store
    note = mem.add("My locker is number 42", probe=yao_faces[2])
    assert note.owner == yao.id
    assert mem.update(note.id, "My locker is number 43", probe=yao_faces[0]).content == "My locker is number 43"
    club = mem.create_group("Yao's club", probe=yao_faces[0])
    mem.add("The club meets on Mondays", probe=yao_faces[2], scope=club.id)
    with mem.session(yao_faces[2]) as me:
        assert me.add("My bike is blue").owner == yao.id
    assert mem.delete(note.id, probe=yao_faces[0]).id == note.id
    assert mem.delete_group(club.id, probe=yao_faces[0]) == club.id
    assert mem.forget(probe=yao_faces[0]) == yao.id


def test_the_operator_still_changes_the_sample_people(demo_store):
    mem, ids, yao = demo_store
    home = demo_household(mem)
    assert mem.add("Imported by the operator", identity=ids["Ana"]).owner == ids["Ana"]
    mem.add_templates(ids["Ana"], [demo_palm(1, 0), demo_palm(1, 1)], PALM)
    club = mem.create_group("Operators' club", identity=ids["Ana"])
    assert mem.add_member(club.id, identity=ids["Ben"]).members == [ids["Ana"], ids["Ben"]]
    assert mem.remove_member(home.id, ids["Chloe"], operator=True).members == [ids["Ana"], ids["Ben"]]
    assert mem.delete_group(club.id, operator=True) == club.id
    assert mem.forget(identity=ids["Ana"]) == ids["Ana"]
    assert build_demo(mem)["Ana"] > yao.id  # the demo build enrols her again, a sample person


def test_a_requester_cannot_enrol_a_sample_face_enrolled_or_not(make_memory, yao_faces):
    mem = make_memory(limits="off")
    build_demo(mem)
    before = written(mem)
    stranger = sample_capture(mem, "Stranger")
    for captures in ([stranger], [jpeg(stranger)], [sample_capture(mem, "Stranger"), stranger],
                     [sample_capture(mem, "LoCoMo 1")], [sample_capture(mem, "Ana")]):
        with pytest.raises(SampleCaptureError, match="sample faces cannot be enrolled") as refused:
            mem.enroll("Me", captures, client="visitor")
        assert readable(refused.value) == ("Sample person", "This is one of the demo's sample people: sample faces "
                                           "cannot be enrolled. Enrol with captures of yourself.")
        assert written(mem) == before
    assert mem.enroll("Yao", [yao_faces[0], jpeg(yao_faces[1])], client="visitor").label == "Yao"


def test_a_refused_sample_enrolment_is_a_miss_of_the_requester(make_memory):
    mem = make_memory(limits=AttemptLimits(misses=2, window=60.0, budget=2))
    for _ in range(2):
        with pytest.raises(SampleCaptureError):
            mem.enroll("Me", [sample_capture(mem, "Stranger")], client="visitor")
    with pytest.raises(TooManyAttemptsError) as refused:  # two misses spend the budget: refused for a day
        mem.enroll("Me", [sample_capture(mem, "Stranger")], client="visitor")
    assert refused.value.retry_after == pytest.approx(mem.limiter.limits.budget_window, abs=60)


def test_a_requester_cannot_take_a_sample_palm_as_their_own(make_memory, yao_faces):
    mem = make_memory(limits="off")
    yao = mem.enroll("Yao", yao_faces[:2], client="visitor")
    before = written(mem)
    for palm in (demo_palm(STRANGER_PALM_SEED, 7), jpeg(np.stack([demo_palm(1, 5)] * 3, axis=-1))):
        with pytest.raises(SampleCaptureError, match="sample palms cannot be enrolled"):
            mem.add_templates(yao.id, [palm], PALM, probe=yao_faces[2], client="visitor")
        assert written(mem) == before
    with pytest.raises(SampleCaptureError):
        mem.enroll("Palm", [demo_palm(101, 3), demo_palm(101, 4)], PALM, client="visitor")
    mem.add_templates(yao.id, [demo_palm(7, 0), demo_palm(7, 1)], PALM, probe=yao_faces[2], client="visitor")
    assert PALM in mem.store.modalities(yao.id)


def test_the_service_refuses_both_with_a_403_that_writes_nothing(make_memory):
    mem = make_memory(limits="off")
    build_demo(mem)
    key, _ = create_key(mem.store, "agent", "agent")
    with rest_service(mem, headers={"Authorization": f"Bearer {key}"}) as (url, http):
        def ana() -> dict:
            return {"probe": ("ana.png", encoded(sample_capture(mem, "Ana"), "PNG"), "image/png")}
        before = written(mem)
        planted = http.post("/v1/memories", data={"text": "planted"}, files=ana())
        assert planted.status_code == 403 and planted.json()["error"]["type"] == "SampleReadOnlyError"
        assert READ_ONLY in planted.json()["error"]["message"]
        enrolled = http.post("/v1/identities", data={"label": "Me"}, files=[
            ("images", ("me.jpg", encoded(sample_capture(mem, "Stranger")), "image/jpeg"))])
        assert enrolled.status_code == 403 and enrolled.json()["error"]["type"] == "SampleCaptureError"
        assert written(mem) == before
        found = http.post("/v1/search", data={"query": "bank card PIN"}, files=ana()).json()
        assert "4821" in found["results"][0]["memory"]
        with BioMemoryClient(url, key) as client, pytest.raises(SampleReadOnlyError, match=READ_ONLY):
            client.add("planted", probe=sample_capture(mem, "Ana"))  # the client raises the engine's class
        assert written(mem) == before


def test_both_refusals_have_a_title_and_a_forbidden_status():
    read_only, sample_face = SampleReadOnlyError(f"{READ_ONLY}: ..."), SampleCaptureError("a sample face")
    assert readable(read_only)[0] == "Sample person: read-only" and readable(sample_face)[0] == "Sample person"
    assert status_of(read_only) == status_of(sample_face) == 403
