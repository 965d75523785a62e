"""Synthetic face templates for the gate's proof test and benchmarks/gate.py: a gallery shaped like face
embeddings (SyntheticFaces) and the part of a store the gate reads, held in arrays (ArrayTemplates)."""

from __future__ import annotations

import numpy as np


class SyntheticFaces:
    """Templates shaped like face embeddings, for the proof test and benchmarks/gate.py: identity centres spread
    with a common direction and a low-rank part (impostor cosine 0.025 ± 0.085, face-arcface-s's sample faces:
    0.027 ± 0.084), captures of one person clustered around its centre (genuine cosine mostly 0.6-1.0)."""

    def __init__(self, dim: int = 512, seed: int = 0, rank: int = 64, common: float = 0.0285,
                 low_rank: float = 0.697) -> None:
        self.rng = np.random.default_rng(seed)
        self.dim = dim
        self.rank = min(rank, dim)
        self.axis = _unit(self.rng.standard_normal(dim))
        self.basis = np.linalg.qr(self.rng.standard_normal((dim, self.rank)))[0].astype(np.float32)
        self.weights = np.sqrt(common), np.sqrt(low_rank), np.sqrt(max(1.0 - common - low_rank, 0.0))

    def centres(self, n: int) -> np.ndarray:
        """n new identities' centres."""
        low = self.rng.standard_normal((n, self.rank), dtype=np.float32) / np.sqrt(self.rank)
        rest = self.rng.standard_normal((n, self.dim), dtype=np.float32) / np.sqrt(self.dim)
        a, b, c = self.weights
        return _unit(a * self.axis + b * low @ self.basis.T + c * rest)

    def captures(self, centres: np.ndarray) -> np.ndarray:
        """One capture of each centre: most close (cosine ~0.97 between two), some poorer (~0.65-0.8)."""
        n = len(centres)
        spread = np.where(self.rng.random(n) < 0.85, self.rng.uniform(0.01, 0.05, n), self.rng.uniform(0.4, 0.9, n))
        noise = self.rng.standard_normal((n, self.dim), dtype=np.float32) / np.sqrt(self.dim)
        return _unit(centres + np.sqrt(spread).astype(np.float32)[:, None] * noise)

    def gallery(self, people: int, captures: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(identity ids 1.., grouped and sorted, their templates, the centres): `captures` per person."""
        centres = self.centres(people)
        templates = np.stack([self.captures(centres) for _ in range(captures)], axis=1).reshape(-1, self.dim)
        return np.repeat(np.arange(1, people + 1), captures), templates, centres


class ArrayTemplates:
    """The part of a store the gate reads, held in arrays (a SyntheticFaces gallery): templates grouped by
    identity and a version that enrolment moves, for the proof test and benchmarks/gate.py."""

    def __init__(self, ids: np.ndarray, matrix: np.ndarray, modality: str = "face-synthetic") -> None:
        self.ids, self.matrix, self.modality, self.version = ids, matrix, modality, 1

    def templates_version(self) -> str:
        return str(self.version)

    def templates(self, modality: str) -> tuple[np.ndarray, np.ndarray]:
        return self.ids, self.matrix

    def modalities(self) -> list[str]:
        return [self.modality]

    def enrol(self, identity: int, templates: np.ndarray) -> None:
        """Add `templates` under `identity`, keeping the rows grouped by identity as a store returns them."""
        ids = np.r_[self.ids, np.full(len(templates), identity)]
        order = np.argsort(ids, kind="stable")
        self.ids, self.matrix = ids[order], np.concatenate([self.matrix, templates])[order]
        self.version += 1

    def forget(self, identity: int) -> None:
        keep = self.ids != identity
        self.ids, self.matrix = self.ids[keep], self.matrix[keep]
        self.version += 1


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)
