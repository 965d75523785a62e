"""The page's voice probe, through its controller (no browser) on real speech: a recording beside a face admits
its speaker, another speaker's voice beside her face admits nobody, a too-short recording is refused with
"speak longer" and writes nothing, an enrolment takes three recordings and its meter reads them right, a voice
alone never clears a step-up, and every recording file is gone once a call has read it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
from scipy.io import wavfile

from biomem.ui import Controller, render
from biomem.ui.messages import friendly
from biomem.ui.voices import VOICE, meter, speech_seconds
from modalities.audio import SAMPLE_RATE, load_audio, speech

from .shared import DAN, EVE, upload, written
from .voice_clips import Clip, clips

FACE = "face-arcface-s"
QUESTION = "What is my locker code?"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:gradio.helpers")  # a hint's toast, outside a page
SPEAKER, OTHER = "pedersen", "juarez"  # two council members: her voice, and another speaker's


def short_clips(speaker: str) -> list[Clip]:
    """A speaker's clips holding 5-15 s of speech: short recordings, as a person makes them on the page."""
    return [c for c in clips() if c.speaker == speaker and 5 <= speech_seconds_of(c.path) <= 15]


def speech_seconds_of(path: Path) -> float:
    """Seconds of speech in a WAV file, measured as the encoder measures it."""
    return speech(load_audio(path), 0.0).size / SAMPLE_RATE


@pytest.fixture(scope="module")
def voices() -> SimpleNamespace:
    """Her three enrolment clips, a later clip of her from another meeting, another speaker's clip."""
    hers, others = short_clips(SPEAKER), short_clips(OTHER)
    return SimpleNamespace(enrol=[c.path for c in hers[:3]], probe=hers[4].path, other=others[0].path)


def recorded(cache: Path, source: Path | np.ndarray, name: str) -> str:
    """A WAV where Gradio would put a microphone recording or an upload: its own folder in the upload cache."""
    folder = cache / name
    folder.mkdir()
    target = folder / "audio.wav"
    if isinstance(source, Path):
        target.write_bytes(source.read_bytes())
    else:
        wavfile.write(target, SAMPLE_RATE, source)
    return str(target)


def left_in(cache: Path) -> list[Path]:
    """Every file still in the upload cache: images and recordings alike."""
    return [p for p in cache.rglob("*") if p.is_file()]


@pytest.fixture
def dana(make_memory, capture, cache, voices) -> SimpleNamespace:
    """Dana enrolled through the Enrol tab's handler with two face photos and three recordings, and a note."""
    mem = make_memory()
    ui = Controller(mem, admin=False)
    faces = [upload(cache, capture(DAN, n), f"face{n}") for n in range(2)]
    spoken = [recorded(cache, path, f"voice{n}") for n, path in enumerate(voices.enrol)]
    message = ui.enroll("Dana", faces, None, FACE, voices=spoken)
    assert "Enrolled **Dana** from 2 image(s) with `face-arcface-s` and 3 recording(s) with `voice-ge2e`" in message
    assert left_in(cache) == []
    assert sorted(mem.store.modalities()) == [FACE, VOICE]
    mem.add("My locker code is 5150", identity=mem.identities()[0].id)
    return SimpleNamespace(mem=mem, ui=ui, cache=cache, face=lambda n: upload(cache, capture(DAN, n), f"probe{n}"),
                           voice=lambda source, name: recorded(cache, source, name))


def test_her_face_and_voice_admit_her_and_the_page_says_who_is_speaking(dana, voices):
    answer = dana.ui.ask(QUESTION, dana.face(3), FACE, None, dana.voice(voices.probe, "ask"))
    gate = answer["gate"]
    assert gate["matched"] and gate["label"] == "Dana" and gate["modality"] == f"{FACE}+{VOICE}"
    assert "5150" in answer["answer"]
    assert "🎙 Who is speaking: <b><bdi>Dana</bdi></b>" in render.gate_html(gate)
    assert "🎙 speaking" in render.chat_messages(answer)[0]["content"]
    assert left_in(dana.cache) == []  # the recording and the photo were read once and deleted


def test_compare_shows_her_voice_beside_another_speaker_s_with_her_face(dana, voices):
    result = dana.ui.compare(QUESTION, dana.face(4), dana.face(5), FACE, None,
                             dana.voice(voices.probe, "a"), dana.voice(voices.other, "b"))
    assert result["a"]["gate"]["label"] == "Dana" and "5150" in result["a"]["answer"]
    assert not result["b"]["gate"]["matched"] and "5150" not in str(result["b"])  # her face, someone else's voice
    assert "Who is speaking: <b><bdi>Dana" in render.panel_html(result["a"], True)
    assert "Who is speaking: nobody enrolled" in render.panel_html(result["b"], True)
    assert "Dana" not in render.panel_html(result["b"], True)
    assert render.compare_chart(result) == ""  # private disclosure: no scores
    assert left_in(dana.cache) == []


def test_a_one_second_recording_is_told_to_speak_longer_and_writes_nothing(dana, voices):
    rate, samples = wavfile.read(voices.probe)
    before = written(dana.mem)
    with pytest.raises(gr.Error) as caught:
        friendly(dana.ui.ask)(QUESTION, dana.face(6), FACE, None, dana.voice(samples[:rate], "short"))
    assert "speak longer" in caught.value.title
    with pytest.raises(gr.Error, match="speak longer"):
        friendly(dana.ui.remember)("Park on level 2", dana.face(7), FACE, None, voice=dana.voice(samples[:rate], "r"))
    assert written(dana.mem) == before
    assert left_in(dana.cache) == []


def test_the_meter_reads_each_recording_before_enrolment_and_leaves_it_in_its_box(cache, voices):
    rate, samples = wavfile.read(voices.probe)
    for n, source in enumerate([*voices.enrol, samples[:rate]]):
        path = recorded(cache, source, f"meter{n}")
        heard = speech_seconds_of(Path(path))
        assert speech_seconds({"path": path}) == heard
        assert meter({"path": path}) == (f"✓ heard {heard:.1f} s of speech (needs 2 s)" if heard >= 2 else
                                         f"✗ speak longer: heard {heard:.1f} s of speech (needs 2 s)")
        assert Path(path).is_file()  # measured, not consumed: Enrol reads it once
    assert 5 <= speech_seconds({"path": str(cache / "meter0" / "audio.wav")}) <= 15
    assert meter(None) == "" and meter({"path": "/etc/passwd"}) == ""  # nothing, or a file outside the cache


def test_recordings_alone_cannot_enrol(make_memory, cache, voices):
    ui = Controller(make_memory(), admin=False)
    spoken = [recorded(cache, path, f"v{n}") for n, path in enumerate(voices.enrol)]
    with pytest.raises(gr.Error, match="a voice never proves who you are"):
        ui.enroll("Vera", None, None, FACE, voices=spoken)
    assert left_in(cache) == []


def test_a_voice_alone_never_unlocks_deletes_or_forgets(dana, voices):
    note = dana.mem.store.all_notes(dana.mem.identities()[0].id)[0]
    before = written(dana.mem)
    for n, call in enumerate((lambda v: dana.ui.unlock(None, FACE, None, None, v),
                              lambda v: dana.ui.delete_note(note.id, None, FACE, None, None, v),
                              lambda v: dana.ui.forget(True, None, FACE, None, None, v))):
        with pytest.raises(gr.Error, match="face or palm") as caught:
            friendly(call)(dana.voice(voices.probe, f"alone{n}"))
        assert caught.value.title == "Fresh probe needed"
    assert written(dana.mem) == before and left_in(dana.cache) == []
    # her face with her voice does unlock, and deletes
    session = dana.ui.unlock(dana.face(8), FACE, None, None, dana.voice(voices.probe, "unlock"))
    assert session["label"] == "Dana" and [r[2] for r in session["rows"]] == ["My locker code is 5150"]
    assert "Deleted note" in dana.ui.delete_note(note.id, dana.face(9), FACE, None, None,
                                                  dana.voice(voices.probe, "delete"))
    assert left_in(dana.cache) == []


def test_every_recording_is_deleted_whatever_the_call_made_of_it(dana, voices, capture):
    with pytest.raises(gr.Error, match="Type a question"):
        friendly(dana.ui.ask)("", dana.face(10), FACE, None, dana.voice(voices.probe, "empty"))
    with pytest.raises(gr.Error, match="Two probes"):
        friendly(dana.ui.compare)(QUESTION, None, dana.face(11), FACE, None, None, dana.voice(voices.probe, "half"))
    with pytest.raises(gr.Error, match="Tick the box"):
        friendly(dana.ui.forget)(False, dana.face(12), FACE, None, None, dana.voice(voices.probe, "unticked"))
    with pytest.raises(gr.Error):  # a face with no face in it: the recording beside it goes too
        friendly(dana.ui.ask)(QUESTION, upload(dana.cache, np.full((256, 256, 3), 128, np.uint8), "blank"), FACE,
                              None, dana.voice(voices.probe, "beside-blank"))
    result = dana.ui.compare(QUESTION, dana.face(13), upload(dana.cache, capture(EVE, 0), "eve"), FACE, None,
                             dana.voice(voices.probe, "a2"), dana.voice(voices.other, "b2"))
    assert result["a"]["gate"]["matched"] and not result["b"]["gate"]["matched"]
    assert left_in(dana.cache) == []


def test_the_probe_encoder_offers_no_voice_and_recordings_have_boxes_of_their_own(make_memory):
    ui = Controller(make_memory())
    choices, _ = ui.calibration.encoder_choices()
    assert VOICE not in choices and FACE in choices
    assert ui.voice  # the voice encoder loads here: the page shows its recording boxes


# ---- the engine's contract, which the page builds on ---------------------------------------------------------

def test_the_engine_takes_a_gradio_recording_beside_a_face_as_one_recording(dana, voices, capture):
    rate, samples = wavfile.read(voices.probe)
    gate = dana.mem.identify({FACE: capture(DAN, 14), VOICE: (rate, samples)})
    assert gate.matched and gate.labels[gate.identity] == "Dana"
    rate, other = wavfile.read(voices.other)
    assert not dana.mem.identify({FACE: capture(DAN, 14), VOICE: (rate, other)}).matched
