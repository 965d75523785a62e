"""The biometric gate: which identities' notes may enter retrieval for this probe.

The paper's indicator is M_bio(m_i) = 1[cos(b_t, b_i) >= τ] per note, where b_i is the
owner's biometric embedding. Every note of one owner shares that owner's templates, so we
compare the probe with the U templates, not the N notes, and admit whole partitions.
With several templates per owner, b_i is the set and the score is the best template.

The ambiguity rule (policy "best"): when the best identity clears τ but another identity (the runner-up)
also clears τ or comes within the margin δ of the best, the gate cannot tell who is asking and admits
nobody (`GateResult.ambiguous`): a look-alike relative or a morph of two enrolled people is nobody's.

Three ways to the same decision (`Gate.decide`): the exact scan of every template, and from CANDIDATE_CELLS
template cells on, the candidate path (biomem.identity.candidates): an hnswlib index's nearest templates, every
template of their identities scored exactly, and the decision made on those scores, taken only for a strong
match, where nothing below τ can change it or what the caller reads (see `Gate._candidates`); otherwise the
same scan read through an int8 copy with a certified bound (biomem.identity.screen: only the rows that may
reach the level are scored in float32), made off the request path; until it is made the float32 scan answers.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidInputError, ModalityMismatchError
from ..stores import IdentityStore
from ..vocabulary import FUSIONS, POLICIES
from .candidates import CANDIDATE_CELLS, HINT, K_REST, STRONG, WIDEN, CandidateIndexes, K, Templates

# δ per encoder until a calibrated one is stored (Biometrics.margin), by `calibrate_samples` (docs/gate-calibration.md):
# face-arcface-s: τ 0.4291 minus the runner-up score 99% of its genuine probes stay under (0.247), rounded down;
# face-arcface shares its recogniser family, uncalibrated (no weights offline). face-dlib: 0.0198 at its
# intersection τ 0.9706 (0 at the default τ 0.95, where runner-ups clear τ: the τ half of the rule decides);
# palm-compcode: 0 at both τ (runner-ups reach 0.40); both keep DEFAULT_MARGIN as a guard against hairline wins.
# voice-ge2e: 0 at τ 0.827 (FMR 1 %, speakerbox clips, clip against clip: runner-ups already fall below τ).
DEFAULT_MARGINS = {"face-arcface-s": 0.18, "face-arcface": 0.18, "face-dlib": 0.02, "palm-compcode": 0.02,
                   "voice-ge2e": 0.02}
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
    """The gate's decision for one probe.

    `identity_ids` and `best_scores` hold every enrolled identity scoring at or above `floor`, each with its
    exact best cosine (the exact scan's, bit for bit), and may leave out identities below it: the exact scan
    lists everyone (floor -inf); a decision of the candidate path lists the identities it scored, complete from
    `floor` (τ, or -inf when the index returned every template) up. `scores` and `score_of` read these lists.
    """

    identity: int | None  # the admitted owner (policy "best"), None when nobody matched
    admitted: list[int]  # every admitted owner (one at most under "best")
    identity_ids: np.ndarray  # enrolled identities of this modality (every one scoring at least `floor`) ...
    best_scores: np.ndarray  # ... and the probe's exact best cosine with each
    threshold: float
    modality: str
    policy: str = "best"
    labels: dict[int, str] = field(default_factory=dict)
    fusion: str | None = None  # how several modalities were combined, None for one
    components: list[GateResult] = field(default_factory=list)  # the per-modality decisions
    margin: float = 0.0  # δ: a runner-up this close to the best makes the probe ambiguous (policy "best")
    ambiguous: bool = False  # the best cleared τ but a runner-up was too close: nobody admitted
    floor: float = -math.inf  # every identity scoring at or above this is listed (-inf: every enrolled identity)

    @property
    def matched(self) -> bool:
        return bool(self.admitted)

    @property
    def scores(self) -> dict[int, float]:
        """Best cosine per listed identity (built on demand: 10,000 identities cost ms); every enrolled
        identity when `floor` is -inf, else those the candidate path scored (all of them down to `floor`)."""
        return {int(i): float(s) for i, s in zip(self.identity_ids, self.best_scores)}

    def score_of(self, identity: int) -> float:
        """The probe's best cosine with one identity, without building `scores` for every enrolled identity:
        0.0 when it has no template here; -inf when the result is partial (`floor` above -inf) and does not list
        it, since it then scored below `floor`, lower than anything the result answers for."""
        hits = np.flatnonzero(self.identity_ids == identity)
        if hits.size:
            return float(self.best_scores[hits[0]])
        return 0.0 if self.floor == -math.inf else -math.inf

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
    if above.size == 0:
        return [], False
    above = above[np.argsort(-scores[above], kind="stable")]
    if policy == "all":
        return ids[above].tolist(), False
    best = scores[above[0]]
    # the second largest score (the best's twin when two tie): every score but the best's, at most
    runner_up = np.partition(scores, len(scores) - 2)[len(scores) - 2] if len(scores) > 1 else -np.inf
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
    if any(r.floor > -math.inf for r in results):
        raise InvalidInputError("fusion reads every identity's score in every modality: decide each part with "
                                "the exact scan (Gate.decide without a floor)")
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
    """Template snapshots per modality, cached and reloaded when enrolment changes, and the candidate index over
    each (biomem.identity.candidates), refreshed on a background thread unless `background` is False."""

    def __init__(self, store: IdentityStore, *, background: bool = True) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._cache: dict[str, Templates] = {}
        self._modalities: tuple[str, list[str]] | None = None
        self.candidates = CandidateIndexes(background=background)
        self.paths: Counter[str] = Counter()  # how decisions were made: "candidates", or "scan: <why>"

    def _templates(self, modality: str) -> Templates:
        version = self.store.templates_version()
        with self._lock:
            cached = self._cache.get(modality)
            if cached is None or cached.version != version:
                fresh = Templates.load(version, *self.store.templates(modality))
                if cached is not None:
                    fresh.carry_screen(cached)
                cached = self._cache[modality] = fresh
        return cached

    def modalities(self) -> list[str]:
        """Modalities with at least one enrolled template (cached per enrolment version)."""
        version = self.store.templates_version()
        with self._lock:
            if self._modalities is None or self._modalities[0] != version:
                self._modalities = (version, self.store.modalities())
            return self._modalities[1]

    def _snapshot(self, probe: Probe) -> Templates:
        """The probe's modality's templates; ModalityMismatchError when the probe has another dimension."""
        templates = self._templates(probe.modality)
        if templates.rows and templates.dim != probe.embedding.shape[0]:
            raise ModalityMismatchError(
                f"probe has {probe.embedding.shape[0]} dimensions but {probe.modality!r} "
                f"templates have {templates.dim}: the probe was made by another encoder")
        return templates

    def scores(self, probe: Probe) -> tuple[np.ndarray, np.ndarray]:
        """(identity ids, best cosine of the probe with each identity's templates): the exact scan."""
        templates = self._snapshot(probe)
        return templates.owners, templates.best(probe.embedding)

    def decide(self, probe: Probe, threshold: float, policy: str = "best", margin: float = 0.0,
               floor: float | None = None) -> GateResult:
        """Admit the best identity at or above τ unless a runner-up is within `margin` δ of it or clears
        τ too ("best"), or every identity at or above τ ("all").

        floor: the lowest score the caller reads of a result that admits nobody (the attempt limiter's
        near-miss band, τ when it reads nothing), or None when it reads every identity's score of any result
        (the exact scan: fusion, the demo disclosure). With a floor, a store of CANDIDATE_CELLS template cells
        or more is decided by the candidate path (`_candidates`) when it can: it admits as the exact scan does
        and its result is complete from τ up (`GateResult.floor`); else through the int8 screen (`_screened`)
        once it is made (off the request path: the exact scan answers until then): the exact scan's decision, its
        result complete from min(floor, τ) (or lower) up. A caller that un-admits a
        candidate result (the attempt limiter's guard) and then reads below τ decides again without a floor
        (Biometrics.identify).
        """
        templates = self._snapshot(probe)
        if floor is None:
            self.paths["scan: every score"] += 1
        elif templates.rows * templates.dim < CANDIDATE_CELLS:
            self.candidates.drop(probe.modality)
            self.paths["scan: small"] += 1
        else:
            found = self._candidates(probe, templates, threshold, policy, margin)
            if found is not None:
                return found
            if templates.screened:
                return self._screened(probe, templates, threshold, policy, margin, floor)
            self.paths["scan: screen not ready"] += 1
        return self._result(probe, templates.owners, templates.best(probe.embedding), threshold, policy, margin)

    def _screened(self, probe: Probe, templates: Templates, threshold: float, policy: str, margin: float,
                  floor: float) -> GateResult:
        """The exact scan's decision, read through the int8 screen (biomem.identity.screen): every identity
        scoring at or above the level, with its exact score, and no other. The level is the floor (τ when the
        floor is higher): lower when someone reaches τ and the rule reads lower, a runner-up within δ of a best at
        τ (τ − δ, policy "best"); so the decision is the scan's and the result is complete from the level up
        (`GateResult.floor`)."""
        level = min(floor, threshold)
        lower = min(level, threshold - margin) if policy == "best" else level
        groups, best, level = templates.above(probe.embedding, level, threshold, lower)
        self.paths["screen"] += 1
        return self._result(probe, templates.owners[groups], best, threshold, policy, margin, floor=level)

    @staticmethod
    def _result(probe: Probe, ids: np.ndarray, best: np.ndarray, threshold: float, policy: str, margin: float,
                floor: float = -math.inf) -> GateResult:
        admitted, ambiguous = _admit(ids, best, threshold, policy, margin)
        return GateResult(identity=admitted[0] if admitted else None, admitted=admitted,
                          identity_ids=ids, best_scores=best, threshold=threshold, modality=probe.modality,
                          policy=policy, margin=margin, ambiguous=ambiguous, floor=floor)

    def _candidates(self, probe: Probe, templates: Templates, threshold: float, policy: str,
                    margin: float) -> GateResult | None:
        """An admission by the candidate index, or None for the exact scan.

        An hnswlib search finds reliably what is near the probe, not a lone template scoring about τ away from
        everything else the probe resembles (biomem.identity.candidates). So the candidate path only admits,
        and only a strong match: the best identity clears τ by δ and by STRONG, so the decision reads nothing
        below τ. It asks for the K templates nearest the probe (K × WIDEN once when the K-th still scores τ or
        more; it declines unscored when hnswlib's own product with the nearest is HINT below the strong level),
        and for the K_REST nearest the probe's part orthogonal to its best template (a second person blended
        into the probe is near that part); every template of each identity they name is scored exactly and
        the decision is made on those scores. When it admits, the result lists every identity it found, all
        at or above τ among them (floor τ). A probe that matches nobody, only weakly, or ambiguously is left to
        the screen, so every refusal, and every score a refusal's reader reads, is the exact scan's.
        """
        index = self.candidates.get(probe.modality, templates)
        if index is None:
            self.paths["scan: index not ready"] += 1
            return None
        vector, strong = probe.embedding, threshold + max(margin, STRONG)
        for k in (K, K * WIDEN):
            hits = index.nearest(vector, k, templates)
            if hits is None:
                self.paths["scan: index busy"] += 1
                return None
            returned, hint = hits
            everything = len(returned) == templates.rows
            if hint < strong - HINT and not everything:  # a stranger's probe, mostly: declined before any scoring
                self.paths["scan: no strong match"] += 1
                return None
            groups = np.unique(templates.group[returned])
            rows, sims, best = templates.score(groups, vector)
            if everything:
                self.paths["candidates"] += 1
                return self._result(probe, templates.owners[groups], best, threshold, policy, margin)
            if float(best.max()) < strong:
                self.paths["scan: no strong match"] += 1
                return None
            if float(sims[np.searchsorted(rows, returned)].min()) < threshold:  # the k-th neighbour is below τ
                break
        else:
            self.paths["scan: more than K × WIDEN templates above τ"] += 1
            return None
        nearest = templates.matrix[rows[np.argmax(sims)]]
        rest = vector - np.float32(vector @ nearest) * nearest
        norm = float(np.linalg.norm(rest))
        if norm > 1e-6:
            hits = index.nearest(rest / np.float32(norm), K_REST, templates)
            if hits is None:
                self.paths["scan: index busy"] += 1
                return None
            found = np.unique(templates.group[hits[0]])
            more = found[groups[np.minimum(np.searchsorted(groups, found), len(groups) - 1)] != found]
            if len(more):  # identities only the second query found, scored as the first's were
                groups = np.concatenate([groups, more])
                best = np.concatenate([best, templates.score(more, vector)[2]])
                order = np.argsort(groups)
                groups, best = groups[order], best[order]
        result = self._result(probe, templates.owners[groups], best, threshold, policy, margin, floor=threshold)
        if not result.matched:  # a refusal lists whom it found, not all at or above τ: the scan lists them
            self.paths["scan: nobody admitted"] += 1
            return None
        self.paths["candidates"] += 1
        return result
