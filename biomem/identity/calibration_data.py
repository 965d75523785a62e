"""A labelled image set for calibration, read and scored: identity folders or a pairs file (the
formats are biomem.identity.calibrate's), each image encoded once, genuine and impostor pair cosines."""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

import numpy as np
from PIL import Image

import modalities

from ..errors import InvalidInputError

log = logging.getLogger(__name__)

PAIR_CHUNK = 1 << 22  # floats gathered at once when scoring pairs (16 MB)


AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".opus", ".mp3")  # the recordings a voice encoder reads (modalities.audio)


def identity_folders(root: Path, kind: str = "face") -> dict[str, list[str]]:
    """{identity: capture paths relative to root} for every non-hidden sub-folder, sorted for reproducibility: images,
    or recordings for an encoder of `kind` "voice"."""
    suffixes = AUDIO_SUFFIXES if kind == "voice" else Image.registered_extensions()
    folders = {d.name: sorted(f"{d.name}/{f.name}" for f in d.iterdir()
                              if f.is_file() and f.suffix.lower() in suffixes and not f.name.startswith("."))
               for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith(".")}
    if not any(folders.values()):
        raise InvalidInputError(f"{root} holds no identity folders with captures (expected DIR/<identity>/<files>)")
    return folders


def read_pairs(path: Path) -> list[tuple[str, str, bool]]:
    """(path_a, path_b, same identity) per line of a pairs file: `path_a path_b 1|0`, `#` comments."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"cannot read the pairs file {path}: {exc}") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            parts = shlex.split(line, comments=True)
        except ValueError as exc:
            raise InvalidInputError(f"{path}:{number}: {exc}") from None
        if not parts:
            continue
        if len(parts) != 3 or parts[2] not in ("0", "1"):
            raise InvalidInputError(f"{path}:{number}: expected `path_a path_b 1|0`, got {line.strip()!r}")
        rows.append((parts[0], parts[1], parts[2] == "1"))
    if not rows:
        raise InvalidInputError(f"the pairs file {path} lists no pairs")
    return rows


def encode_all(encoder: modalities.Encoder, root: Path, paths: list[str]) -> tuple[dict[str, np.ndarray],
                                                                                   dict[str, str]]:
    """Embed each image once; images the encoder refuses are recorded with the reason, not fatal."""
    vectors: dict[str, np.ndarray] = {}
    refused: dict[str, str] = {}
    for done, path in enumerate(paths, 1):
        try:
            vectors[path] = encoder.encode(str(root / path))
        except InvalidInputError as exc:
            refused[path] = f"{type(exc).__name__}: {exc}"
        if done % 500 == 0:
            log.info("encoded %d/%d images (%d refused)", done, len(paths), len(refused))
    return vectors, refused


def stack_vectors(vectors: dict[str, np.ndarray], root: Path) -> np.ndarray:
    """The embeddings as one float32 matrix, rows in insertion order."""
    if not vectors:
        raise InvalidInputError(f"the encoder refused every image under {root}: nothing to calibrate on")
    return np.stack(list(vectors.values())).astype(np.float32, copy=False)


def genuine_scores(matrix: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Cosines of every same-identity pair: the upper triangle of each identity's Gram block."""
    starts = np.cumsum([0, *sizes[:-1]])
    return np.concatenate([(matrix[s:s + n] @ matrix[s:s + n].T)[np.triu_indices(n, 1)]
                           for s, n in zip(starts, sizes)])


def impostor_scores(matrix: np.ndarray, sizes: list[int], cap: int | None,
                     rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Cosines of all cross-identity pairs, or of a uniform sample of `cap` distinct ones; and their total.

    Rows are grouped by identity, so the pairs (a, b) with b in a later identity than a are numbered
    0..total-1 in order of a; a sampled number maps back to its pair without listing the others.
    """
    ends = np.repeat(np.cumsum(sizes), sizes)  # one past the last row of each row's identity
    offsets = np.concatenate([[0], np.cumsum(len(matrix) - ends)])
    total = int(offsets[-1])
    if cap is None or total <= cap:
        numbers = np.arange(total)
    else:
        numbers = np.sort(rng.choice(total, size=cap, replace=False))
    first = np.searchsorted(offsets, numbers, side="right") - 1
    return pair_cosines(matrix, first, ends[first] + numbers - offsets[first]), total


def pair_cosines(matrix: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise dot products of matrix[a] and matrix[b] (unit vectors: cosines), in bounded chunks."""
    out = np.empty(len(a), dtype=np.float64)
    step = max(1, PAIR_CHUNK // matrix.shape[1])
    for start in range(0, len(a), step):
        rows = slice(start, start + step)
        out[rows] = np.einsum("ij,ij->i", matrix[a[rows]], matrix[b[rows]])
    return out
