"""Enrolment integrity: one person, one identity, and nobody's captures under another name.

Checked in the engine, so the UI, the CLI and the API all get the same rules:
- a label is 1 to MAX_LABEL_CHARS characters with no control or invisible format character, and shows something;
- no two people's labels look alike (biomem.stores.labels: scripts, widths and case aside), which the store checks;
- every pair of samples in one enrolment must match at τ (one person per enrolment);
- a new enrolment's captures must come within the margin δ of τ of nobody already enrolled (never says whom):
  the gate could never tell the two apart; an operator enrols a look-alike relative with captures of a second
  kind that come close to nobody, once every look-alike has that kind too (check_distinct);
- captures added to an identity must match its templates of that modality at τ (when it
  has some) and must match no other identity at τ or better than their own;
- a requester's captures (an enrolment with attempt-limit keys, captures added by probe) must match none
  of the reserved templates at τ: the demo's sample people (biomem.identity.samples), enrolled or not,
  whose captures the page hands to anyone, so they are nobody's own (SampleCaptureError). The operator
  in-process (the demo build, imports, the CLI) enrols whom it chooses, sample people as sample identities.

An enrolment a requester makes (one with attempt-limit keys) is a gated attempt: a refusal by
these checks, or by a taken label, is a miss for that client, and a face that already belongs
to someone costs FACE_TAKEN_MISSES. A requester is told one thing for a taken label and for an
enrolled face (EnrolmentRefusedError): which of the two collided would say whether that face,
or that name, is enrolled. The operator in-process and an admin get the precise error.

The store's size is bounded by its τ (1:N identification): a stranger's probe is compared with all
N enrolled people, so the false-positive identification rate is FPIR = 1 - (1 - FMR(τ))^N (≈ N × FMR).
FMR(τ) is the one a calibration stored with τ (biomem.identity.calibrate.save), credited no lower than
the rule-of-three floor 3/n of its n impostor scores. An enrolment that would take FPIR above the
operator's target (BIOMEM_TARGET_FPIR) is refused (EnrolmentLimitError) until τ is raised; a τ no
calibration stored (an encoder default, BIOMEM_TAU, a manual τ) has no known FMR and limits nothing:
stats say "uncalibrated".
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import modalities

from ..errors import (
    AlreadyEnrolledError,
    DuplicateLabelError,
    EnrolmentError,
    EnrolmentLimitError,
    EnrolmentRefusedError,
    InconsistentSamplesError,
    InvalidInputError,
    LookAlikeError,
    SampleCaptureError,
)
from ..stores.labels import label_key
from .gate import Gate, Probe

MAX_LABEL_CHARS = 100
# Unicode categories a label may not hold: controls, invisible format characters (bidirectional
# overrides and isolates, zero-width spaces and joiners, the BOM), line and paragraph separators,
# surrogates. Each makes a name display as something other than what it is.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
# Misses a requester's enrolment costs when a sample matches someone enrolled: enrolling as an
# existing person is an attack or a mistake, never a new person, so four such tries start a
# cool-down at the default 20 misses (a taken label or inconsistent samples cost one).
FACE_TAKEN_MISSES = 5
# What calibrate.save writes into a τ's source: "calibrate <rule>: ...; <g> genuine / <n> impostor scores...;
# FMR <x> FNMR <y>; <date>". Any other source (default, env, manual, an evaluation's) is uncalibrated.
CALIBRATED_SOURCE = re.compile(r"^calibrate \w+: .*?(\d+) impostor scores.*?; FMR (\S+) FNMR")
REFUSED = ("nobody new was enrolled: this name or these captures are already in use. Choose another name; "
           "if you are enrolled already, use your existing identity. A look-alike relative of someone enrolled "
           "is enrolled by an operator, with a capture of another kind (a palm) as well")
LOOK_ALIKE = ("nobody new was enrolled: this person is already enrolled, or looks too like someone enrolled (within "
              "the gate's margin) for the gate ever to tell the two apart by these captures. If you are enrolled, "
              "use your existing identity; an operator enrols a look-alike relative with captures of another kind "
              "too (a palm) that match nobody")


def check_label(label: object) -> str:
    """The label stripped; InvalidInputError for a blank, too long, hidden-character or invisible label."""
    if not isinstance(label, str) or not label.strip():
        raise InvalidInputError("an identity needs a non-empty label")
    label = label.strip()
    if len(label) > MAX_LABEL_CHARS:
        raise InvalidInputError(f"a name has at most {MAX_LABEL_CHARS} characters, this one has {len(label)}")
    hidden = next((c for c in label if unicodedata.category(c) in HIDDEN_CATEGORIES), None)
    if hidden is not None:
        name = unicodedata.name(hidden, "a control character")
        raise InvalidInputError(f"a name cannot hold control or invisible formatting characters (it holds "
                                f"U+{ord(hidden):04X} {name}): they make a name display as something else")
    if not label_key(label):
        raise InvalidInputError("a name needs a visible letter or digit: this one shows nothing")
    return label


def refusal(error: EnrolmentError, *, precise: bool) -> EnrolmentError:
    """What a refused enrolment tells its caller: `error` itself when `precise` (the operator, an
    admin, or a refusal that depends only on the samples), else the one EnrolmentRefusedError a taken
    label and an enrolled face share."""
    if precise or not isinstance(error, (AlreadyEnrolledError, DuplicateLabelError)):
        return error
    return EnrolmentRefusedError(REFUSED)


def check_one_person(probes: list[Probe], tau: float) -> None:
    """Every pair of samples must score at or above τ."""
    if len(probes) < 2:
        return
    matrix = np.stack([p.embedding for p in probes])
    sims = matrix @ matrix.T
    worst = float(sims[np.triu_indices(len(probes), k=1)].min())
    if worst < tau:
        raise InconsistentSamplesError(
            "these samples do not all show the same person: enrol one person at a time, "
            "with clear captures of that person only")


@dataclass(frozen=True)
class Closeness:
    """Where one modality's captures of a newcomer fall among the enrolled: who is within the margin."""

    modality: str
    near: frozenset[int]  # identities some capture scores at least τ − δ with: the gate could confuse them
    taken: bool  # some capture clears τ against one of them


def closeness(gate: Gate, probes: list[Probe], tau: float, margin: float) -> Closeness:
    """The identities the captures come within δ of τ of (the exact scan): once enrolled beside one of them,
    the newcomer's own probes of this modality would be ambiguous, theirs too."""
    near: set[int] = set()
    taken = False
    for probe in probes:
        ids, best = gate.scores(probe)
        near.update(int(i) for i in ids[best >= tau - margin])
        taken = taken or bool(len(best) and float(best.max()) >= tau)
    return Closeness(probes[0].modality, frozenset(near), taken)


def check_distinct(close: list[Closeness], modalities_of: Callable[[int], Sequence[str]], *, operator: bool) -> None:
    """A newcomer must be told apart from everyone enrolled: AlreadyEnrolledError when a capture clears τ against
    someone, LookAlikeError (its kind) when captures only come within δ of τ, both with the same advice.

    Captures within δ of τ of nobody pass. Captures close to someone (an enrolled person, or a look-alike relative)
    pass only for an `operator` (the operator in-process, an admin) and only when the enrolment also brings
    a modality whose captures are close to nobody, and every one they are close to has templates of such a
    modality: a probe of both kinds then admits exactly the right one of them (fusion "all"), while a probe of
    the close kind alone admits neither. A requester never can, so nobody can push an enrolled person into
    needing a second kind of capture.
    """
    lookalikes = frozenset().union(*(c.near for c in close))
    if not lookalikes:
        return
    clear = {c.modality for c in close if not c.near}
    if not operator or not clear:
        raise (AlreadyEnrolledError if any(c.taken for c in close) else LookAlikeError)(LOOK_ALIKE)
    lacking = sorted(i for i in lookalikes if not clear & set(modalities_of(i)))
    if lacking:
        raise LookAlikeError(
            f"nobody new was enrolled: identit{'y' if len(lacking) == 1 else 'ies'} "
            f"{', '.join(map(str, lacking))} within the gate's margin of these captures "
            f"{'has' if len(lacking) == 1 else 'have'} no {' or '.join(sorted(clear))} templates, so the gate could "
            "not tell them apart: add such captures to them first, then enrol this person again")


class Reserved:
    """Templates no requester may enrol, per modality: the captures `captures` gives for an encoder kind (the demo's
    sample people's), encoded once, at the first requester's enrolment of that modality, and kept."""

    def __init__(self, captures: Callable[[str], Sequence[Any]]) -> None:
        self.captures = captures
        self._templates: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()  # one encoding per modality, however many enrolments wait for it

    def templates(self, encoder: modalities.Encoder) -> np.ndarray:
        """The reserved unit vectors of `encoder`'s modality, one row each (no rows when its kind has none)."""
        with self._lock:
            if encoder.name not in self._templates:
                self._templates[encoder.name] = self._encode(encoder)
            return self._templates[encoder.name]

    def _encode(self, encoder: modalities.Encoder) -> np.ndarray:
        vectors = []
        for capture in self.captures(encoder.info.kind):
            try:
                vectors.append(np.asarray(encoder.encode(capture), dtype=np.float32))
            except InvalidInputError:  # a detector misses a few augmented captures, as it would a badly framed shot
                continue
        matrix = np.stack(vectors) if vectors else np.zeros((0, encoder.info.dim), dtype=np.float32)
        return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


def check_not_reserved(probes: list[Probe], reserved: np.ndarray, tau: float, kind: str) -> None:
    """No sample may match a reserved template (a sample person's, of an encoder of `kind`) at τ."""
    for probe in probes:
        if len(reserved) and float((reserved @ probe.embedding).max()) >= tau:
            raise SampleCaptureError(f"this is one of the demo's sample people: sample {kind}s cannot be enrolled")


def check_captures_fit(gate: Gate, identity_id: int, probes: list[Probe], tau: float, margin: float, *,
                       has_templates: bool) -> None:
    """Added captures must be the identity's own and nobody else's: none within δ of τ of another identity, whose
    own probes it would make ambiguous (what check_distinct asks of an enrolment)."""
    for probe in probes:
        ids, best = gate.scores(probe)
        own = float(best[ids == identity_id].max()) if np.any(ids == identity_id) else None
        others = best[ids != identity_id]
        rival = float(others.max()) if len(others) else -np.inf
        if has_templates and (own is None or own < tau):
            raise EnrolmentError("these captures do not match your enrolled templates: nothing was added")
        if rival >= tau or (own is not None and rival >= own):
            raise AlreadyEnrolledError("these captures match someone else enrolled: nothing was added")
        if rival >= tau - margin:
            raise LookAlikeError("these captures come within the gate's margin of someone else enrolled, whose own "
                                 "probes they would make ambiguous: nothing was added")


def rule_of_three(impostors: int) -> float:
    """The lowest FMR `impostors` comparisons can support: none of them false-matching bounds FMR < 3/n at 95%."""
    return 3.0 / impostors


def fpir(fmr: float, enrolled: int) -> float:
    """Expected false-positive identification rate: the chance a stranger clears τ against at least one of
    `enrolled` people, each at `fmr` independently (1 - (1 - FMR)^N, ≈ N × FMR while that is small)."""
    return -math.expm1(enrolled * math.log1p(-fmr)) if fmr < 1.0 else float(enrolled > 0)


def max_enrolled(fmr: float, target: float) -> int | None:
    """The most people whose FPIR stays at or under `target` at this `fmr` (None: no bound, FMR 0)."""
    if fmr <= 0.0:
        return None
    if fmr >= 1.0:
        return 0
    limit = math.floor(math.log1p(-target) / math.log1p(-fmr))  # the division can round one off either way
    if fpir(fmr, limit + 1) <= target:
        return limit + 1
    return limit if fpir(fmr, limit) <= target else limit - 1


def calibrated_fmr(source: str | None) -> float | None:
    """FMR(τ) from a stored τ's source, if a calibration stored it: the measured FMR, never below the
    rule-of-three floor 3/n of its impostor scores; None for a τ no calibration stored."""
    found = CALIBRATED_SOURCE.search(source or "")
    if found is None or int(found.group(1)) == 0:
        return None
    return max(float(found.group(2)), rule_of_three(int(found.group(1))))


def identification_risk(tau: float, source: str | None, enrolled: int, target: float) -> dict[str, Any]:
    """What a τ guards: N enrolled, τ, its calibrated FMR, the FPIR at N and the largest N under `target`
    (fmr, fpir and max_enrolled None, status "uncalibrated", when no calibration stored this τ)."""
    fmr = calibrated_fmr(source)
    return {"enrolled": enrolled, "tau": tau, "status": "uncalibrated" if fmr is None else "calibrated",
            "fmr": fmr, "fpir": None if fmr is None else fpir(fmr, enrolled),
            "max_enrolled": None if fmr is None else max_enrolled(fmr, target), "target_fpir": target}


def check_room(enrolled: int, tau: float, source: str | None, target: float) -> None:
    """One more person must keep the FPIR at τ within `target` (EnrolmentLimitError); uncalibrated τ: allowed."""
    risk = identification_risk(tau, source, enrolled + 1, target)
    if risk["max_enrolled"] is not None and enrolled + 1 > risk["max_enrolled"]:
        raise EnrolmentLimitError(
            f"nobody new was enrolled: at τ {tau:.4f} (calibrated FMR {risk['fmr']:.1e}) this store guards at most "
            f"{risk['max_enrolled']} people at the target false-positive identification rate {target:.2%}; one more "
            f"would make a stranger's chance to be taken for someone {risk['fpir']:.2%}")
