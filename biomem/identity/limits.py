"""Attempt limits: a client whose probes keep matching nobody is refused for a while.

A forger climbing towards someone's template needs many tries; a person needs a few. Each
probe that matches nobody (or fails a step-up) is a miss for every key of the client (its
session and its address). `misses` misses inside `window` seconds start a cool-down of
`cooldown` seconds that doubles each time the client earns another one. A refused attempt
is rejected before any encoder runs. Matches never reset the count: an attacker could
otherwise interleave their own face.

The counts live in the store, so every process and replica serving it counts the same misses
and a cool-down outlives a restart; clients are stored as keyed digests (biomem.stores.sealing), never
as addresses or session ids.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..errors import TooManyAttemptsError
from ..vocabulary import AttemptLimits

if TYPE_CHECKING:
    from ..stores import MemoryStore

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
    """Per-client miss counter in the store: `check` before encoding a probe, `miss` after a non-match.
    The clock is wall time, which processes (and replicas with synchronised clocks) agree on."""

    def __init__(self, limits: AttemptLimits | None, store: MemoryStore,
                 clock: Callable[[], float] = time.time) -> None:
        self.limits = limits
        self.store = store
        self.clock = clock

    def _digests(self, clients: str | Iterable[str] | None) -> dict[str, str]:
        """{keyed digest: key} of the client's keys (its session and address)."""
        if clients is None:
            return {}
        keys = [clients] if isinstance(clients, str) else [c for c in clients if c]
        return {self.store.sealer.digest(key.encode()): key for key in keys}

    def check(self, clients: str | Iterable[str] | None) -> None:
        """Raise TooManyAttemptsError if any key of the client is cooling down."""
        digests = self._digests(clients) if self.limits is not None else {}
        if not digests:
            return
        wait = self.store.attempt_wait(list(digests), self.clock())
        if wait > 0:
            first = next(iter(digests.values()))
            log.warning("attempt refused: client %s cooling down for %.0f s", client_tag(first), wait)
            minutes = max(1, round(wait / 60))
            raise TooManyAttemptsError(
                f"Too many probes from here matched nobody. Try again in about {minutes} minute"
                f"{'s' if minutes != 1 else ''}.", retry_after=wait)

    def miss(self, clients: str | Iterable[str] | None, misses: int = 1) -> None:
        """Count a non-matching probe (`misses` of them, for an attempt that weighs more) for every key
        of the client."""
        digests = self._digests(clients) if self.limits is not None else {}
        if self.limits is None or not digests:
            return
        now = self.clock()
        for client, end in self.store.attempt_miss(list(digests), now, self.limits, misses):
            log.warning("client %s: %d misses in %.0f s, cool-down %.0f s", client_tag(digests[client]),
                        self.limits.misses, self.limits.window, end - now)
