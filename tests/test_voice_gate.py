"""Voice through the gate, on real recorded speakers: a recording is one probe of its own kind (a Gradio
(sample rate, samples) tuple is never a burst), face + voice fused admits exactly the right person, a face with
someone else's voice admits nobody, a voice alone never clears a step-up, too little speech is a clear refusal
that writes nothing, and REST takes base64 audio beside a photo."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from scipy.io import wavfile
from scipy.signal import resample_poly

from biomem.engine.keys import create_key
from biomem.errors import PoorCaptureError, StepUpRequiredError, TooLittleSpeechError
from modalities.audio import SAMPLE_RATE

from .conftest import BOTH_STORES
from .shared import ANA, BEN, b64, png, rest_service
from .voice_clips import clips

FACE, VOICE = "face-arcface-s", "voice-ge2e"
pytestmark = BOTH_STORES


def recording(path) -> tuple[int, np.ndarray]:
    """A clip as Gradio's microphone gives it: (rate, int16 samples), here stereo at 44.1 kHz."""
    rate, samples = wavfile.read(path)
    assert rate == SAMPLE_RATE
    up = np.clip(np.round(resample_poly(samples.astype(np.float64), 441, 160)), -32768, 32767).astype(np.int16)
    return 44_100, np.stack([up, up], axis=1)


def wav(path) -> bytes:
    return path.read_bytes()


@pytest.fixture(scope="module")
def speakers():
    """Two speakers' clips with at least 3 s of audio each: three to enrol, the rest to probe."""
    by_speaker: dict[str, list] = {}
    for clip in clips():
        if wavfile.read(clip.path)[1].size >= 3 * SAMPLE_RATE:
            by_speaker.setdefault(clip.speaker, []).append(clip.path)
    ranked = sorted(by_speaker.values(), key=len, reverse=True)
    return ranked[0], ranked[1]


@pytest.fixture
def household(make_memory, capture, speakers):
    """Ana (face + the first speaker's voice) and Ben (face + the second's), and one note each; the probe
    recordings are the clips each speaker did not enrol with that score clearly above τ (clear captures)."""
    mem = make_memory()
    first, second = speakers
    ana = mem.enroll("Ana", {FACE: [capture(ANA, 0), capture(ANA, 1)], VOICE: first[:3]})
    ben = mem.enroll("Ben", {FACE: [capture(BEN, 0), capture(BEN, 1)], VOICE: second[:3]})
    mem.add("My locker code is 4412", identity=ana.id)
    mem.add("My locker code is 7781", identity=ben.id)
    tau = mem.threshold(VOICE, step_up=True)

    def clear(paths, person):
        templates = mem.store.templates(VOICE)
        own = templates[1][templates[0] == person.id]
        for path in paths[3:]:
            if float((own @ mem.probe(path, VOICE).embedding).max()) > tau:
                return path
        raise AssertionError("no clear probe recording")  # the data changed: pick other speakers
    return mem, ana, ben, clear(first, ana), clear(second, ben)


def test_face_and_voice_admit_the_right_person_and_a_gradio_tuple_is_one_recording(household, capture):
    mem, ana, ben, ana_voice, ben_voice = household
    found = mem.search("locker code", probe={FACE: capture(ANA, 2), VOICE: recording(ana_voice)})
    assert found.gate.identity == ana.id and [n.content for n, _ in found.notes] == ["My locker code is 4412"]
    assert mem.identify({VOICE: recording(ben_voice)}).identity == ben.id  # a voice alone attributes
    mixed = mem.search("locker code", probe={FACE: capture(ANA, 2), VOICE: recording(ben_voice)})
    assert not mixed.gate.matched and mixed.notes == []  # Ana's face with Ben's voice: nobody


def test_a_voice_alone_never_clears_a_step_up_and_a_face_still_does(household, capture):
    mem, ana, ben, ana_voice, _ = household
    note = mem.search("locker", probe={FACE: capture(ANA, 2)}).notes[0][0]
    for action in (lambda p: mem.delete(note.id, probe=p), lambda p: mem.forget(probe=p),
                   lambda p: mem.get_all(probe=p)):
        with pytest.raises(StepUpRequiredError, match="voice alone"):
            action({VOICE: wav(ana_voice)})
    assert mem.store.get_note(ana.id, note.id).content == "My locker code is 4412"  # nothing changed
    assert mem.other_kind(FACE) is None  # a voice is never the second kind a step-up asks for
    assert mem.verify({FACE: capture(ANA, 2)}) == ana.id  # the voice is not required beside the face
    assert mem.verify({FACE: capture(ANA, 2), VOICE: wav(ana_voice)}) == ana.id
    with mem.session({VOICE: wav(ana_voice)}) as me:  # a voice session reads narrowly, never broadly
        assert not me.broad and me.search("locker").notes
        with pytest.raises(StepUpRequiredError):
            me.get_all()


def test_too_little_speech_is_a_clear_refusal_that_writes_nothing(household, speakers, capture):
    mem, ana, *_ = household
    rate, samples = wavfile.read(speakers[0][0])
    short = (rate, samples[: rate])  # one second
    before = (mem.store.counts(), mem.store.note_total())
    with pytest.raises(TooLittleSpeechError, match="speak longer") as refused:
        mem.add("A note", probe={FACE: capture(ANA, 2), VOICE: short})
    assert isinstance(refused.value, PoorCaptureError)
    with pytest.raises(TooLittleSpeechError):
        mem.enroll("Cleo", {VOICE: [short, short, short]})
    assert (mem.store.counts(), mem.store.note_total()) == before


def test_forget_erases_the_voice_templates_too(household, capture):
    mem, ana, ben, ana_voice, _ = household
    mem.forget(probe={FACE: capture(ANA, 2)})
    assert ana.id not in set(mem.store.templates(VOICE)[0].tolist())
    assert mem.identify({VOICE: wav(ana_voice)}).identity != ana.id


def test_rest_takes_base64_audio_beside_a_photo(household, capture):
    mem, ana, ben, ana_voice, ben_voice = household
    key = create_key(mem.store, "kiosk", "agent")[0]
    audio = {"data": base64.b64encode(wav(ana_voice)).decode(), "mime_type": "audio/wav"}
    with rest_service(mem, timeout=120) as (_, http):
        def search(probes: dict) -> dict:
            response = http.post("/v1/search", headers={"Authorization": f"Bearer {key}"},
                                 json={"query": "locker code", "probes": probes})
            assert response.status_code == 200, response.text
            return response.json()
        assert search({FACE: b64(png(capture(ANA, 2))), VOICE: audio})["gate"]["label"] == "Ana"
        other = {"data": base64.b64encode(wav(ben_voice)).decode(), "mime_type": "audio/wav"}
        assert "4412" not in str(search({FACE: b64(png(capture(ANA, 2))), VOICE: other}))
        wrong = http.post("/v1/search", headers={"Authorization": f"Bearer {key}"},
                          json={"query": "x", "probes": {VOICE: {"data": audio["data"], "mime_type": "text/plain"}}})
        assert wrong.status_code == 422
        buffer = io.BytesIO()
        wavfile.write(buffer, SAMPLE_RATE, np.zeros(SAMPLE_RATE, dtype=np.int16))  # one second of silence
        silent = {"data": base64.b64encode(buffer.getvalue()).decode(), "mime_type": "audio/wav"}
        refused = http.post("/v1/search", headers={"Authorization": f"Bearer {key}"},
                            json={"query": "x", "probes": {FACE: b64(png(capture(ANA, 2))), VOICE: silent}})
        assert refused.status_code == 422 and "speak longer" in refused.json()["error"]["message"]
