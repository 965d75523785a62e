"""GE2E speaker encoder (Wan et al., ICASSP 2018) on Resemblyzer's pretrained weights: a 256-d voice embedding.

Pipeline: load_audio -> float32 mono 16 kHz -> speech(): volume raised to -30 dBFS, silences cut by webrtcvad,
at least 2 s of speech or TooLittleSpeechError ("speak longer") -> 40-band mel power spectrogram (25 ms Hann
window, 10 ms hop, Slaney mel scale, as librosa's melspectrogram) -> 1.6 s partials, 1.3 a second, the last
kept when 75 % covered -> 3-layer LSTM(40 -> 256) -> last hidden state -> linear 256 -> ReLU -> L2 -> mean over
the partials -> L2. This is Resemblyzer 0.1.4's preprocess_wav + VoiceEncoder.embed_utterance, written again.

Why not Resemblyzer's own code: it imports librosa (with numba and llvmlite, about 230 MB) for loading,
resampling and the mel filterbank, and requires the `webrtcvad` sdist, which needs a compiler and whose import
fails without pkg_resources (gone from the setuptools torch brings). Only the weight file of its wheel is read,
with the pinned sha256 below; the wheel is installed without its dependencies, and VAD comes from
webrtcvad-wheels (the same module, built). Embeddings match Resemblyzer's own to cosine >= 0.999 on real
speech (docs/voice.md).

The LSTM runs on a thread of its own with one torch intra-op thread: on a busy 2-core machine two threads
made one call take from 90 ms to 3.5 s. torch's thread count is per thread (OpenMP), but set_num_threads also
sets the default that threads starting later take, so that default is put back as soon as the encoder's
thread is pinned: no other code's thread count changes.
"""

from __future__ import annotations

import importlib.util
import math
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from .audio import MIN_SPEECH_SECONDS, SAMPLE_RATE, load_audio, speech
from .base import Availability, Encoder, EncoderInfo, l2_normalise
from .errors import InvalidInputError, ModelUnavailableError
from .quality import QUALITIES
from .weights import locate

WEIGHTS = "pkg:resemblyzer/pretrained.pt"
WEIGHTS_SHA256 = "39373b86598fa3da9fcddee6142382efe09777e8d37dc9c0561f41f0070f134e"  # Resemblyzer 0.1.4's
INSTALL = "pip install --no-deps resemblyzer==0.1.4"  # its weights only: its code and librosa are not used

# Resemblyzer's hparams.py
MEL_BANDS = 40
WINDOW = SAMPLE_RATE * 25 // 1000  # 400 samples: the FFT size too
HOP = SAMPLE_RATE * 10 // 1000  # 160 samples
PARTIAL_FRAMES = 160  # 1.6 s
PARTIAL_RATE = 1.3  # partials a second
MIN_COVERAGE = 0.75  # the last partial is kept when this much of it is speech
HIDDEN = 256
LAYERS = 3

# Seconds of speech a capture must hold, per quality bar (modalities.quality.QUALITIES).
SPEECH_BARS = {"probe": MIN_SPEECH_SECONDS, "enrol": MIN_SPEECH_SECONDS}


class GE2EVoiceEncoder(Encoder):
    """Voice encoder: Resemblyzer's GE2E LSTM on 16 kHz speech; CPU, one torch thread, thread-safe."""

    info = EncoderInfo(
        name="voice-ge2e",
        kind="voice",
        dim=256,
        default_threshold=0.85,
        step_up_threshold=0.88,
        threshold_source=(
            "FMR 1 % on real speech (benchmarks/voice.py: 9 city-council speakers, 3-clip templates, whole-clip "
            "probes): impostor cosine 0.68 on average, 99th percentile 0.856, max 0.90 (voices are never far "
            "apart: impostors score near 0.6-0.7, not 0); genuine 0.91; EER 2.7 % at 0.837. Shorter probes score "
            "lower (2 s: EER 4.8 % at 0.755): calibrate on enrolments of the length you capture"
        ),
        weights=WEIGHTS,
        license=(
            "Apache-2.0 (Resemblyzer 0.1.4, Resemble AI; the Real-Time-Voice-Cloning speaker encoder). "
            "Trained on LibriSpeech and VoxCeleb1/2 (about 8,400 speakers), as its author states"
        ),
        description=(
            "GE2E 3-layer LSTM speaker encoder on 40-band mel spectrograms of the voiced part of a WAV, FLAC, "
            "OGG or MP3 recording (webrtcvad); refuses less than 2 s of speech. A soft biometric: replayed or cloned "
            "speech is not detected"
        ),
    )

    def __init__(self, weights: str | Path | None = None) -> None:
        """Load the LSTM (about 0.1 s) from the installed resemblyzer wheel, or from `weights`, a copy of
        its pretrained.pt (checked against the pinned sha256 either way)."""
        try:
            import torch
            import webrtcvad  # noqa: F401  (speech() imports it on every call: fail here, not on the first probe)
        except ImportError as exc:
            raise ModelUnavailableError(f"{exc.name} is not installed: pip install -r requirements.txt") from exc
        path = locate(str(weights) if weights is not None else WEIGHTS, sha256=WEIGHTS_SHA256, by_name=False)
        if path is None:
            raise ModelUnavailableError(f"no weight file at {weights}" if weights is not None else
                                        f"the voice encoder's weights are not installed: {INSTALL} "
                                        "(or pass weights= a copy of its resemblyzer/pretrained.pt)")
        state = torch.load(path, map_location="cpu", weights_only=True)["model_state"]
        self._lstm = torch.nn.LSTM(MEL_BANDS, HIDDEN, LAYERS, batch_first=True)
        self._linear = torch.nn.Linear(HIDDEN, HIDDEN)
        self._lstm.load_state_dict({k.removeprefix("lstm."): v for k, v in state.items() if k.startswith("lstm.")})
        self._linear.load_state_dict({k.removeprefix("linear."): v for k, v in state.items()
                                      if k.startswith("linear.")})
        self._lstm.eval()
        self._linear.eval()
        self._mel = mel_filters()
        self._window = np.hanning(WINDOW + 1)[:-1].astype(np.float32)  # periodic Hann, as librosa's
        self.weights_path = path
        self._torch = torch
        self._worker = _one_thread_worker(torch)
        weakref.finalize(self, self._worker.shutdown, wait=False)

    @classmethod
    def availability(cls) -> Availability:
        """Ready when torch and webrtcvad are installed and resemblyzer's weight file is (none imported)."""
        for module, package in (("torch", "torch"), ("webrtcvad", "webrtcvad-wheels")):
            if importlib.util.find_spec(module) is None:
                return Availability(cls.info.name, False, f"{module} is not installed: pip install {package}",
                                    WEIGHTS)
        try:
            path = locate(WEIGHTS, sha256=WEIGHTS_SHA256, by_name=False)
        except ModelUnavailableError as exc:
            return Availability(cls.info.name, False, str(exc), WEIGHTS)
        if path is None:
            return Availability(cls.info.name, False, f"resemblyzer's weights are not installed: {INSTALL}", WEIGHTS)
        return Availability(cls.info.name, True, f"GE2E weights found at {path}", WEIGHTS)

    def encode(self, audio: Any) -> np.ndarray:
        """Embed one recording of one speaker (WAV, FLAC, OGG or MP3 path or bytes, or `(sample_rate, samples)`);
        TooLittleSpeechError under 2 s of speech, WrongModalityError for an image."""
        return self.capture(audio, "probe")

    def capture(self, audio: Any, quality: str = "probe") -> np.ndarray:
        """Embed a recording holding at least SPEECH_BARS[quality] seconds of speech ("speak longer" otherwise)."""
        if quality not in SPEECH_BARS:
            raise InvalidInputError(f"capture quality must be one of {QUALITIES}, got {quality!r}")
        return self.embed_speech(speech(load_audio(audio), SPEECH_BARS[quality]))

    def embed_speech(self, wav: np.ndarray) -> np.ndarray:
        """The embedding of 16 kHz speech already cut by speech(): the mean of its partials' embeddings."""
        mel_slices, length = partial_slices(wav.size)
        wav = np.pad(wav, (0, max(0, length - wav.size)))
        frames = self.mel_spectrogram(wav)
        partials = np.stack([frames[s] for s in mel_slices])
        return l2_normalise(self._worker.submit(self._forward, partials).result().mean(axis=0))

    def mel_spectrogram(self, wav: np.ndarray) -> np.ndarray:
        """(frames, 40) mel power spectrogram, as librosa.feature.melspectrogram(center=True, pad_mode="constant")."""
        padded = np.pad(wav.astype(np.float32), WINDOW // 2)
        frames = np.lib.stride_tricks.sliding_window_view(padded, WINDOW)[::HOP]
        power = np.abs(np.fft.rfft(frames * self._window, axis=1)) ** 2
        return (power.astype(np.float32) @ self._mel.T).astype(np.float32)

    def _forward(self, partials: np.ndarray) -> np.ndarray:
        """L2-normalised embeddings of (n, 160, 40) mel partials; runs on the encoder's one-thread worker."""
        torch = self._torch
        with torch.inference_mode():
            _, (hidden, _) = self._lstm(torch.from_numpy(partials))
            raw = torch.relu(self._linear(hidden[-1]))
            return torch.nn.functional.normalize(raw, dim=1).numpy()

    def worker_threads(self) -> int:
        """The torch intra-op thread count the encoder's LSTM runs with (1)."""
        return self._worker.submit(self._torch.get_num_threads).result()


def _one_thread_worker(torch: Any) -> ThreadPoolExecutor:
    """A one-thread executor whose thread runs torch with one intra-op thread; the default that threads
    starting later take (which set_num_threads also sets) is put back to what it was."""
    default = torch.get_num_threads()
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="voice-ge2e", initializer=_pin, initargs=(torch,))
    worker.submit(int).result()  # the thread exists and is pinned
    torch.set_num_threads(default)
    return worker


def _pin(torch: Any) -> None:
    """Give this thread one torch intra-op thread. A thread's count is read from the default on its first torch
    call, so that read happens first: later changes of the default leave this thread's count alone."""
    torch.get_num_threads()
    torch.set_num_threads(1)


def partial_slices(n_samples: int) -> tuple[list[slice], int]:
    """(mel frame slices of the 1.6 s partials, samples the waveform is zero-padded to), as Resemblyzer's
    compute_partial_slices(rate=1.3, min_coverage=0.75): at least one partial, however short the speech."""
    n_frames = math.ceil((n_samples + 1) / HOP)
    step = round(SAMPLE_RATE / PARTIAL_RATE / HOP)
    starts = list(range(0, max(1, n_frames - PARTIAL_FRAMES + step + 1), step))
    coverage = (n_samples - starts[-1] * HOP) / (PARTIAL_FRAMES * HOP)
    if coverage < MIN_COVERAGE and len(starts) > 1:
        starts.pop()
    return [slice(s, s + PARTIAL_FRAMES) for s in starts], (starts[-1] + PARTIAL_FRAMES) * HOP


def mel_filters(bands: int = MEL_BANDS, n_fft: int = WINDOW, rate: int = SAMPLE_RATE) -> np.ndarray:
    """(bands, n_fft // 2 + 1) Slaney-scale, Slaney-normalised triangular filters from 0 Hz to Nyquist, as
    librosa.filters.mel(htk=False, norm="slaney")."""
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(rate / 2), bands + 2))
    bins = np.fft.rfftfreq(n_fft, 1.0 / rate)
    ramps = edges[:, None] - bins[None, :]
    widths = np.diff(edges)
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    filters = np.maximum(0.0, np.minimum(rising, falling))
    return (filters * (2.0 / (edges[2:] - edges[:-2]))[:, None]).astype(np.float32)


_F_SP = 200.0 / 3  # Hz per mel below 1 kHz (Slaney's Auditory Toolbox)
_LOG_STEP = math.log(6.4) / 27.0  # mels are logarithmic from 1 kHz (15 mel) on


def _hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    return np.where(hz >= 1000.0, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / _LOG_STEP, hz / _F_SP)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    return np.where(mel >= 15.0, 1000.0 * np.exp(_LOG_STEP * (mel - 15.0)), mel * _F_SP)
