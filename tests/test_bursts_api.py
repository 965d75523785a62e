"""Bursts over REST JSON and through the Python client: a probe field may hold a list of frames of one
person, fused into one probe by the engine (biomem.identity.bursts), and the client sends a Burst as a repeated
multipart file field or, beside an admin's precomputed embedding, as a JSON list.

Against the real app (uvicorn in a thread, as tests/test_client.py serves it) over the `family` store: Ana and
Ben enrolled from real sample faces, other captures of them as frames.
"""

from __future__ import annotations

import base64
from types import SimpleNamespace

import httpx
import pytest

from biomem import Burst
from biomem.client import BioMemoryClient, request_body
from biomem.engine.keys import create_key
from biomem.errors import InvalidInputError, MixedBurstError
from biomem.identity.bursts import MAX_FRAMES
from biomem.server.probes import MAX_BODY, MAX_FILES

from .conftest import FACE
from .shared import ANA, BEN, b64, error_of, png, rest_service

PALM = "palm-compcode"  # a modality the family store never enrolled


@pytest.fixture
def api(family, capture):
    """The family store served with an agent and an admin key: raw httpx as the agent, and a client for each key;
    `frames(person, first=2)`: three captures of a person as PNG bytes, from the first after the two enrolment
    photos (n = 0, 1) unless told."""
    mem, ana, ben = family
    keys = {role: create_key(mem.store, role, role)[0] for role in ("agent", "admin")}
    with rest_service(mem, ui=False, mcp=False, headers={"Authorization": f"Bearer {keys['agent']}"}) as (url, http), \
            BioMemoryClient(url, keys["agent"]) as bm, BioMemoryClient(url, keys["admin"]) as admin:
        yield SimpleNamespace(mem=mem, ana=ana, ben=ben, keys=keys, http=http, bm=bm, admin=admin,
                              frames=lambda person, first=2: [png(capture(person, n)) for n in range(first,
                                                                                                   first + 3)])


@pytest.fixture
def captures(api, monkeypatch) -> list[int]:
    """Every Encoder.capture call (the quality-gated encoding each live probe frame takes) from now on."""
    encoder, calls = api.mem.encoder(), []
    monkeypatch.setattr(encoder, "capture", lambda image, quality="probe", capture=encoder.capture:
                        calls.append(1) or capture(image, quality))
    return calls


def search(api, probe_fields: dict, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {api.keys[key]}"} if key else {}
    return api.http.post("/v1/search", json={"query": "What is my PIN?", "k": 2, **probe_fields}, headers=headers)


# ---- JSON bodies ----------------------------------------------------------------------------------------


def test_a_json_burst_admits_its_person_and_encodes_each_frame_once(api, captures):
    frames = [b64(frame) for frame in api.frames(ANA)]
    for fields in ({"probe": frames},  # the default modality
                   {"probe": [{**frame, "modality": FACE} for frame in frames]},  # the one every frame names
                   {"probes": {FACE: frames}}):
        captures.clear()
        reply = search(api, fields)
        assert reply.status_code == 200, reply.text
        found = reply.json()
        assert found["gate"]["matched"] and "1234" in found["results"][0]["memory"]
        assert {note["owner"] for note in found["results"]} == {api.ana.id}
        assert len(captures) == 3  # one fused probe: each frame encoded once, no frame twice


def test_a_json_burst_of_two_people_is_refused_and_counts_as_nothing_read(api, monkeypatch):
    limiter, counted = api.mem.limiter, []
    monkeypatch.setattr(limiter, "miss", lambda *args, **kwargs: counted.append("miss"))
    monkeypatch.setattr(limiter, "near_miss", lambda *args, **kwargs: counted.append("near miss") or [])
    before = api.mem.store.counts()
    mixed = [b64(api.frames(ANA)[0]), b64(api.frames(BEN)[0])]
    for fields in ({"probe": mixed}, {"probes": {FACE: mixed}}):
        reply = search(api, fields)
        error = error_of(reply, 422, "MixedBurstError")
        assert error["title"] == "Different people" and "show different people" in error["message"]
        assert "results" not in reply.json()
    assert counted == [] and api.mem.store.counts() == before  # no miss, nothing read or written


def test_each_bad_burst_is_a_422_that_says_what_is_wrong(api):
    frame = b64(api.frames(ANA)[0])
    embedding = {"embedding": [0.1] * 512, "modality": FACE}
    cases = {
        "an empty burst": ({"probe": []}, "InvalidInputError", "a burst holds 1 to 10 frames, got 0"),
        "an empty burst under a modality": ({"probes": {FACE: []}}, "InvalidInputError", "got 0"),
        "too many frames": ({"probe": [frame] * (MAX_FRAMES + 1)}, "InvalidInputError",
                            f"a burst holds 1 to {MAX_FRAMES} frames, got {MAX_FRAMES + 1}"),
        "frames of different modalities": ({"probe": [{**frame, "modality": FACE}, {**frame, "modality": PALM}]},
                                           "InvalidInputError", "different modalities"),
        "a modality on some frames only": ({"probe": [frame, {**frame, "modality": FACE}]}, "InvalidInputError",
                                           "named on every frame or on none"),
        "an embedding in a burst": ({"probe": [frame, embedding]}, "InvalidInputError",
                                    "frame 2 is a precomputed embedding: a burst is images only"),
        "frames filed under another modality": ({"probes": {FACE: [{**frame, "modality": PALM}] * 2}},
                                                "ModalityMismatchError", f"filed under '{FACE}'"),
        "a burst of a modality never enrolled": ({"probes": {PALM: [frame] * 2}}, "ModalityMismatchError",
                                                 f"no '{PALM}' templates"),
        "a frame that says it is text": ({"probe": [frame, {**frame, "mime_type": "text/plain"}]},
                                         "InvalidImageError", "not an image"),
        "a frame that is not base64": ({"probe": [frame, {"data": "%%%"}]}, "InvalidInputError",
                                       "probe frame 2 data is not valid base64"),
        "a frame without data": ({"probe": [frame, {"mime_type": "image/png"}]}, "InvalidInputError",
                                 "probe frame 2 needs base64 image data"),
        "a frame that is no image": ({"probe": [frame, b64(b"Dear diary")]}, "InvalidImageError", "not an image"),
        "a frame that is no object": ({"probe": [frame, "ana.png"]}, "InvalidInputError", "probe.burst.1"),
        "more probe images than a form may send": ({"probe": [frame] * MAX_FRAMES, "probes": {FACE: [frame] * 5}},
                                                   "InvalidInputError", f"at most {MAX_FILES} probe images"),
    }
    for name, (fields, kind, says) in cases.items():
        for key in ("agent", "admin"):  # an admin's key makes no burst an embedding
            error = error_of(search(api, fields, key), 422, kind)
            assert says.lower() in error["message"].lower(), f"{name}: {error['message']}"


def test_an_oversize_burst_is_the_body_limit_s_413(api):
    big = {"data": "A" * (MAX_BODY // MAX_FRAMES), "mime_type": "image/png"}  # base64 of garbage, not decoded
    reply = search(api, {"probe": [big] * MAX_FRAMES})
    assert "body is over" in error_of(reply, 413, "PayloadTooLarge")["message"]
    just_under = {"data": base64.b64encode(b"\x89PNG" + bytes(MAX_BODY // 2 // 4 * 3)).decode()}  # a broken PNG
    error = error_of(search(api, {"probe": [just_under, b64(api.frames(ANA)[0])]}), 422, "InvalidImageError")
    assert "not an image" in error["message"]
    assert api.http.get("/v1/health").status_code == 200  # the service goes on


def test_the_openapi_document_shows_a_probe_as_an_image_or_a_burst(api):
    schemas = api.http.get("/v1/openapi.json").json()["components"]["schemas"]
    for body, field in (("SearchBody", "probe"), ("MemberBody", "member_probe")):
        options = schemas[body]["properties"][field]["anyOf"][0]["oneOf"]
        burst = next(option for option in options if option.get("type") == "array")
        assert (burst["minItems"], burst["maxItems"]) == (1, MAX_FRAMES) and "burst" in burst["description"]
        assert burst["items"] == {"$ref": "#/components/schemas/ProbeData"}
    assert any(isinstance(example.get("probe"), list) for example in schemas["SearchBody"]["examples"])


# ---- the Python client ------------------------------------------------------------------------------------


def test_the_client_sends_a_burst_as_a_repeated_file_field_or_a_json_list(api, face_probe):
    frames = api.frames(ANA)
    multipart = request_body({"query": "PIN"}, Burst(frames), member_probe={FACE: frames[:2]})
    assert [name for name, _ in multipart["files"]] == ["probe"] * 3 + [f"member_probe_{FACE}"] * 2
    as_json = request_body({}, Burst(frames), member_probe={FACE: face_probe(BEN, 0)})["json"]
    assert as_json["probe"] == [b64(frame) for frame in frames]
    assert as_json["member_probes"][FACE]["embedding"]
    for probe, says in ((frames, "a probe is not a list"), (tuple(frames), "a probe is not a list"),
                        (Burst([frames[0], face_probe(ANA, 0)]), "a burst is images only"),
                        ({FACE: []}, "1 to 10 frames"), ({FACE: frames * 4}, "1 to 10 frames")):
        with pytest.raises(InvalidInputError, match=says):  # before anything is sent
            request_body({}, probe)
    webp = request_body({}, Burst([b"RIFF0000WEBP"]), member_probe=face_probe(ANA, 0))["json"]["probe"][0]
    assert "mime_type" not in webp  # a type the client cannot name is left to the server to read


def test_the_client_round_trips_a_burst_as_multipart_and_as_json(api, captures, face_probe):
    frames = api.frames(ANA)
    for probe in (Burst(frames), {FACE: frames}, {FACE: tuple(frames)}):
        captures.clear()
        result = api.bm.search("What is my PIN?", probe=probe, k=2)
        assert "1234" in result.notes[0][0].content and len(captures) == 3
    with pytest.raises(MixedBurstError):  # Ana and Ben in one burst
        api.bm.search("PIN", probe=Burst([frames[0], api.frames(BEN)[0]]))
    # JSON: a burst beside an admin's embedding. A household's newcomer, Ben, shows up as a burst of frames.
    home = api.admin.create_group("Home", identity=api.ana.id)
    clear_ben = api.frames(BEN, 0)[:2]  # his enrolment photos: clear enough for step-up
    captures.clear()
    group = api.admin.add_member(home.id, probe=face_probe(ANA, 0), member_probe=Burst(clear_ben))
    assert group.members == [api.ana.id, api.ben.id]
    assert len(captures) == 2  # Ben's two frames (Ana's embedding needs no encoder)


def test_a_household_newcomer_may_join_with_a_multipart_burst(api, capture):
    home = api.bm.create_group("Home", probe=capture(ANA, 0))
    both = lambda person: Burst([capture(person, 0), capture(person, 1)])  # noqa: E731 - their clear photos
    group = api.bm.add_member(home.id, probe=both(ANA), member_probe=both(BEN))
    assert group.member_labels == ["ana", "ben"]

