"""Turn whatever a caller hands a voice encoder into one float32 mono waveform at 16 kHz, and keep its speech.

Accepted: a WAV, FLAC, OGG (Vorbis or Opus) or MP3 recording, as a path or bytes, decoded by libsndfile (the
`soundfile` wheel bundles it): WAV as 8/16/24/32-bit PCM or float, any rate from 8 to 192 kHz, up to 8
channels; or `(sample_rate, samples)` as Gradio's `gr.Audio(type="numpy")` gives it. Integer samples are scaled
to [-1, 1) by their type's full scale (int16 by 1/32768, int32 by 1/2^31, uint8 around 128; libsndfile does the
same for the files), float samples are kept; channels are mixed to mono after scaling, then resampled to 16 kHz
(scipy's resample_poly). Either step done wrong moves the GE2E embedding to cosine 0.55 against the right one.
Files are recognised by their first bytes before libsndfile sees them, so that only these four formats reach it:
M4A, WebM, AMR and AIFF are refused by name (UnsupportedAudioFormatError: convert to one of the four), anything
else that is not a recording is InvalidAudioError, and an image is WrongModalityError.

`speech(wav)` is Resemblyzer's preprocessing, reproduced: raise the volume to -30 dBFS (never lower it), then
webrtcvad (mode 3, 30 ms windows, smoothed over 8, dilated by 6) keeps the voiced stretches with at most
~0.2 s of silence around them. Less than MIN_SPEECH_SECONDS of what it keeps is TooLittleSpeechError.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from .errors import (
    AudioTooLongError,
    InvalidAudioError,
    TooLittleSpeechError,
    UnsupportedAudioFormatError,
    WrongModalityError,
)

SAMPLE_RATE = 16_000  # Hz, what the GE2E encoder was trained on
MAX_SECONDS = 120.0  # the longest recording taken: a probe needs seconds, not minutes
MAX_FILE_BYTES = 32 * 1024 * 1024  # the largest file taken: 2 min of 48 kHz 24-bit stereo is 35 MB, of 16-bit 23 MB
MAX_CHANNELS = 8
MIN_RATE, MAX_RATE = 8_000, 192_000  # Hz: sample rates taken
MIN_SPEECH_SECONDS = 2.0  # seconds of speech left after the silences are cut: less is refused, "speak longer"
SPEAK_LONGER = "speak longer"  # the hint of TooLittleSpeechError

# Resemblyzer's hparams.py
NORM_DBFS = -30.0
VAD_WINDOW_MS = 30
VAD_SMOOTHING = 8  # windows averaged
VAD_MAX_SILENCE = 6  # windows of silence kept around speech
INT16_MAX = 2**15 - 1

# First bytes of the formats decoded (a WAV is RIFF....WAVE), and of those recognised only to be refused, by name.
_READ_MAGIC = {b"fLaC": "FLAC", b"OggS": "OGG", b"ID3": "MP3", b"\xff\xfb": "MP3", b"\xff\xf3": "MP3",
               b"\xff\xf2": "MP3"}
_REFUSED_MAGIC = {b"\x1a\x45\xdf\xa3": "WebM/Matroska", b"#!AMR": "AMR", b"FORM": "AIFF"}
_IMAGE_MAGIC = {b"\x89PNG": "PNG", b"\xff\xd8\xff": "JPEG", b"GIF8": "GIF", b"BM": "BMP", b"II*\x00": "TIFF",
                b"MM\x00*": "TIFF"}
FORMATS = "WAV, FLAC, OGG or MP3"
TAKEN = f"a {FORMATS} recording (path or bytes) or (sample_rate, samples)"
BLOCK_SECONDS = 1  # decoded a second at a time and mixed to mono, so that 8 channels never sit in memory at once


def load_audio(audio: Any) -> np.ndarray:
    """`audio` (WAV, FLAC, OGG or MP3 path or bytes, or `(sample_rate, samples)`) as float32 mono samples at
    SAMPLE_RATE."""
    if isinstance(audio, (str, Path)):
        return _decode(_read_file(Path(audio)))
    if isinstance(audio, (bytes, bytearray, memoryview)):
        return _decode(bytes(audio))
    if isinstance(audio, tuple) and len(audio) == 2 and isinstance(audio[1], np.ndarray):
        rate, samples = audio
        if not isinstance(rate, (int, np.integer)) or isinstance(rate, bool):
            raise InvalidAudioError(f"the sample rate must be an integer in Hz, got {rate!r}")
        return to_mono_16k(samples, int(rate))
    if (isinstance(audio, np.ndarray) and audio.ndim == 3) or type(audio).__module__.startswith("PIL."):
        raise WrongModalityError("this is an image: the voice encoder takes " + TAKEN)
    raise InvalidAudioError(f"cannot read {type(audio).__name__} as audio: give {TAKEN}")


def _read_file(path: Path) -> bytes:
    """The bytes of an audio file, refused before reading when it is larger than MAX_FILE_BYTES."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise AudioTooLongError(f"{path} is {size / 2**20:.0f} MB; the most taken is {MAX_FILE_BYTES >> 20} MB")
        return path.read_bytes()
    except OSError as exc:
        raise InvalidAudioError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _decode(data: bytes) -> np.ndarray:
    """A WAV, FLAC, OGG or MP3 file's bytes as float32 mono at SAMPLE_RATE; other formats refused by name."""
    if len(data) > MAX_FILE_BYTES:
        raise AudioTooLongError(f"the recording is {len(data) / 2**20:.0f} MB; the most taken is "
                                f"{MAX_FILE_BYTES >> 20} MB")
    name = _format_of(data[:16])
    import soundfile

    try:
        with soundfile.SoundFile(io.BytesIO(data)) as sound:
            rate, channels = sound.samplerate, sound.channels
            if not MIN_RATE <= rate <= MAX_RATE:
                raise InvalidAudioError(f"sample rate {rate} Hz is outside {MIN_RATE}-{MAX_RATE} Hz")
            if not 1 <= channels <= MAX_CHANNELS:
                raise InvalidAudioError(f"the recording has {channels} channels; the most taken is {MAX_CHANNELS}")
            most = int(MAX_SECONDS * rate)
            # Frame counts in headers can be wrong (MP3's are estimates): one frame past the limit is read, not more.
            blocks = [block.mean(axis=1) for block in sound.blocks(BLOCK_SECONDS * rate, dtype="float64",
                                                                   always_2d=True, frames=most + 1)]
    except InvalidAudioError:
        raise
    except (RuntimeError, ValueError, OSError, EOFError) as exc:  # libsndfile's and soundfile's words for a bad file
        raise InvalidAudioError(f"cannot decode the {name} recording: {exc}") from exc
    mono = np.concatenate(blocks) if blocks else np.zeros(0)
    if mono.size > most:
        raise AudioTooLongError(f"the recording lasts over {MAX_SECONDS:.0f} s, the most taken")
    return to_mono_16k(mono, rate)


def _format_of(head: bytes) -> str:
    """The name of the format decoded that `head` (a file's first 16 bytes) starts; refuses every other."""
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "WAV"
    for magic, name in _READ_MAGIC.items():
        if head.startswith(magic):
            return name
    for magic, name in _IMAGE_MAGIC.items():
        if head.startswith(magic):
            raise WrongModalityError(f"this is a {name} image: the voice encoder takes {TAKEN}")
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        raise WrongModalityError(f"this is a WebP image: the voice encoder takes {TAKEN}")
    for magic, name in _REFUSED_MAGIC.items():
        if head.startswith(magic):
            raise UnsupportedAudioFormatError(f"{name} recordings are not read here: convert it to {FORMATS}")
    if head[4:8] == b"ftyp":
        raise UnsupportedAudioFormatError(f"MP4/M4A recordings are not read here: convert it to {FORMATS}")
    raise InvalidAudioError(f"this is not a recording that is read here: the voice encoder takes {TAKEN}")


def to_mono_16k(samples: np.ndarray, rate: int) -> np.ndarray:
    """`samples` ((n,) or (n, channels); int scaled by full scale, float kept) at `rate` Hz as float32 mono
    at SAMPLE_RATE: scaled first, then mixed, then resampled."""
    samples = np.asarray(samples)
    if not MIN_RATE <= rate <= MAX_RATE:
        raise InvalidAudioError(f"sample rate {rate} Hz is outside {MIN_RATE}-{MAX_RATE} Hz")
    if samples.ndim == 3:
        raise WrongModalityError("this array is an image (height, width, colours): the voice encoder takes " + TAKEN)
    if samples.ndim not in (1, 2) or samples.size == 0:
        raise InvalidAudioError(f"samples must be (n,) or (n, channels) and not empty, got shape {samples.shape}")
    if samples.ndim == 2 and not 1 <= samples.shape[1] <= MAX_CHANNELS:
        raise InvalidAudioError(f"samples must be (n, channels) with at most {MAX_CHANNELS} channels, "
                                f"got shape {samples.shape}")
    if samples.shape[0] / rate > MAX_SECONDS:
        raise AudioTooLongError(f"the recording lasts {samples.shape[0] / rate:.0f} s; the most taken is "
                                f"{MAX_SECONDS:.0f} s")
    wav = _scaled(samples)
    if wav.ndim == 2:
        wav = wav.mean(axis=1)
    if rate != SAMPLE_RATE:
        from scipy.signal import resample_poly

        common = math.gcd(rate, SAMPLE_RATE)
        wav = resample_poly(wav, SAMPLE_RATE // common, rate // common)
    return np.ascontiguousarray(wav, dtype=np.float32)


def _scaled(samples: np.ndarray) -> np.ndarray:
    """Samples as float64 in [-1, 1] by their type's full scale; floats kept as they are."""
    kind, bits = samples.dtype.kind, samples.dtype.itemsize * 8
    if kind == "f":
        wav = samples.astype(np.float64)
        if not np.isfinite(wav).all():
            raise InvalidAudioError("the samples hold NaN or infinite values")
        return wav
    if kind == "i" and bits in (16, 32):
        return samples.astype(np.float64) / 2.0 ** (bits - 1)
    if kind == "u" and bits == 8:
        return (samples.astype(np.float64) - 128.0) / 128.0
    raise InvalidAudioError(f"samples of type {samples.dtype} are not taken: int16, int32, uint8 or float")


def speech(wav: np.ndarray, min_seconds: float = MIN_SPEECH_SECONDS) -> np.ndarray:
    """The voiced part of a 16 kHz recording, volume raised to NORM_DBFS: Resemblyzer's preprocess_wav.
    TooLittleSpeechError when less than `min_seconds` of it is left (silence leaves none)."""
    rms = float(np.sqrt(np.mean(np.square(wav, dtype=np.float64)))) if wav.size else 0.0
    voiced = trim_silences(normalise_volume(wav, rms)) if rms * INT16_MAX >= 1.0 else wav[:0]
    seconds = voiced.size / SAMPLE_RATE
    if seconds < min_seconds:
        raise TooLittleSpeechError(
            f"{seconds:.1f} s of speech heard (of {wav.size / SAMPLE_RATE:.1f} s recorded); at least "
            f"{min_seconds:.0f} s are needed: {SPEAK_LONGER}", SPEAK_LONGER, criterion="speech")
    return voiced


def normalise_volume(wav: np.ndarray, rms: float) -> np.ndarray:
    """`wav` raised to NORM_DBFS when quieter (never lowered), as Resemblyzer's normalize_volume(increase_only)."""
    change = NORM_DBFS - 20 * math.log10(rms)
    return wav * np.float32(10 ** (change / 20)) if change > 0 else wav


def trim_silences(wav: np.ndarray) -> np.ndarray:
    """Resemblyzer's trim_long_silences: webrtcvad per 30 ms window, smoothed, dilated; the windows kept."""
    import webrtcvad
    from scipy.ndimage import binary_dilation

    window = VAD_WINDOW_MS * SAMPLE_RATE // 1000
    wav = wav[: wav.size - wav.size % window]
    pcm = np.round(wav * INT16_MAX).astype(np.int16).tobytes()
    vad = webrtcvad.Vad(3)
    flags = np.array([vad.is_speech(pcm[start * 2:(start + window) * 2], SAMPLE_RATE)
                      for start in range(0, wav.size, window)], dtype=np.float64)
    padded = np.concatenate((np.zeros((VAD_SMOOTHING - 1) // 2), flags, np.zeros(VAD_SMOOTHING // 2)))
    sums = np.cumsum(padded)
    sums[VAD_SMOOTHING:] = sums[VAD_SMOOTHING:] - sums[:-VAD_SMOOTHING]
    mask = np.round(sums[VAD_SMOOTHING - 1:] / VAD_SMOOTHING).astype(bool)
    mask = binary_dilation(mask, np.ones(VAD_MAX_SILENCE + 1))
    return wav[np.repeat(mask, window)]
