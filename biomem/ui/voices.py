"""Recordings on the page: the voice encoder's name, whether it loads here, and the speech meter an enrolment's
recordings show before the person presses Enrol.

A recording is one more kind of capture beside a face or palm: it arrives as a WAV file in Gradio's upload cache
(the browser turns a microphone recording into one), is read once and deleted like an image (biomem.ui.uploads),
and is encoded by `voice-ge2e` into a probe of its own, which the engine fuses with the face's by the store's rule.
"""

from __future__ import annotations

from typing import Any

import modalities
from modalities.audio import MIN_SPEECH_SECONDS, SAMPLE_RATE, load_audio, speech

from ..engine.messages import readable
from ..errors import BioMemError
from . import uploads

VOICE = "voice-ge2e"  # the encoder of every recording the page takes
RECORDINGS = 3  # the recordings an enrolment asks for, a few seconds of speech each: one template each


def voice_ready() -> bool:
    """Whether the voice encoder can load on this server (its weights installed); no weights are read."""
    return modalities.availability(VOICE).ready


def kind_of(modality: str) -> str | None:
    """The kind of a registered encoder ("face", "palm", "voice"), None for a modality nothing here encodes."""
    try:
        return modalities.info(modality).kind
    except Exception:  # noqa: BLE001 - an unknown modality, or a broken plugin, which must not break the page
        return None


def spoken(modality: str | None) -> bool:
    """Whether a gate decision's modality ("face-arcface-s+voice-ge2e", say) includes a recording."""
    return VOICE in (modality or "").split("+")


def speech_seconds(value: Any) -> float | None:
    """Seconds of speech in a recording still in its box (the encoder's own measure: silences cut by webrtcvad),
    None when the box holds no upload. The file is read, never deleted: the enrolment that takes it deletes it,
    or the box's watch does once it is replaced or abandoned."""
    path = uploads.upload_path(value)
    file = uploads.in_cache(path) if path else None
    if file is None:
        return None
    return speech(load_audio(file.read_bytes()), 0.0).size / SAMPLE_RATE


def meter(value: Any) -> str:
    """The line under an enrolment's recording: how much speech it holds against the 2 s it needs."""
    try:
        seconds = speech_seconds(value)
    except BioMemError as exc:
        title, message = readable(exc)
        return f"✗ {title}: {message}"
    except OSError:
        return "✗ The recording is no longer available: record it again."
    if seconds is None:
        return ""
    verdict = "✓" if seconds >= MIN_SPEECH_SECONDS else "✗ speak longer:"
    return f"{verdict} heard {seconds:.1f} s of speech (needs {MIN_SPEECH_SECONDS:.0f} s)"
