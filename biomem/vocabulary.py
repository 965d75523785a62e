"""The option vocabularies every layer may import: gate policies and fusions, disclosures, attempt limits,
roles. A leaf above `biomem.errors`, so that settings can check a value without importing what uses it."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidInputError

POLICIES = ("best", "all")  # the gate admits the best-matching identity, or every one at or above τ
FUSIONS = ("all", "any", "sum")  # how a probe of several modalities is judged (biomem.identity.gate.fuse)
DISCLOSURES = ("private", "demo")  # what a requester learns about others (biomem.identity.disclosure)

PUBLIC, AGENT, ADMIN = "public", "agent", "admin"
ROLES = (PUBLIC, AGENT, ADMIN)  # who may use a door, weakest first (biomem.engine.access)
KEY_ROLES = (AGENT, ADMIN)  # the roles an API key can hold (biomem.engine.keys)


@dataclass(frozen=True)
class AttemptLimits:
    """Attempt limits per client (biomem.identity.limits). Defaults, against NIST SP 800-63B's biometric rules in
    docs/gate-limits.md: any miss counts towards a pace of 20 per minute (past it, for `cooldown` seconds, only a probe
    at the step-up τ is admitted: a kiosk's crowd never locks its owners out) and towards a daily budget of
    floor(risk / (N_enrolled × fmr)) = 5,000 / N misses (`budget_for`), past which the client is refused until its
    oldest miss ages out; a near-miss (as far below τ of someone as the step-up τ is above it) counts 5 per 10
    minutes per client, then a cool-down of 60 s doubling up to a day, and per targeted identity, whose matches then
    need the step-up τ for `guard` seconds."""

    misses: int = 20
    window: float = 60.0
    cooldown: float = 60.0
    max_cooldown: float = 86_400.0
    budget: int | None = None  # misses per budget_window; None: budget_for(N), from the store's false-match risk
    budget_window: float = 86_400.0
    risk: float = 0.5  # expected false matches a client's budget of strangers' faces may buy per budget_window
    fmr: float = 1e-4  # the false-match rate at τ where no calibration stored one (the stored one wins)
    near: float = 1.0  # the near-miss band below τ, in units of (step-up τ − τ): 0.07 for face-arcface-s
    near_misses: int = 5
    near_window: float = 600.0
    guard: float = 3_600.0  # how long a targeted identity's matches need the step-up τ (re-armed, never lengthened)

    @classmethod
    def parse(cls, text: str) -> AttemptLimits | None:
        """"off", or "MISSES/WINDOW[/COOLDOWN]" in seconds, e.g. "20/60/60" ($BIOMEM_ATTEMPTS)."""
        text = text.strip().lower()
        if text in ("off", "0", "none", "false"):
            return None
        try:
            parts = [float(p) for p in text.split("/")]
            if not 2 <= len(parts) <= 3 or min(parts) <= 0:
                raise ValueError
        except ValueError:
            raise InvalidInputError(f"attempt limits are 'off' or 'MISSES/WINDOW[/COOLDOWN]', got {text!r}") from None
        return cls(int(parts[0]), parts[1], *(parts[2:] or [cls.cooldown]))

    def budget_for(self, enrolled: int) -> int:
        """Misses a client may spend per budget_window with `enrolled` people in the store: the explicit `budget`,
        else floor(risk / (N × fmr)) so that N × FMR × misses stays below `risk`, never below `misses`."""
        if self.budget is not None:
            return self.budget
        return max(self.misses, int(self.risk / (max(enrolled, 1) * self.fmr)))

    def cooldown_for(self, strikes: int) -> float:
        """How long a client's `strikes`-th cool-down lasts: `cooldown`, doubling, at most `max_cooldown`."""
        return min(self.cooldown * 2 ** (strikes - 1), self.max_cooldown)
