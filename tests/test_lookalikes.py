"""Look-alike relatives: a face the gate could never tell apart from someone enrolled is refused with advice,
and an operator enrols such a relative with a palm that tells them apart.

The twin stands in as a second real photo of a newcomer (calibration_faces() holds two of the first one): by
face they are one person to ArcFace, as identical twins are. The palms are the synthetic palms of the
Competitive Code encoder, clear of each other and of the demo's. Before, a twin was refused as "already
enrolled" with no way in, and a face within δ of τ of someone was enrolled silently, leaving both people
ambiguous by face for good.
"""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import gradio as gr
import httpx
import numpy as np
import pytest
from PIL import Image

import modalities
from biomem import Probe
from biomem.cli import main
from biomem.engine.keys import create_key
from biomem.errors import (
    AlreadyEnrolledError,
    AmbiguousProbeError,
    EnrolmentRefusedError,
    LookAlikeError,
    StepUpRequiredError,
)
from biomem.identity import disclosure
from biomem.identity.enrolment import FACE_TAKEN_MISSES, LOOK_ALIKE
from biomem.identity.samples import calibration_faces, demo_palm, face_crops
from biomem.ui import Controller
from biomem.ui.messages import friendly

from .conftest import BOTH_STORES, captures_of, probes_of
from .shared import png, rest_service, upload

FACE, PALM = "face-arcface-s", "palm-compcode"
ANA_PALM, TWIN_PALM, STRANGER_PALM = 201, 202, 203  # synthetic palm seeds, none of the demo's


@pytest.fixture(scope="module")
def palm_encoder() -> modalities.Encoder:
    return modalities.create(PALM)


@pytest.fixture(scope="module")
def twins(face_encoder):
    """(ana, twin): capture(n) of one newcomer's first photo and of her second, whom ArcFace takes for one person."""
    first, second = calibration_faces()[len(face_crops())][:2]
    return captures_of([first], face_encoder), captures_of([second], face_encoder)


@pytest.fixture(scope="module")
def palm(palm_encoder):
    """palm(seed, n): the n-th capture of a synthetic palm, as a Probe (encoded once)."""
    return probes_of(demo_palm, palm_encoder)


@pytest.fixture(scope="module")
def twin_faces(twins, face_encoder):
    """(ana_face(n), twin_face(n)): the n-th capture of each, as a Probe (encoded once)."""
    ana, twin = (probes_of(captures, face_encoder) for captures in twins)
    return (lambda n: ana(0, n)), (lambda n: twin(0, n))


@BOTH_STORES
def test_an_operator_enrols_a_look_alike_twin_with_a_palm_and_face_and_palm_admit_the_right_one(
        make_memory, twin_faces, palm, newcomer_probe):
    mem = make_memory()
    ana_face, twin_face = twin_faces
    assert float(ana_face(0).embedding @ twin_face(0).embedding) >= mem.threshold(FACE)  # one face to the gate
    ana = mem.enroll("Ana", [ana_face(0), ana_face(1)])
    ben = mem.enroll("Ben", [newcomer_probe(1, 0)])
    mem.add("My PIN is 4321", identity=ana.id)

    with pytest.raises(AlreadyEnrolledError) as alone:  # by face alone: refused, with the way in
        mem.enroll("Twin", [twin_face(0), twin_face(1)])
    assert str(alone.value) == LOOK_ALIKE and "another kind" in LOOK_ALIKE
    with pytest.raises(LookAlikeError, match=rf"identity {ana.id} .* no {PALM} templates"):  # Ana needs a palm first
        mem.enroll("Twin", {FACE: [twin_face(0)], PALM: [palm(TWIN_PALM, 0), palm(TWIN_PALM, 1)]})
    with pytest.raises(AlreadyEnrolledError):  # a palm that is Ana's does not tell them apart
        mem.enroll("Twin", {FACE: [twin_face(0)], PALM: [palm(ANA_PALM, 0)]})
    assert [i.label for i in mem.identities()] == ["Ana", "Ben"]

    mem.add_templates(ana.id, [palm(ANA_PALM, 0), palm(ANA_PALM, 1)], PALM)
    twin = mem.enroll("Twin", {FACE: [twin_face(0), twin_face(1)], PALM: [palm(TWIN_PALM, 0), palm(TWIN_PALM, 1)]})
    assert set(mem.store.modalities(twin.id)) == {FACE, PALM}
    mem.add("My locker code is 8765", identity=twin.id)

    for probe in (ana_face(2), twin_face(2)):  # a face alone admits neither, and says what would
        gate = mem.identify(probe)
        assert gate.ambiguous and not gate.matched
        found = mem.search("my code", probe=probe)
        assert found.notes == [] and found.view["gate"]["advice"] == disclosure.AMBIGUOUS
        with pytest.raises(AmbiguousProbeError) as refused:
            mem.add("Planted", probe=probe)
        assert "another kind" in str(refused.value) and "Ana" not in str(refused.value)
    assert mem.identify({FACE: twin_face(2), PALM: palm(TWIN_PALM, 2)}).identity == twin.id
    assert mem.identify({FACE: ana_face(2), PALM: palm(ANA_PALM, 2)}).identity == ana.id
    assert mem.identify({FACE: ana_face(2), PALM: palm(STRANGER_PALM, 2)}).identity is None
    assert mem.identify(newcomer_probe(1, 2)).identity == ben.id  # everyone else is untouched
    found = mem.search("my code", probe={FACE: twin_face(2), PALM: palm(TWIN_PALM, 2)})
    assert [n.content for n, _ in found.notes] == ["My locker code is 8765"]
    assert mem.verify({FACE: twin_face(3), PALM: palm(TWIN_PALM, 3)}) == twin.id  # she can forget herself
    for not_her in (twin_face(3), {FACE: twin_face(3), PALM: palm(STRANGER_PALM, 3)}):
        with pytest.raises(StepUpRequiredError):
            mem.verify(not_her)
    assert mem.forget(probe={FACE: twin_face(3), PALM: palm(TWIN_PALM, 3)}) == twin.id
    assert mem.identify(ana_face(2)).identity == ana.id  # the twin gone, Ana's face alone admits her again


def near(template: np.ndarray, cosine: float, seed: int) -> Probe:
    """A face embedding scoring exactly `cosine` with `template`: a look-alike's capture inside the margin band."""
    other = np.random.default_rng(seed).standard_normal(template.shape[0]).astype(np.float32)
    other -= (other @ template) * template
    other /= np.linalg.norm(other)
    return Probe(cosine * template + np.sqrt(1 - cosine ** 2) * other, FACE)


def test_a_face_within_the_margin_of_someone_is_refused_to_operator_and_requester_alike(make_memory, newcomer_probe):
    mem = make_memory()
    ana = newcomer_probe(0, 0)
    mem.enroll("Ana", [ana])
    tau, delta = mem.threshold(FACE), mem.margin(FACE)
    band = near(ana.embedding, tau - delta / 2, seed=1)  # below τ, within δ of it: never admitted as Ana...
    assert mem.identify(band).identity is None
    with pytest.raises(LookAlikeError) as operator:  # ...but enrolled beside her, both would be ambiguous
        mem.enroll("Anya", [band])
    assert str(operator.value) == LOOK_ALIKE
    with mock.patch.object(mem.limiter, "miss", wraps=mem.limiter.miss) as miss, \
            pytest.raises(EnrolmentRefusedError) as requester:  # a requester: the one reply a taken name gets too
        mem.enroll("Anya", [band], client="kiosk")
    assert "look-alike relative" in str(requester.value) and "Ana" not in str(requester.value).replace("Anya", "")
    miss.assert_called_once_with("kiosk", FACE_TAKEN_MISSES)  # as costly as a face that is enrolled
    clear = near(ana.embedding, tau - delta - 0.01, seed=2)  # just beyond the band: a new person
    assert mem.enroll("Cleo", [clear]).label == "Cleo"
    assert [i.label for i in mem.identities()] == ["Ana", "Cleo"]


def test_a_requester_cannot_push_an_enrolled_person_into_needing_a_palm(make_memory, twin_faces, palm,
                                                                       newcomer_probe):
    mem = make_memory()
    ana_face, twin_face = twin_faces
    ana = mem.enroll("Ana", {FACE: [ana_face(0)], PALM: [palm(ANA_PALM, 0)]})
    cara = mem.enroll("Cara", [newcomer_probe(2, 0), newcomer_probe(2, 1)])
    for admin in (False, True):  # an agent's enrolment with a palm, or with an admin's key
        attempt = lambda: mem.enroll("Twin", {FACE: [twin_face(0)], PALM: [palm(TWIN_PALM, 0)]},  # noqa: E731
                                     client=f"kiosk-{admin}", admin=admin)
        if admin:
            assert attempt().label == "Twin"
        else:
            with pytest.raises(EnrolmentRefusedError):
                attempt()
            assert mem.identify(ana_face(2)).identity == ana.id  # Ana's face alone still admits her
    # Cara adds a capture of her own that comes within δ of Ben's: Ben's probes would become ambiguous
    ben = mem.enroll("Ben", [newcomer_probe(1, 0)])
    own, theirs = newcomer_probe(2, 0).embedding, newcomer_probe(1, 0).embedding
    rest = theirs - (theirs @ own) * own
    rest /= np.linalg.norm(rest)
    tau, delta = mem.threshold(FACE), mem.margin(FACE)
    for x in np.linspace(0.0, 1.0, 2001):  # along the arc from Cara's face towards Ben's
        blend = Probe(np.cos(x) * own + np.sin(x) * rest, FACE)
        if tau - delta <= float(blend.embedding @ theirs) < tau - 0.01:
            break
    assert float(blend.embedding @ own) > float(blend.embedding @ theirs)  # nearer Cara: the old rule let it in
    with pytest.raises(LookAlikeError):
        mem.add_templates(cara.id, [blend], probe=newcomer_probe(2, 1), client="cara")
    assert mem.identify(newcomer_probe(1, 1)).identity == ben.id


def test_rest_enrols_face_and_palm_at_once_for_an_admin_only(make_memory, twins):
    mem = make_memory()
    ana_face, twin_face = twins
    ana = mem.enroll("Ana", {FACE: [ana_face(0, 0)], PALM: [demo_palm(ANA_PALM, 0)]})
    admin, agent = (create_key(mem.store, name, role)[0] for name, role in (("op", "admin"), ("kiosk", "agent")))
    files = [("images", ("f.png", png(twin_face(0, 0)), "image/png")),
             ("images_palm-compcode", ("p0.png", png(demo_palm(TWIN_PALM, 0)), "image/png")),
             ("images_palm-compcode", ("p1.png", png(demo_palm(TWIN_PALM, 1)), "image/png"))]
    with rest_service(mem, timeout=120) as (_, http):
        def enrol(key: str, **body) -> httpx.Response:
            return http.post("/v1/identities", headers={"Authorization": f"Bearer {key}"}, **body)
        refused = enrol(agent, data={"label": "Twin"}, files=files)
        assert refused.status_code == 409 and refused.json()["error"]["type"] == "EnrolmentRefusedError"
        alone = enrol(admin, data={"label": "Twin"}, files=files[:1])
        assert alone.status_code == 409 and alone.json()["error"]["type"] == "AlreadyEnrolledError"
        assert "another kind" in alone.json()["error"]["message"]
        made = enrol(admin, data={"label": "Twin"}, files=files)
        assert made.status_code == 201, made.text
        assert made.json()["modalities"] == {FACE: 1, PALM: 2} and made.json()["templates"] == 3
        again = enrol(admin, json={"label": "Ana's twin", "captures": {PALM: [{"data": "%%%"}]}})
        assert again.status_code == 422  # a bad body: nothing enrolled
        for bad in ({PALM: []}, {f"kind-{n}": [{"data": "AAAA"}] for n in range(5)}):  # no image; more kinds than 4
            assert enrol(admin, json={"label": "Nobody", "captures": bad}).status_code == 422
        asked = http.post("/v1/search", headers={"Authorization": f"Bearer {agent}"}, data={"query": "code"},
                          files={"probe": ("probe.png", png(twin_face(0, 1)), "image/png")})
        assert asked.status_code == 200 and asked.json()["gate"]["advice"] == disclosure.AMBIGUOUS
        assert "Ana" not in asked.text and "Twin" not in asked.text
        both = http.post("/v1/search", headers={"Authorization": f"Bearer {agent}"}, data={"query": "code"},
                         files={"probe_face-arcface-s": ("f.png", png(twin_face(0, 1)), "image/png"),
                                "probe_palm-compcode": ("p.png", png(demo_palm(TWIN_PALM, 2)), "image/png")})
        assert both.status_code == 200 and both.json()["gate"]["label"] == "Twin", both.text
    assert [i.label for i in mem.identities()] == [ana.label, "Twin"]


def test_the_admin_page_enrols_a_twin_with_palm_images_and_a_visitor_page_cannot(make_memory, twins, cache):
    mem = make_memory()
    ana_face, twin_face = twins
    mem.enroll("Ana", {FACE: [ana_face(0, 0)], PALM: [demo_palm(ANA_PALM, 0)]})
    visitor = gr.Request(session_hash="tab-1", client=SimpleNamespace(host="198.51.100.20"), headers={})

    def files(tag: str) -> tuple[list[str], list[str]]:
        return ([upload(cache, twin_face(0, 0), f"face-{tag}")],
                [upload(cache, demo_palm(TWIN_PALM, n), f"palm-{tag}{n}") for n in range(2)])

    faces, palms = files("visitor")
    with pytest.raises(gr.Error, match="look-alike relative") as refused:
        friendly(Controller(mem, admin=False).enroll)("Twin", faces, None, FACE, request=visitor, second=palms)
    assert "Ana" not in refused.value.message
    with pytest.raises(gr.Error, match="another kind"):  # the admin page, face alone: the way in
        friendly(Controller(mem, admin=True).enroll)("Twin", [upload(cache, twin_face(0, 0), "alone")], None, FACE,
                                                     request=visitor)
    faces, palms = files("admin")
    made = Controller(mem, admin=True).enroll("Twin", faces, None, FACE, request=visitor, second=palms)
    assert made.startswith("Enrolled **Twin** from 1 image(s) with `face-arcface-s` and 2 image(s) with "
                           "`palm-compcode`")
    assert [p for p in cache.rglob("*.png")] == []  # every upload is deleted once read, refused or not
    assert [i.label for i in mem.identities()] == ["Ana", "Twin"]


def test_the_cli_enrols_a_twin_with_also_and_asks_with_face_and_palm(tmp_path, twins, capsys):
    paths = {}
    for name, image in {"ana": twins[0](0, 0), "ana_palm": demo_palm(ANA_PALM, 0), "twin": twins[1](0, 0),
                        "twin_later": twins[1](0, 1), "twin_palm": demo_palm(TWIN_PALM, 0),
                        "twin_palm_later": demo_palm(TWIN_PALM, 2)}.items():
        paths[name] = str(tmp_path / f"{name}.png")
        Image.fromarray(image).save(paths[name])
    db = ["--db", str(tmp_path / "cli.db")]
    assert main([*db, "enroll", "Ana", paths["ana"], "--also", f"{PALM}={paths['ana_palm']}"]) == 0
    assert main([*db, "enroll", "Twin", paths["twin"]]) == 2
    assert "another kind" in capsys.readouterr().err
    assert main([*db, "enroll", "Twin", paths["twin"], "--also", f"{PALM}={paths['twin_palm']}"]) == 0
    assert "1 sample(s) of face-arcface-s, 1 sample(s) of palm-compcode" in capsys.readouterr().out
    assert main([*db, "add", "My locker code is 8765", "--probe", paths["twin_later"]]) == 2
    assert "another kind" in capsys.readouterr().err
    assert main([*db, "add", "My locker code is 8765", "--probe", paths["twin_later"],
                 "--also", f"{PALM}={paths['twin_palm_later']}"]) == 0
    capsys.readouterr()
    assert main([*db, "ask", "What is my locker code?", "--probe", paths["twin_later"],
                 "--also", f"{PALM}={paths['twin_palm_later']}"]) == 0
    assert "gate: Twin" in capsys.readouterr().out
    assert main([*db, "enroll", "Bad", paths["ana"], "--also", "palm.png"]) == 2
    assert "MODALITY=IMAGE" in capsys.readouterr().err
