"""The biometric gate: which identities' notes may enter retrieval for this probe.

The paper's indicator is M_bio(m_i) = 1[cos(b_t, b_i) >= τ] per note, where b_i is the
owner's biometric embedding. Every note of one owner shares that owner's templates, so we
compare the probe with the U templates, not the N notes, and admit whole partitions.
With several templates per owner, b_i is the set and the score is the best template.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidInputError, ModalityMismatchError
from ..stores import MemoryStore
from ..stores.blas import one_thread
from ..vocabulary import FUSIONS, POLICIES


@dataclass(frozen=True)
class Probe:
    """A precomputed biometric embedding of the live requester and the encoder that made it."""

    embedding: np.ndarray
    modality: str

    def __post_init__(self) -> None:
        vector = np.asarray(self.embedding, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(vector))
        if vector.size == 0 or not np.isfinite(norm) or norm == 0.0:
            raise InvalidInputError("a probe embedding must be a non-zero finite vector")
        object.__setattr__(self, "embedding", vector / norm)


@dataclass
class GateResult:
    """The gate's decision for one probe."""

    identity: int | None  # the admitted owner (policy "best"), None when nobody matched
    admitted: list[int]  # every admitted owner (one at most under "best")
    identity_ids: np.ndarray  # enrolled identities of this modality ...
    best_scores: np.ndarray  # ... and the probe's best cosine with each
    threshold: float
    modality: str
    policy: str = "best"
    labels: dict[int, str] = field(default_factory=dict)
    fusion: str | None = None  # how several modalities were combined, None for one
    components: list[GateResult] = field(default_factory=list)  # the per-modality decisions

    @property
    def matched(self) -> bool:
        return bool(self.admitted)

    @property
    def scores(self) -> dict[int, float]:
        """Best cosine per enrolled identity (built on demand: 10,000 identities cost ms)."""
        return {int(i): float(s) for i, s in zip(self.identity_ids, self.best_scores)}

    def score_of(self, identity: int) -> float:
        """The probe's best cosine with one identity (0.0 when it has no template here), without
        building `scores` for every enrolled identity."""
        hits = np.flatnonzero(self.identity_ids == identity)
        return float(self.best_scores[hits[0]]) if hits.size else 0.0

    def as_dict(self) -> dict[str, Any]:
        data = {"identity": self.identity,
                "label": self.labels.get(self.identity) if self.identity else None,
                "admitted": self.admitted, "scores": self.scores, "threshold": self.threshold,
                "modality": self.modality, "policy": self.policy}
        if self.fusion:
            data["fusion"] = self.fusion
            data["components"] = [c.as_dict() for c in self.components]
        return data


def _admit(ids: np.ndarray, scores: np.ndarray, threshold: float, policy: str) -> list[int]:
    if policy not in POLICIES:
        raise InvalidInputError(f"gate policy must be one of {POLICIES}, got {policy!r}")
    above = np.flatnonzero(scores >= threshold)
    above = above[np.argsort(-scores[above], kind="stable")]
    return [int(ids[i]) for i in (above[:1] if policy == "best" else above)]


def fuse(results: list[GateResult], fusion: str = "all", policy: str = "best") -> GateResult:
    """Combine per-modality decisions through each identity's margins s_m - τ_m.

    "all": every given modality must match (min margin >= 0); "any": one suffices (max
    margin); "sum": the summed margins must be >= 0. An identity with no template of a
    given modality has margin -inf there. The fused result's scores are the fused margins
    and its threshold is 0.
    """
    if fusion not in FUSIONS:
        raise InvalidInputError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
    ids = np.unique(np.concatenate([r.identity_ids for r in results])).astype(np.int64)
    margins = np.full((len(results), len(ids)), -np.inf, dtype=np.float64)
    for row, result in zip(margins, results):
        row[np.searchsorted(ids, result.identity_ids)] = result.best_scores - result.threshold
    combine = {"all": np.min, "any": np.max, "sum": np.sum}[fusion]
    fused = combine(margins, axis=0) if len(ids) else np.zeros(0)
    admitted = _admit(ids, fused, 0.0, policy)
    return GateResult(identity=admitted[0] if admitted else None, admitted=admitted,
                      identity_ids=ids, best_scores=fused, threshold=0.0,
                      modality="+".join(r.modality for r in results), policy=policy,
                      fusion=fusion, components=results)


class Gate:
    """Template matrices per modality, cached and reloaded when enrolment changes."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[str, np.ndarray, np.ndarray]] = {}
        self._modalities: tuple[str, list[str]] | None = None

    def _templates(self, modality: str) -> tuple[np.ndarray, np.ndarray]:
        version = self.store.templates_version()
        with self._lock:
            cached = self._cache.get(modality)
            if cached is None or cached[0] != version:
                ids, matrix = self.store.templates(modality)
                cached = (version, ids, matrix)
                self._cache[modality] = cached
        return cached[1], cached[2]

    def modalities(self) -> list[str]:
        """Modalities with at least one enrolled template (cached per enrolment version)."""
        version = self.store.templates_version()
        with self._lock:
            if self._modalities is None or self._modalities[0] != version:
                self._modalities = (version, self.store.modalities())
            return self._modalities[1]

    def scores(self, probe: Probe) -> tuple[np.ndarray, np.ndarray]:
        """(identity ids, best cosine of the probe with each identity's templates)."""
        ids, matrix = self._templates(probe.modality)
        if len(ids) == 0:
            return ids, np.zeros(0, dtype=np.float32)
        if matrix.shape[1] != probe.embedding.shape[0]:
            raise ModalityMismatchError(
                f"probe has {probe.embedding.shape[0]} dimensions but {probe.modality!r} "
                f"templates have {matrix.shape[1]}: the probe was made by another encoder")
        with one_thread():
            sims = matrix @ probe.embedding
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])  # templates sorted by identity
        return ids[starts], np.maximum.reduceat(sims, starts)

    def decide(self, probe: Probe, threshold: float, policy: str = "best") -> GateResult:
        """Admit the best identity at or above τ ("best"), or every such identity ("all")."""
        ids, best = self.scores(probe)
        admitted = _admit(ids, best, threshold, policy)
        return GateResult(identity=admitted[0] if admitted else None, admitted=admitted,
                          identity_ids=ids, best_scores=best, threshold=threshold,
                          modality=probe.modality, policy=policy)
