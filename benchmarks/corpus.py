"""The synthetic corpus of the search benchmarks (retrieval, peers, pg_server's bulk load): people enrolled with
templates of one shape, genuine and strangers' probes of them, and notes with random unit-norm text vectors,
written into the engine's SQLite store and kept in memory for the exact references."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

import modalities
from benchmarks.common import log
from biomem.engine.memory import DEFAULT_ENCODER
from biomem.stores.sqlite import Store

MODALITY = "face-dlib"  # the 128-d shape the ladder measured in earlier runs; the ingest part's owner
TEXT_DIM = 384
BIO_DIM = 128
DEFAULT_DIM = modalities.info(DEFAULT_ENCODER).dim  # the default encoder's templates (face-arcface-s: 512)
DEFAULT_SHAPE = f"5x{DEFAULT_DIM}"  # CAPTURESxDIM of a rung that names none: several captures per person
K = 10


# ---- vectors ----------------------------------------------------------------------------------

def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    rows = rng.standard_normal((n, dim), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def noisy_copy(rng: np.random.Generator, template: np.ndarray, cosine: float) -> np.ndarray:
    """A unit vector at exactly `cosine` from `template`: a second capture of the same person."""
    noise = rng.standard_normal(template.shape[0]).astype(np.float32)
    noise -= (noise @ template) * template
    noise /= np.linalg.norm(noise)
    return (cosine * template + np.sqrt(1.0 - cosine ** 2) * noise).astype(np.float32)


# ---- the people: templates and probes of one shape ---------------------------------------------

@dataclass(frozen=True)
class Shape:
    """What the gate scans per identity: `captures` enrolled templates of `dim` dimensions ("CAPTURESxDIM").

    128-d is face-dlib's shape as the ladder measured it in earlier runs: one isotropic random template per
    identity, probes at cosine 0.97-0.995 to it, strangers isotropic too. The default encoder's dimension gets
    the calibrated model (ScoreModel): people, captures and probes whose cosines follow the default encoder's
    genuine and impostor scores on the offline sample faces."""

    captures: int
    dim: int

    @classmethod
    def parse(cls, text: str) -> Shape:
        captures, _, dim = text.strip().lower().partition("x")
        try:
            shape = cls(int(captures), int(dim))
        except ValueError:
            raise SystemExit(f"bad shape {text!r}: CAPTURESxDIM, e.g. {DEFAULT_SHAPE}") from None
        if shape.dim not in (BIO_DIM, DEFAULT_DIM) or shape.captures < 1 or (shape.legacy and shape.captures != 1):
            raise SystemExit(f"bad shape {text!r}: 1x{BIO_DIM} ({MODALITY}, as in earlier runs) or "
                             f"Cx{DEFAULT_DIM} ({DEFAULT_ENCODER}, C >= 1 captures per identity)")
        return shape

    @property
    def legacy(self) -> bool:
        return self.dim == BIO_DIM

    @property
    def modality(self) -> str:
        return MODALITY if self.legacy else DEFAULT_ENCODER

    def __str__(self) -> str:
        return f"{self.captures}x{self.dim}"


class ScoreModel:
    """Synthetic face embeddings whose cosines follow a calibration's genuine and impostor scores.

    A person is a unit vector p = c·m + √(1−c²)·u: m a direction every face shares, u uniform on the unit
    sphere of a random `rank`-dimensional subspace orthogonal to m. An enrolled capture is t = a·p + √(1−a²)·n,
    n a random unit vector orthogonal to p: captures of one person are clustered around p and score about a²
    with each other, captures of two people about a²·(c² + (1−c²)·u·u'). a is √ of the genuine scores' median;
    c and the rank are fitted so that the mean a²c² and the spread a²(1−c²)/√rank of the latter are the impostor
    scores' mean and standard deviation. A genuine probe of person j at target score s is b·p_j + √(1−b²)·r with
    b = s/a (at most 1) and r a random unit vector orthogonal to p_j and to j's captures, so it scores exactly
    a·b with every capture of j: s, or a for the targets above a. An impostor probe is a capture of a stranger
    drawn like the enrolled people."""

    def __init__(self, genuine: np.ndarray, impostor: np.ndarray, dim: int, seed: int) -> None:
        self.genuine = np.sort(np.asarray(genuine, dtype=np.float64))
        self.impostor = np.asarray(impostor, dtype=np.float64)
        self.dim = dim
        self.capture = a = float(np.sqrt(np.median(self.genuine)))
        mean, spread = float(self.impostor.mean()), float(self.impostor.std())
        c2 = float(np.clip(mean / a ** 2, 0.0, 0.99))
        self.shared = float(np.sqrt(c2))
        self.rank = int(np.clip(round((a ** 2 * (1 - c2) / spread) ** 2), 2, dim - 1))
        basis, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, self.rank + 1)))
        self.mean_face = basis[:, 0].astype(np.float32)
        self.basis = basis[:, 1:].T.astype(np.float32)  # rank x dim

    def people(self, rng: np.random.Generator, n: int) -> np.ndarray:
        u = unit_rows(rng, n, self.rank) @ self.basis
        return (self.shared * self.mean_face + np.sqrt(1 - self.shared ** 2) * u).astype(np.float32)

    def captures(self, rng: np.random.Generator, people: np.ndarray, k: int) -> np.ndarray:
        """k captures of each person, rows grouped by person ((len(people) * k) x dim)."""
        out = np.empty((len(people) * k, self.dim), dtype=np.float32)
        step = 10_000
        for start in range(0, len(people), step):
            p = np.repeat(people[start:start + step], k, axis=0)
            noise = rng.standard_normal(p.shape, dtype=np.float32)
            noise -= np.sum(noise * p, axis=1, keepdims=True) * p
            noise /= np.linalg.norm(noise, axis=1, keepdims=True)
            out[start * k:start * k + len(p)] = self.capture * p + np.sqrt(1 - self.capture ** 2) * noise
        return out

    def probe(self, rng: np.random.Generator, person: np.ndarray, captures: np.ndarray, score: float) -> np.ndarray:
        b = min(1.0, score / self.capture)
        span, _ = np.linalg.qr(np.vstack([person, captures]).T.astype(np.float64))
        r = rng.standard_normal(self.dim)
        r -= span @ (span.T @ r)
        r /= np.linalg.norm(r)
        return (b * person + np.sqrt(1 - b * b) * r).astype(np.float32)

    def stranger(self, rng: np.random.Generator) -> np.ndarray:
        return self.captures(rng, self.people(rng, 1), 1)[0]

    def as_dict(self) -> dict[str, Any]:
        return {"capture_cosine_a": self.capture, "shared_c": self.shared, "rank": self.rank,
                "expected_genuine_between_captures": self.capture ** 2,
                "expected_impostor_mean": self.capture ** 2 * self.shared ** 2,
                "expected_impostor_sd": self.capture ** 2 * (1 - self.shared ** 2) / np.sqrt(self.rank),
                "targets_capped_at_a": float(np.mean(self.genuine > self.capture))}


class Enrolled:
    """Templates by identity: [j] and [j:k] are identities j..k-1's template rows, what Store.add_identity takes
    (pg_server.bulk_load reads data.templates[j:j + 1])."""

    def __init__(self, rows: np.ndarray, captures: int) -> None:
        self.rows, self.captures = rows, captures

    def __len__(self) -> int:
        return len(self.rows) // self.captures

    def __getitem__(self, key: int | slice) -> np.ndarray:
        if not isinstance(key, slice):
            key = slice(int(key), int(key) + 1)
        start, stop, _ = key.indices(len(self))
        return self.rows[start * self.captures:stop * self.captures]


class Gallery:
    """The enrolled people of a rung, of one shape: their templates, genuine probes of them and strangers'
    probes, and the exact scan's decision for any probe."""

    def __init__(self, shape: Shape, n_ids: int, rng: np.random.Generator, model: ScoreModel | None) -> None:
        self.shape, self.n_ids, self.model = shape, n_ids, model
        if shape.legacy:
            self.people = self.rows = unit_rows(rng, n_ids, shape.dim)
        else:
            if model is None:
                raise ValueError(f"shape {shape} needs the calibrated score model")
            self.people = model.people(rng, n_ids)
            self.rows = model.captures(rng, self.people, shape.captures)
        self.templates = Enrolled(self.rows, shape.captures)

    def targets(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Target scores of `n` genuine probes: uniform 0.97-0.995 (128-d), else drawn from the genuine scores."""
        if self.shape.legacy:
            return rng.uniform(0.97, 0.995, size=n)  # genuine dlib captures score >= 0.97 (DESIGN)
        assert self.model is not None
        return rng.choice(self.model.genuine, size=n)

    def genuine(self, rng: np.random.Generator, j: int, score: float | None = None) -> np.ndarray:
        """A probe of identity j at `score` (None: a typical genuine score) to its templates."""
        if self.shape.legacy:
            return noisy_copy(rng, self.rows[j], 0.98 if score is None else score)
        assert self.model is not None
        return self.model.probe(rng, self.people[j], self.templates[j],
                                float(np.median(self.model.genuine)) if score is None else score)

    def impostor(self, rng: np.random.Generator) -> np.ndarray:
        """A probe of somebody not enrolled."""
        if self.shape.legacy:
            return unit_rows(rng, 1, self.shape.dim)[0]
        assert self.model is not None
        return self.model.stranger(rng)

    def best_scores(self, probes: np.ndarray) -> np.ndarray:
        """Each probe's best cosine with each identity's templates (probes x identities), numpy, exact."""
        c = self.shape.captures
        out = np.empty((len(probes), self.n_ids), dtype=np.float32)
        step = max(1, 200_000 // c)
        for start in range(0, self.n_ids, step):
            block = self.rows[start * c:(start + step) * c] @ probes.T
            out[:, start:start + step] = block.reshape(-1, c, len(probes)).max(axis=1).T
        return out

    def pair_scores(self, rng: np.random.Generator, probes: np.ndarray, sample: int = 100) -> np.ndarray:
        """Cosines of each probe with every template of `sample` random identities (pairs, as a calibration counts
        them)."""
        ids = rng.choice(self.n_ids, size=min(sample, self.n_ids), replace=False)
        rows = np.concatenate([self.templates[int(j)] for j in ids])
        return (probes @ rows.T).ravel()


def exact_decisions(best: np.ndarray, tau: float, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """The exact scan's decision under policy "best" for each row of `best` (Gallery.best_scores): the admitted
    identity's index (-1: nobody) and whether the probe was ambiguous (the best clears τ, a runner-up clears τ too
    or comes within δ of it)."""
    if best.shape[1] == 0:
        return np.full(len(best), -1), np.zeros(len(best), dtype=bool)
    top = np.argmax(best, axis=1)
    first = best[np.arange(len(best)), top].astype(np.float64)
    runner = np.partition(best, -2, axis=1)[:, -2].astype(np.float64) if best.shape[1] > 1 \
        else np.full(len(best), -np.inf)
    cleared = first >= tau
    ambiguous = cleared & (runner >= np.minimum(tau, first - margin))
    return np.where(cleared & ~ambiguous, top, -1), ambiguous


def score_summary(scores: np.ndarray) -> dict[str, float]:
    a = np.asarray(scores, dtype=np.float64)
    q = np.percentile(a, [0, 1, 5, 50, 95, 99, 100])
    return {"n": int(a.size), "mean": float(a.mean()), "sd": float(a.std()),
            **{f"p{p}": float(v) for p, v in zip((0, 1, 5, 50, 95, 99, 100), q)}}


def calibration_scores(encoder: str) -> dict[str, Any]:
    """The default encoder's genuine and impostor scores on the offline sample faces (calibrate_samples)."""
    from biomem.identity.calibrate import calibrate_samples

    t0 = time.perf_counter()
    report = calibrate_samples(encoder)
    log(f"calibration scores of {encoder}: {report.genuine} genuine, {report.impostor} impostor "
        f"({report.data_dir}) in {time.perf_counter() - t0:.0f} s")
    return {"encoder": encoder, "data": report.data_dir, "seconds": time.perf_counter() - t0,
            "intersection_tau": report.intersection.tau,
            "genuine_scores": report.genuine_scores.tolist(), "impostor_scores": report.impostor_scores.tolist(),
            "genuine": score_summary(report.genuine_scores), "impostor": score_summary(report.impostor_scores)}


# ---- the notes ------------------------------------------------------------------------------

class Batched:
    """One store transaction per `every` notes (the store's own calls join it as nested transactions): a bulk
    load without a commit per call, and without one transaction the size of the store."""

    def __init__(self, store: Any, every: int = 100_000) -> None:
        self.store, self.every, self.count = store, every, 0

    def __enter__(self) -> Batched:
        self.tx = self.store.transaction()
        self.tx.__enter__()
        return self

    def added(self, notes: int) -> None:
        """Count `notes` more; commit and begin the next transaction past `every`."""
        self.count += notes
        if self.count >= self.every:
            self.tx.__exit__(None, None, None)
            self.tx = self.store.transaction()
            self.tx.__enter__()
            self.count = 0

    def __exit__(self, *exc: Any) -> None:
        self.tx.__exit__(*exc)


class SyntheticStore:
    """A store of `n_notes` random notes spread evenly over `n_ids` identities enrolled with templates of
    `shape`, plus the in-memory copies the baseline and the brute-force reference need."""

    def __init__(self, path: Path, n_notes: int, n_ids: int, seed: int, shape: Shape,
                 model: ScoreModel | None = None) -> None:
        self.path = path
        self.n_notes, self.n_ids = n_notes, n_ids
        rng = np.random.default_rng(seed)
        counts = np.full(n_ids, n_notes // n_ids, dtype=np.int64)
        counts[: n_notes % n_ids] += 1
        self.starts = np.r_[0, np.cumsum(counts)[:-1]]
        self.counts = counts
        self.gallery = Gallery(shape, n_ids, rng, model)
        self.templates = self.gallery.templates
        self.embeddings = np.empty((n_notes, TEXT_DIM), dtype=np.float32)  # e_i, rows by owner
        self.note_ids = np.empty(n_notes, dtype=np.int64)
        self.owner_ids = np.empty(n_ids, dtype=np.int64)

        t0 = time.perf_counter()
        start = datetime(2023, 1, 1)
        self.stamps = [(start + timedelta(minutes=k)).isoformat() for k in range(int(counts.max()))]
        store = Store(path)
        with Batched(store) as batch:
            for j in range(n_ids):
                s, c = int(self.starts[j]), int(counts[j])
                vectors = unit_rows(rng, c, TEXT_DIM)
                self.embeddings[s:s + c] = vectors
                identity = store.add_identity(f"person-{j:05d}", shape.modality, self.templates[j])
                self.owner_ids[j] = identity.id
                ids, _ = store.insert_notes(identity.id, self.notes_for(j), vectors)
                self.note_ids[s:s + c] = ids
                batch.added(c)
        store.close()
        self.build_s = time.perf_counter() - t0
        # b_i of the paper: the biometric embedding of the capture a note was written with, one of its owner's
        # templates (N x dim; with several captures, note k of an owner carries capture k mod captures)
        per = shape.captures
        within = np.arange(n_notes) - np.repeat(self.starts, counts)
        self.note_biometrics = self.gallery.rows[np.repeat(np.arange(n_ids) * per, counts) + within % per]

    def notes_for(self, j: int) -> list[dict[str, Any]]:
        """The note fields of identity j's notes, oldest first (what insert_notes is given)."""
        return [{"content": f"Synthetic memory {k} of person {j}: benchmark filler text.",
                 "timestamp": self.stamps[k],
                 "keywords": ["synthetic", "benchmark", "memory"],
                 "tags": ["test", "filler", "note"],
                 "context": "A synthetic note for the retrieval benchmark."}
                for k in range(int(self.counts[j]))]

    def owner_slice(self, j: int) -> slice:
        return slice(int(self.starts[j]), int(self.starts[j] + self.counts[j]))

    def exact_top(self, j: int, query: np.ndarray, k: int, note_ids: np.ndarray | None = None) -> set[int]:
        """Brute-force top-k note ids within owner j's notes (ids of this store, or `note_ids`: another
        store's ids of the same rows)."""
        sl = self.owner_slice(j)
        scores = self.embeddings[sl] @ query
        top = np.argsort(-scores, kind="stable")[:k]
        return set((self.note_ids if note_ids is None else note_ids)[sl][top].tolist())

    def baseline_search(self, probe: np.ndarray, query: np.ndarray, tau: float, k: int) -> list[int]:
        """Paper-faithful: N biometric cosines, pool = cos >= tau, exact top-k in the pool."""
        bio = self.note_biometrics @ probe
        pool = np.flatnonzero(bio >= tau)  # row order = time order within each owner
        if pool.size == 0:
            return []
        scores = self.embeddings[pool] @ query
        kk = min(k, pool.size)
        top = np.argpartition(-scores, kk - 1)[:kk] if kk < pool.size else np.arange(pool.size)
        top = top[np.argsort(-scores[top], kind="stable")]
        return self.note_ids[pool[top]].tolist()
