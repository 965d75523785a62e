"""The voice encoder (voice-ge2e) on real speech fetched at test time: registry, separation, audio input (WAV,
FLAC, OGG, MP3, Gradio tuples), refusals, and its one torch thread."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import soundfile
from PIL import Image
from scipy.io import wavfile
from scipy.signal import resample_poly

import modalities
from modalities.audio import SAMPLE_RATE, load_audio, speech
from modalities.errors import (
    AudioTooLongError,
    InvalidAudioError,
    InvalidInputError,
    ModelUnavailableError,
    PoorCaptureError,
    TooLittleSpeechError,
    UnsupportedAudioFormatError,
    WrongModalityError,
)
from modalities.voice_ge2e import GE2EVoiceEncoder

from .voice_clips import Clip, clips

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def encoder() -> GE2EVoiceEncoder:
    return modalities.create("voice-ge2e")


@pytest.fixture(scope="module")
def rows() -> list[Clip]:
    """The speakerbox clips (a failed fetch fails the tests that use them)."""
    return clips()


@pytest.fixture(scope="module")
def long_clip(rows) -> np.ndarray:
    """The first clip holding 8-20 s of speech, as int16 samples at 16 kHz (as the file holds them)."""
    for row in rows:
        rate, samples = wavfile.read(row.path)
        if rate == SAMPLE_RATE and 8 <= speech(load_audio(row.path), 0.0).size / SAMPLE_RATE <= 20:
            return samples
    raise AssertionError("no clip with 8-20 s of speech")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def wav_bytes(rate: int, samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    wavfile.write(buffer, rate, samples)
    return buffer.getvalue()


def test_registry_describes_it_without_loading_weights():
    # A fresh interpreter: this session may have imported torch already.
    script = (
        "import sys, modalities\n"
        "info = modalities.info('voice-ge2e')\n"
        "assert (info.kind, info.dim) == ('voice', 256), info\n"
        "assert 'Apache-2.0' in info.license and info.weights == 'pkg:resemblyzer/pretrained.pt', info\n"
        "assert 0 < info.default_threshold < info.step_up_threshold < 1, info\n"
        "found = modalities.availability('voice-ge2e')\n"
        "assert found.ready and 'pretrained.pt' in found.reason, found\n"
        "loaded = {'torch', 'webrtcvad', 'scipy.signal', 'soundfile'} & set(sys.modules)\n"
        "assert not loaded, f'describing the voice encoder imported {loaded}'\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "voice-ge2e" in modalities.names()


def test_embedding_is_a_unit_256_vector_and_thread_safe(encoder, long_clip):
    probe = (SAMPLE_RATE, long_clip)
    vector = encoder.encode(probe)
    assert vector.shape == (256,) and vector.dtype == np.float32
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    with ThreadPoolExecutor(2) as pool:
        again = list(pool.map(encoder.encode, [probe] * 4))
    assert all(np.allclose(v, vector, atol=1e-6) for v in again)


def test_same_speaker_across_recordings_scores_higher_than_other_speakers(encoder, rows):
    # One clip (the longest) per speaker and meeting: genuine pairs are always two different meetings.
    longest: dict[tuple[str, str], Clip] = {}
    for row in rows:
        key = (row.speaker, row.recording)
        if key not in longest or row.path.stat().st_size > longest[key].path.stat().st_size:
            longest[key] = row
    picked, vectors = [], []
    for row in sorted(longest.values()):
        try:
            vectors.append(encoder.encode(row.path))
            picked.append(row)
        except TooLittleSpeechError:  # a meeting where the speaker says a word or two: refused, as a probe would be
            pass
    vectors = np.stack(vectors)
    scores = vectors @ vectors.T
    same = np.array([[a.speaker == b.speaker for b in picked] for a in picked])
    upper = np.triu(np.ones_like(same), k=1).astype(bool)
    genuine, impostor = scores[same & upper], scores[~same & upper]
    assert genuine.size >= 25 and impostor.size >= 300
    ordered = (genuine[:, None] > impostor[None, :]).mean()  # the ROC's area
    assert ordered > 0.95, (ordered, genuine.mean(), impostor.mean())
    assert genuine.mean() - impostor.mean() > 0.15
    assert impostor.mean() > 0.4  # voices are never far apart: why τ must be calibrated, not 0.5


def test_gradio_int16_stereo_44k_tuple_gives_the_vector_of_the_16k_float_file(encoder, long_clip, tmp_path):
    reference = long_clip.astype(np.float32) / 32768
    float_file = tmp_path / "float32-16k.wav"
    wavfile.write(float_file, SAMPLE_RATE, reference)
    expected = encoder.encode(float_file)
    assert cosine(expected, encoder.encode(wav_bytes(SAMPLE_RATE, long_clip))) > 0.9999  # the int16 file itself

    up = resample_poly(reference.astype(np.float64), 441, 160)  # 16 kHz -> 44.1 kHz
    stereo = np.stack([up, 0.8 * up], axis=1)
    gradio = (44_100, np.clip(np.round(stereo * 32768), -32768, 32767).astype(np.int16))
    assert cosine(expected, encoder.encode(gradio)) >= 0.99
    as_int32 = (SAMPLE_RATE, (reference.astype(np.float64) * 2**31).astype(np.int32))
    assert cosine(expected, encoder.encode(as_int32)) >= 0.999
    assert cosine(expected, encoder.encode((48_000, resample_poly(reference, 3, 1).astype(np.float32)))) >= 0.99

    # The controls: the same samples at a wrong rate, or left unscaled, give another vector (or no speech).
    assert cosine(expected, encoder.encode((SAMPLE_RATE, gradio[1]))) < 0.95
    try:
        unscaled = encoder.encode((44_100, gradio[1].astype(np.float32)))
    except TooLittleSpeechError:
        return
    assert cosine(expected, unscaled) < 0.95


# The least cosine against the WAV's vector measured on the 66 speakerbox clips with 2 s of speech or more (16 kHz,
# soundfile 0.14.0's libsndfile 1.2.2 encoding at its default quality), and the bound asserted below it:
# FLAC 0.9999999 (lossless: the same samples), OGG/Vorbis 0.998, OGG/Opus (48 kHz) 0.997, MP3 0.992.
COMPRESSED = [("flac", "FLAC", "PCM_16", SAMPLE_RATE, 0.999), ("ogg", "OGG", "VORBIS", SAMPLE_RATE, 0.99),
              ("opus", "OGG", "OPUS", 48_000, 0.99), ("mp3", "MP3", "MPEG_LAYER_III", SAMPLE_RATE, 0.98)]


@pytest.mark.parametrize(("suffix", "container", "codec", "rate", "bound"), COMPRESSED,
                         ids=[row[0] for row in COMPRESSED])
def test_flac_ogg_and_mp3_bytes_and_paths_give_the_vector_of_the_wav(encoder, long_clip, tmp_path, suffix,
                                                                    container, codec, rate, bound):
    expected = encoder.encode(wav_bytes(SAMPLE_RATE, long_clip))
    samples = long_clip if rate == SAMPLE_RATE else np.clip(
        np.round(resample_poly(long_clip.astype(np.float64), rate // SAMPLE_RATE, 1)), -32768, 32767).astype(np.int16)
    path = tmp_path / f"clip.{suffix}"
    soundfile.write(path, samples, rate, format=container, subtype=codec)
    from_path, from_bytes = encoder.encode(path), encoder.encode(path.read_bytes())
    assert np.array_equal(from_path, from_bytes)
    assert cosine(expected, from_path) >= bound
    if container == "FLAC":  # lossless: the very samples of the WAV
        assert np.array_equal(load_audio(path), load_audio(wav_bytes(SAMPLE_RATE, long_clip)))


def test_a_compressed_file_longer_than_two_minutes_is_refused_before_it_is_decoded_whole(tmp_path):
    path = tmp_path / "long.flac"
    soundfile.write(path, np.zeros(8_000 * 121, np.int16), 8_000)  # a few kB for 121 s
    assert path.stat().st_size < 100_000
    with pytest.raises(AudioTooLongError, match="over 120 s"):
        load_audio(path)
    soundfile.write(path, np.zeros(8_000 * 119, np.int16), 8_000)
    assert load_audio(path).size == SAMPLE_RATE * 119


def test_short_or_silent_audio_is_refused_with_speak_longer(encoder, long_clip):
    voiced = speech(load_audio((SAMPLE_RATE, long_clip)), 0.0)
    quiet_noise = np.random.default_rng(0).normal(0, 1e-4, 5 * SAMPLE_RATE).astype(np.float32)
    for probe in [(SAMPLE_RATE, voiced[: int(1.5 * SAMPLE_RATE)]), (SAMPLE_RATE, np.zeros(5 * SAMPLE_RATE, np.int16)),
                  (SAMPLE_RATE, quiet_noise), wav_bytes(8_000, np.zeros(8_000 * 3, np.int16))]:
        with pytest.raises(TooLittleSpeechError, match="speak longer") as refused:
            encoder.encode(probe)
        assert isinstance(refused.value, PoorCaptureError) and refused.value.hint == "speak longer"
        assert refused.value.criterion == "speech"
    assert encoder.encode((SAMPLE_RATE, voiced[: int(2.1 * SAMPLE_RATE)])).shape == (256,)  # 2 s is enough


def test_what_is_not_audio_is_refused(encoder, tmp_path):
    refusals = [
        (b"these bytes are no recording at all", InvalidAudioError, "not a recording that is read here"),
        (b"RIFF\x10\x00\x00\x00WAVEfmt garbage", InvalidAudioError, "cannot decode the WAV"),
        (b"fLaC\x00\x00\x00\x22" + bytes(64), InvalidAudioError, "cannot decode the FLAC"),
        (b"OggS\x00\x02" + bytes(64), InvalidAudioError, "cannot decode the OGG"),
        (b"\x1a\x45\xdf\xa3" + bytes(64), UnsupportedAudioFormatError, "WebM.*convert it to WAV, FLAC, OGG or MP3"),
        (b"\x00\x00\x00\x20ftypM4A " + bytes(64), UnsupportedAudioFormatError, "M4A.*convert it to WAV"),
        (b"FORM\x00\x00\x00\x20AIFF" + bytes(64), UnsupportedAudioFormatError, "AIFF"),
        (tmp_path / "missing.wav", InvalidAudioError, "cannot read"),
        (np.zeros(SAMPLE_RATE, np.float32), InvalidAudioError, "sample_rate"),
        ((SAMPLE_RATE, np.zeros(SAMPLE_RATE, np.int64)), InvalidAudioError, "int64"),
        ((4_000, np.zeros(SAMPLE_RATE, np.int16)), InvalidAudioError, "sample rate"),
        ((SAMPLE_RATE, np.full(SAMPLE_RATE, np.nan, np.float32)), InvalidAudioError, "NaN"),
        ((SAMPLE_RATE, np.zeros(SAMPLE_RATE * 121, np.int16)), InvalidAudioError, "most taken is 120 s"),
    ]
    for probe, error, message in refusals:
        with pytest.raises(error, match=message):
            encoder.encode(probe)
    with pytest.raises(InvalidInputError, match="capture quality"):
        encoder.capture(b"", quality="crisp")


def test_an_image_given_to_the_voice_encoder_is_a_wrong_modality(encoder, tmp_path):
    photo = np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    png, jpeg = io.BytesIO(), tmp_path / "face.jpg"
    Image.fromarray(photo).save(png, format="PNG")
    Image.fromarray(photo).save(jpeg)
    for probe in (png.getvalue(), jpeg, photo, Image.fromarray(photo), (SAMPLE_RATE, photo)):
        with pytest.raises(WrongModalityError, match="image"):
            encoder.encode(probe)
    assert issubclass(WrongModalityError, InvalidInputError)


def test_one_torch_thread_for_the_encoder_and_no_change_to_other_threads(rows):
    # A fresh interpreter, so that torch's thread counts are this test's own.
    script = (
        "import sys, threading, torch, modalities\n"
        "torch.set_num_threads(2)\n"
        "encoder = modalities.create('voice-ge2e')\n"
        "assert encoder.worker_threads() == 1\n"
        "assert torch.get_num_threads() == 2, torch.get_num_threads()\n"
        "encoder.encode(sys.argv[1])\n"
        "assert torch.get_num_threads() == 2, torch.get_num_threads()\n"
        "seen = []\n"
        "thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))\n"
        "thread.start(); thread.join()\n"
        "assert seen == [2], f'a thread started after the encoder runs with {seen} torch threads'\n"
        "assert encoder.worker_threads() == 1\n"
    )
    clip = max(rows, key=lambda row: row.path.stat().st_size)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", script, str(clip.path)], cwd=REPO, env=env, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr


def test_missing_or_wrong_weights_say_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr("modalities.voice_ge2e.WEIGHTS", "pkg:resemblyzer_not_installed/pretrained.pt")
    found = modalities.availability("voice-ge2e")
    assert not found.ready and "pip install --no-deps resemblyzer==0.1.4" in found.reason
    with pytest.raises(ModelUnavailableError, match="pip install --no-deps resemblyzer==0.1.4"):
        modalities.create("voice-ge2e")
    other = tmp_path / "pretrained.pt"
    other.write_bytes(b"not the GE2E weights")
    with pytest.raises(ModelUnavailableError, match="sha256"):
        modalities.create("voice-ge2e", weights=other)
