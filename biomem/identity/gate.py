"""The biometric gate: which identities' notes may enter retrieval for this probe.

The paper's indicator is M_bio(m_i) = 1[cos(b_t, b_i) >= τ] per note, where b_i is the
owner's biometric embedding. Every note of one owner shares that owner's templates, so we
compare the probe with the U templates, not the N notes, and admit whole partitions.
With several templates per owner, b_i is the set and the score is the best template.

The ambiguity rule (policy "best"): when the best identity clears τ but another identity (the runner-up)
also clears τ or comes within the margin δ of the best, the gate cannot tell who is asking and admits
nobody (`GateResult.ambiguous`): a look-alike relative or a morph of two enrolled people is nobody's.
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

# δ per encoder until a calibrated one is stored (Biometrics.margin), from `calibrate_samples` (docs/gate.md):
# face-arcface-s: τ 0.4291 minus the runner-up score 99% of its genuine probes stay under (0.247), rounded down;
# face-arcface shares its recogniser family, uncalibrated (no weights offline). face-dlib: 0.0198 at its
# intersection τ 0.9706 (0 at the default τ 0.95, where runner-ups clear τ: the τ half of the rule decides);
# palm-compcode: 0 at both τ (runner-ups reach 0.40); both keep DEFAULT_MARGIN as a guard against hairline wins.
DEFAULT_MARGINS = {"face-arcface-s": 0.18, "face-arcface": 0.18, "face-dlib": 0.02, "palm-compcode": 0.02}
DEFAULT_MARGIN = 0.02  # other encoders (palm-ccnet: no weights here), uncalibrated: calibrate for a real δ

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
    margin: float = 0.0  # δ: a runner-up this close to the best makes the probe ambiguous (policy "best")
    ambiguous: bool = False  # the best cleared τ but a runner-up was too close: nobody admitted

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
                "modality": self.modality, "policy": self.policy,
                "margin": self.margin, "ambiguous": self.ambiguous}
        if self.fusion:
            data["fusion"] = self.fusion
            data["components"] = [c.as_dict() for c in self.components]
        return data


def _admit(ids: np.ndarray, scores: np.ndarray, threshold: float, policy: str,
           margin: float = 0.0) -> tuple[list[int], bool]:
    """(admitted identities, ambiguous): under "best" the top identity at or above τ, unless a runner-up
    clears τ too or scores within `margin` of it (then nobody, ambiguous); under "all" everyone at or above τ."""
    if policy not in POLICIES:
        raise InvalidInputError(f"gate policy must be one of {POLICIES}, got {policy!r}")
    if margin < 0 or not np.isfinite(margin):
        raise InvalidInputError(f"the ambiguity margin δ must be a finite number >= 0, got {margin}")
    above = np.flatnonzero(scores >= threshold)
    above = above[np.argsort(-scores[above], kind="stable")]
    if policy == "all" or above.size == 0:
        return [int(ids[i]) for i in above], False
    best = scores[above[0]]
    runner_up = np.max(np.delete(scores, above[0]), initial=-np.inf)
    if runner_up >= min(threshold, best - margin):
        return [], True
    return [int(ids[above[0]])], False


def fuse(results: list[GateResult], fusion: str = "all", policy: str = "best") -> GateResult:
    """Combine per-modality decisions through each identity's margins s_m - τ_m.

    "all": every given modality must match (min margin >= 0); "any": one suffices (max
    margin); "sum": the summed margins must be >= 0. An identity with no template of a
    given modality has margin -inf there. The fused result's scores are the fused margins
    and its threshold is 0. The ambiguity rule runs on the fused margins with the per-modality
    δ_m combined the same way (min, max or sum): a runner-up whose fused margin is >= 0 or within
    that δ of the best's makes the probe ambiguous.
    """
    if fusion not in FUSIONS:
        raise InvalidInputError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
    ids = np.unique(np.concatenate([r.identity_ids for r in results])).astype(np.int64)
    margins = np.full((len(results), len(ids)), -np.inf, dtype=np.float64)
    for row, result in zip(margins, results):
        row[np.searchsorted(ids, result.identity_ids)] = result.best_scores - result.threshold
    combine = {"all": np.min, "any": np.max, "sum": np.sum}[fusion]
    fused = combine(margins, axis=0) if len(ids) else np.zeros(0)
    margin = float(combine([r.margin for r in results]))
    admitted, ambiguous = _admit(ids, fused, 0.0, policy, margin)
    return GateResult(identity=admitted[0] if admitted else None, admitted=admitted,
                      identity_ids=ids, best_scores=fused, threshold=0.0,
                      modality="+".join(r.modality for r in results), policy=policy,
                      fusion=fusion, components=results, margin=margin, ambiguous=ambiguous)


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

    def decide(self, probe: Probe, threshold: float, policy: str = "best", margin: float = 0.0) -> GateResult:
        """Admit the best identity at or above τ unless a runner-up is within `margin` δ of it or clears
        τ too ("best"), or every identity at or above τ ("all")."""
        ids, best = self.scores(probe)
        admitted, ambiguous = _admit(ids, best, threshold, policy, margin)
        return GateResult(identity=admitted[0] if admitted else None, admitted=admitted,
                          identity_ids=ids, best_scores=best, threshold=threshold,
                          modality=probe.modality, policy=policy, margin=margin, ambiguous=ambiguous)
