"""Enrolment integrity: one person, one identity, and nobody's captures under another name.

Checked in the engine, so the UI, the CLI and the API all get the same rules:
- every pair of samples in one enrolment must match at τ (one person per enrolment);
- a new enrolment must match nobody already enrolled (never says whom);
- captures added to an identity must match its templates of that modality at τ (when it
  has some) and must match no other identity at τ or better than their own.
"""

from __future__ import annotations

import numpy as np

from .errors import AlreadyEnrolledError, EnrolmentError, InconsistentSamplesError
from .gate import Gate, Probe


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


def check_not_enrolled(gate: Gate, probes: list[Probe], tau: float) -> None:
    """No sample may match an enrolled identity at τ."""
    for probe in probes:
        _, best = gate.scores(probe)
        if len(best) and float(best.max()) >= tau:
            raise AlreadyEnrolledError("this person is already enrolled: nobody new was enrolled "
                                       "(use your existing identity)")


def check_captures_fit(gate: Gate, identity_id: int, probes: list[Probe], tau: float, *,
                       has_templates: bool) -> None:
    """Added captures must be the identity's own and nobody else's."""
    for probe in probes:
        ids, best = gate.scores(probe)
        own = float(best[ids == identity_id].max()) if np.any(ids == identity_id) else None
        others = best[ids != identity_id]
        rival = float(others.max()) if len(others) else -np.inf
        if has_templates and (own is None or own < tau):
            raise EnrolmentError("these captures do not match your enrolled templates: nothing was added")
        if rival >= tau or (own is not None and rival >= own):
            raise AlreadyEnrolledError("these captures match someone else enrolled: nothing was added")
