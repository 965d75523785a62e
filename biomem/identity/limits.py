"""Attempt limits that tell strangers from attackers (docs/gate-limits.md).

A client is counted by its address ("address:<ip>"), or by its other keys (session, API key) when it has none:
an API key shared by several devices never lets misses at one address lock out another.
A probe that matches nobody counts as a miss towards the client's pace (`misses` per `window`, 20 a minute)
and its daily budget against bulk guessing, floor(risk / (N × FMR(τ))) misses (AttemptLimits.budget_for), with
the FMR a calibration stored beside τ (the `fmr` setting where none did).
Past the pace the client is not refused: for `cooldown` seconds (not doubling) only a probe at the step-up τ is
admitted ("pace:<key>"), and every miss still counts against the budget. A kiosk's crowd thus never locks its
owners out, and a bot gains nothing from speed: the budget refuses any miss that would put more than `budget`
of them in one `budget_window`, so a dictionary of faces buys at most N × FMR(τ) × budget ≤ `risk` expected
false matches a day through one client.
A near-miss (a non-match within the near band below τ of someone, the step-up τ's distance above it × `near`,
or an ambiguous probe) is a climb's footprint: it counts per client ("near:<key>", `near_misses` per
`near_window`, then a cool-down, doubling up to a day) and per targeted identity ("target:<id>"): that many
near-misses towards one person, from any client, guard that person for `guard` seconds (re-armed, never
lengthened), during which only a probe at the step-up τ matches them (`protect`). A probe above τ that only a
guard or the pace refused is a plain miss, not a near-miss: the person's own retries neither lock the device
nor extend their guard. A failed step-up or enrolment refusal is a miss. A refused attempt is rejected before
any encoder runs. Matches never reset a count: an attacker could otherwise interleave their own face.

The counts live in the store, so every process and replica serving it counts the same misses
and a cool-down outlives a restart; clients and targets are stored as keyed digests (biomem.stores.sealing),
never as addresses, session ids or identity ids.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..errors import TooManyAttemptsError
from ..vocabulary import AttemptLimits
from .enrolment import calibrated_fmr

if TYPE_CHECKING:
    from ..stores import MemoryStore
    from .gate import GateResult

log = logging.getLogger(__name__)


def client_keys(session: str | None, address: str | None, forwarded_for: str | None = None, *,
                trust_proxy: bool = False) -> list[str]:
    """A requester's keys for attempt limits: its session and its address.

    Behind a proxy (`trust_proxy`) the address is the last hop the proxy appended to
    X-Forwarded-For; a client-supplied left part is never trusted.
    """
    if trust_proxy:
        hops = [h.strip() for h in (forwarded_for or "").split(",") if h.strip()]
        address = hops[-1] if hops else address
    return [*([f"session:{session}"] if session else []), f"address:{address or ''}"]


def client_tag(key: str) -> str:
    """A short, stable tag of a client key for logs (no address or session id in the log)."""
    return hashlib.sha256(key.encode()).hexdigest()[:10]


class AttemptLimiter:
    """Per-client miss counter in the store: `check` before encoding a probe, `protect` on the gate's result,
    `miss` and `near_miss` after a non-match. The clock is wall time, which processes (and replicas with
    synchronised clocks) agree on."""

    def __init__(self, limits: AttemptLimits | None, store: MemoryStore,
                 clock: Callable[[], float] = time.time) -> None:
        self.limits = limits
        self.store = store
        self.clock = clock
        self._people: tuple[str, int] | None = None

    @staticmethod
    def _keys(clients: str | Iterable[str] | None) -> list[str]:
        """The keys the client is counted by: its address, else its other keys (session, API key). Many devices
        may share a session or an API key; misses at one address must not lock out another."""
        keys = [clients] if isinstance(clients, str) else [c for c in clients or () if c]
        return [k for k in keys if k.startswith("address:")] or keys

    def _digests(self, keys: str | Iterable[str]) -> dict[str, str]:
        """{keyed digest: key} of these keys (or this one)."""
        return {self.store.sealer.digest(key.encode()): key for key in ([keys] if isinstance(keys, str) else keys)}

    def check(self, clients: str | Iterable[str] | None) -> bool:
        """Raise TooManyAttemptsError if the client is cooling down (its budget spent, or near-misses);
        True if it is past its pace, when only a probe at the step-up τ may be admitted (`protect`)."""
        keys = self._keys(clients)
        if self.limits is None or not keys:
            return False
        digests = self._digests([*keys, *(f"near:{k}" for k in keys)])
        now = self.clock()
        wait = self.store.attempt_wait(list(digests), now)
        if wait > 0:
            first = next(iter(digests.values()))
            log.warning("attempt refused: client %s cooling down for %.0f s", client_tag(first), wait)
            minutes = max(1, round(wait / 60))
            raise TooManyAttemptsError(
                f"Too many probes from here matched nobody. Try again in about {minutes} minute"
                f"{'s' if minutes != 1 else ''}.", retry_after=wait)
        return self.store.attempt_wait(list(self._digests([f"pace:{k}" for k in keys])), now) > 0

    def miss(self, clients: str | Iterable[str] | None, misses: int = 1) -> None:
        """Count a non-matching probe (`misses` of them, for an attempt that weighs more) towards the client's
        pace ("pace:<key>": a fixed cool-down at the step-up τ) and its daily budget (a refusal)."""
        keys = self._keys(clients)
        if self.limits is None or not keys:
            return
        now = self.clock()
        enrolled, fmr = self.exposure()
        measured = dataclasses.replace(self.limits, fmr=fmr)
        pace = dataclasses.replace(measured, budget=None, max_cooldown=measured.cooldown)
        for _, end in self.store.attempt_miss(list(self._digests([f"pace:{k}" for k in keys])), now, pace, misses):
            log.info("client past %d misses in %.0f s: only the step-up τ admits for %.0f s", pace.misses,
                     pace.window, end - now)
        daily = dataclasses.replace(measured, misses=0, budget=measured.budget_for(enrolled))
        digests = self._digests(keys)
        for client, end in self.store.attempt_miss(list(digests), now, daily, misses):
            log.warning("client %s: %d misses in %.0f s, cool-down %.0f s", client_tag(digests[client]),
                        daily.budget, daily.budget_window, end - now)

    def exposure(self) -> tuple[int, float]:
        """(N, FMR) of the daily budget: the people the store holds (counted once per enrolment version) and the
        highest false-match rate a calibration stored with an enrolled modality's τ (the rule-of-three floor
        included), else the `fmr` setting for a store whose τ no calibration measured."""
        version = self.store.templates_version()
        if self._people is None or self._people[0] != version:
            self._people = (version, len(self.store.identities()))
        stored = [self.store.threshold(modality) for modality in self.store.modalities()]
        rates = [rate for rate in (calibrated_fmr(s[1]) for s in stored if s) if rate is not None]
        return self._people[1], max(rates, default=self.limits.fmr)

    def near_miss(self, clients: str | Iterable[str] | None, result: GateResult,
                  step_up: Callable[[str], float]) -> list[int]:
        """Count a non-match's near-misses: per client key ("near:<key>") and per identity it came within the
        near band below τ of, or above τ of in an ambiguous probe ("target:<id>"), which guards that identity
        once it has `near_misses` of them. The band reaches `near` × (step-up τ − τ) below τ (`step_up` gives a
        modality's step-up τ): an encoder's own score scale; for a fused result, the narrowest of its modalities'.
        Returns the ids it came near."""
        keys = self._keys(clients)
        if self.limits is None or result.matched or not keys:  # limits apply to calls that pass a client
            return []
        band = self.limits.near * min(step_up(p.modality) - p.threshold for p in result.components or [result])
        near = result.best_scores >= result.threshold - band
        if not result.ambiguous:  # above τ, refused by a guard or the pace only: that person's own capture
            near &= result.best_scores < result.threshold
        targets = [int(i) for i in result.identity_ids[near]]
        if not targets:
            return targets
        now = self.clock()
        rule = dataclasses.replace(self.limits, misses=self.limits.near_misses, window=self.limits.near_window,
                                   budget=None)
        digests = self._digests([f"near:{k}" for k in keys])
        for client, end in self.store.attempt_miss(list(digests), now, rule, 1):
            log.warning("client %s: %d near-misses in %.0f s, cool-down %.0f s", client_tag(digests[client]),
                        rule.misses, rule.window, end - now)
        guard = dataclasses.replace(rule, cooldown=self.limits.guard, max_cooldown=self.limits.guard)
        for _, end in self.store.attempt_miss(list(self._digests([f"target:{i}" for i in targets])), now, guard, 1):
            log.warning("an identity was targeted by %d near-misses in %.0f s: its matches need the step-up τ "
                        "for %.0f s", rule.misses, rule.window, end - now)
        return targets

    def guarded(self, identities: Iterable[int]) -> set[int]:
        """The identities among these whose matches need the step-up τ now (targeted by near-misses)."""
        if self.limits is None:
            return set()
        now = self.clock()
        return {i for i in identities if self.store.attempt_wait(list(self._digests([f"target:{i}"])), now) > 0}

    def protect(self, result: GateResult, step_up: Callable[[str], float], everyone: bool = False) -> GateResult:
        """The gate's result with every guarded identity (`everyone`, for a client past its pace) admitted only
        at its modality's step-up τ (`step_up`): for a fused result, in each component. A guarded best match that
        falls short admits nobody (never the runner-up); the result's scores are left as they were."""
        guarded = set(result.admitted) if everyone else self.guarded(result.admitted)
        if not guarded:
            return result
        parts = result.components or [result]
        kept = [i for i in result.admitted
                if i not in guarded or all(p.score_of(i) >= step_up(p.modality) for p in parts)]
        if result.policy == "best" and kept != result.admitted[:1]:
            kept = []
        return dataclasses.replace(result, admitted=kept, identity=kept[0] if kept else None)
