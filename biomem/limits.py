"""Attempt limits: a client whose probes keep matching nobody is refused for a while.

A forger climbing towards someone's template needs many tries; a person needs a few. Each
probe that matches nobody (or fails a step-up) is a miss for every key of the client (its
session and its address). `misses` misses inside `window` seconds start a cool-down of
`cooldown` seconds that doubles each time the client earns another one. A refused attempt
is rejected before any encoder runs. Matches never reset the count: an attacker could
otherwise interleave their own face.

The counts live in the store, so every process and replica serving it counts the same misses
and a cool-down outlives a restart; clients are stored as keyed digests (biomem.sealing), never
as addresses or session ids.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .errors import TooManyAttemptsError
from .vocabulary import AttemptLimits

if TYPE_CHECKING:
    from .storage import MemoryStore

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

    def __init__(self, limits: AttemptLimits | None, store: MemoryStore, clock: Callable[[], float] = time.time) -> None:
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


def record_misses(execute: Callable[[str, list[Any]], Any], clients: list[str], now: float,
                  limits: AttemptLimits, misses: int = 1) -> list[tuple[str, float]]:
    """A store's attempt_miss: `misses` misses for each client digest in the `attempts` and `cooldowns`
    tables, through `execute(sql, params)` ("?" placeholders) inside the caller's transaction.
    Misses older than the window, and cool-downs over for longer than the longest one, are pruned
    on the way. Returns (client, end) of the clients whose misses started a cool-down."""
    execute("DELETE FROM attempts WHERE at <= ?", [now - limits.window])
    execute("DELETE FROM cooldowns WHERE ends <= ?", [now - limits.max_cooldown])
    cooled = []
    for client in clients:
        for _ in range(misses):
            execute("INSERT INTO attempts (client, at) VALUES (?, ?)", [client, now])
        (counted,) = execute("SELECT count(*) FROM attempts WHERE client = ?", [client]).fetchone()
        if counted >= limits.misses:
            row = execute("SELECT strikes FROM cooldowns WHERE client = ?", [client]).fetchone()
            strikes = (row[0] if row else 0) + 1
            end = now + limits.cooldown_for(strikes)
            execute("INSERT INTO cooldowns (client, ends, strikes) VALUES (?, ?, ?) ON CONFLICT (client) "
                    "DO UPDATE SET ends = excluded.ends, strikes = excluded.strikes", [client, end, strikes])
            execute("DELETE FROM attempts WHERE client = ?", [client])
            cooled.append((client, end))
    return cooled
