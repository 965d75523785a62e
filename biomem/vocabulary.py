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
    """Attempt limits per client (biomem.identity.limits); defaults: 20 misses per 10 minutes, then
    60 s of cool-down, doubling up to a day."""

    misses: int = 20
    window: float = 600.0
    cooldown: float = 60.0
    max_cooldown: float = 86_400.0

    @classmethod
    def parse(cls, text: str) -> AttemptLimits | None:
        """"off", or "MISSES/WINDOW[/COOLDOWN]" in seconds, e.g. "20/600/60" ($BIOMEM_ATTEMPTS)."""
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

    def cooldown_for(self, strikes: int) -> float:
        """How long a client's `strikes`-th cool-down lasts: `cooldown`, doubling, at most `max_cooldown`."""
        return min(self.cooldown * 2 ** (strikes - 1), self.max_cooldown)
