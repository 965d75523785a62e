"""The capture quality gate: poor captures are refused with a hint before any match, never count as a miss,
enrolment holds a stricter bar, and a burst of frames of one person is fused into one probe."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from biomem import BioMemory, Burst
from biomem.engine.keys import create_key
from biomem.engine.messages import readable
from biomem.errors import MultipleFacesError, PoorCaptureError
from biomem.identity.degraded import blur, dark, downscale, roll
from biomem.identity.samples import augment
from biomem.server import create_app, served
from modalities.quality import FaceQuality, QualityBar, pose

from .shared import DAN, FINN, png  # Dan's photo is a near-frontal face

pytestmark = pytest.mark.filterwarnings("ignore:`estimate` is deprecated:FutureWarning")


@pytest.fixture
def mem(tmp_path, text_encoder, face_encoder):
    memory = BioMemory(tmp_path / "q.db", text_model=text_encoder, encoder=face_encoder, limits="3/600/60")
    yield memory
    memory.close()


def hint_of(encoder, image, quality: str = "probe") -> str | None:
    try:
        encoder.capture(image, quality)
    except PoorCaptureError as exc:
        return exc.hint
    return None


@pytest.mark.parametrize(("degrade", "hint"), [
    (lambda face: downscale(face, 0.25), "move closer"),
    (lambda face: blur(face, 3.0), "hold still"),
    (lambda face: roll(face, 60), "face the camera"),
    (lambda face: dark(face, 0.07), "more light"),
])
def test_each_criterion_refuses_its_degraded_sample_with_its_hint(face_encoder, faces, degrade, hint):
    assert hint_of(face_encoder, faces[DAN]) is None and hint_of(face_encoder, faces[DAN], "enrol") is None
    assert hint_of(face_encoder, degrade(faces[DAN])) == hint
    face_encoder.encode(degrade(faces[DAN]))  # encode itself stays ungated: calibration and benchmarks


def test_pose_reads_yaw_from_the_nose_and_roll_from_the_eyes():
    assert pose((0, 0), (2, 0), (1, 1)) == pytest.approx((0.0, 0.0))
    assert pose((0, 0), (2, 0), (2, 1))[0] == pytest.approx(45.0)
    assert pose((0, 0), (1, 1), (0.5, 0.5))[1] == pytest.approx(45.0)
    bar = QualityBar(min_size=40, max_yaw=30, max_roll=30, min_sharpness=0.01, min_score=0.5)
    with pytest.raises(PoorCaptureError, match="face the camera") as refused:
        bar.check(FaceQuality(size=100, yaw=-45, roll=0, sharpness=0.1, score=0.9))
    assert refused.value.criterion == "pose" and isinstance(refused.value, ValueError)


def test_enrolment_holds_a_stricter_bar_than_a_probe(mem, faces):
    halved = downscale(faces[DAN], 0.5)  # a face of 50-60 px: fine to ask with, too small to enrol
    with pytest.raises(PoorCaptureError, match="move closer"):
        mem.enroll("Dan", [halved])
    assert mem.identities() == []
    dan = mem.enroll("Dan", [faces[DAN]])
    assert mem.identify(halved).identity == dan.id
    with pytest.raises(PoorCaptureError, match="move closer"):
        mem.add_templates(dan.id, [halved])
    title, message = readable(PoorCaptureError("the face is 30 px, a probe needs 40: move closer", "move closer"))
    assert title == "Poor capture: move closer" and "not count as a failed attempt" in message


def test_poor_captures_are_not_misses(mem, faces):
    dan = mem.enroll("Dan", [faces[DAN]])
    client = ["session:kiosk", "address:10.0.0.7"]
    poor = blur(faces[FINN], 3.0)
    for _ in range(30):
        with pytest.raises(PoorCaptureError):
            mem.identify(poor, client=client)
        with pytest.raises(PoorCaptureError):
            mem.verify(poor, client=client)
    mem.limiter.check(client)  # not in cool-down
    assert mem.identify(faces[DAN], client=client).identity == dan.id


def test_a_burst_is_fused_closer_to_the_template_than_its_frames(mem, faces, face_encoder):
    dan = mem.enroll("Dan", [faces[DAN]])
    template = face_encoder.encode(faces[DAN])
    frames = [augment(faces[DAN], seed=700 + n) for n in range(4)]
    singles = [float(face_encoder.encode(frame) @ template) for frame in frames]
    fused = mem.probe(Burst(frames))
    assert float(fused.embedding @ template) > np.mean(singles)
    assert mem.identify({face_encoder.name: frames}).identity == dan.id  # a list under a modality is a burst
    # a frame below the bar is skipped; all below: the hint of the frame the detector is surest of
    assert np.allclose(mem.probe(Burst([*frames, blur(faces[DAN], 3.0)])).embedding, fused.embedding)
    with pytest.raises(PoorCaptureError, match="hold still"):
        mem.probe(Burst([blur(frame, 3.0) for frame in frames]))


def test_a_burst_of_two_people_is_refused(mem, faces):
    with pytest.raises(MultipleFacesError, match="different people"):
        mem.identify(Burst([faces[DAN], faces[FINN]]))


def test_rest_takes_a_burst_as_one_probe_field_sent_several_times(mem, faces):
    dan = mem.enroll("Dan", [faces[DAN]])
    mem.add("Dan's locker code is 4411", identity=dan.id)
    key, _ = create_key(mem.store, "kiosk")
    frames = [("probe", (f"{n}.png", png(augment(faces[DAN], seed=800 + n)), "image/png")) for n in range(3)]
    with served(create_app(mem, ui=False, mcp=False)) as url:
        found = httpx.post(f"{url}/v1/search", headers={"Authorization": f"Bearer {key}"},
                           data={"query": "locker code"}, files=frames, timeout=60)
        assert found.status_code == 200, found.text
        assert "4411" in found.text
        poor = httpx.post(f"{url}/v1/search", headers={"Authorization": f"Bearer {key}"}, data={"query": "x"},
                          files={"probe": ("p.png", png(downscale(faces[DAN], 0.25)), "image/png")}, timeout=60)
        assert poor.status_code == 422 and poor.json()["error"]["type"] == "PoorCaptureError"
        assert poor.json()["error"]["title"] == "Poor capture: move closer"
