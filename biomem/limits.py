"""Attempt limits: a client whose probes keep matching nobody is refused for a while.

A forger climbing towards someone's template needs many tries; a person needs a few. Each
probe that matches nobody (or fails a step-up) is a miss for every key of the client (its
session and its address). `misses` misses inside `window` seconds start a cool-down of
`cooldown` seconds that doubles each time the client earns another one. A refused attempt
is rejected before any encoder runs. Matches never reset the count: an attacker could
otherwise interleave their own face.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .errors import InvalidInputError, TooManyAttemptsError

log = logging.getLogger(__name__)

MAX_CLIENTS = 100_000  # bounded memory: the least recently seen clients are dropped first


@dataclass(frozen=True)
class AttemptLimits:
    """Defaults: 20 misses per 10 minutes, then 60 s of cool-down, doubling up to a day."""

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


@dataclass
class _Client:
    misses: deque = field(default_factory=deque)
    until: float = 0.0  # refused until this time
    strikes: int = 0  # cool-downs earned so far


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
    """Per-client miss counter; `check` before encoding a probe, `miss` after a non-match."""

    def __init__(self, limits: AttemptLimits | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self._clients: OrderedDict[str, _Client] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _keys(clients: str | Iterable[str] | None) -> list[str]:
        if clients is None:
            return []
        return [clients] if isinstance(clients, str) else [c for c in clients if c]

    def check(self, clients: str | Iterable[str] | None) -> None:
        """Raise TooManyAttemptsError if any key of the client is cooling down."""
        keys = self._keys(clients)
        if self.limits is None or not keys:
            return
        now = self.clock()
        with self._lock:
            waits = [self._clients[k].until - now for k in keys if k in self._clients]
        wait = max(waits, default=0.0)
        if wait > 0:
            log.warning("attempt refused: client %s cooling down for %.0f s", client_tag(keys[0]), wait)
            minutes = max(1, round(wait / 60))
            raise TooManyAttemptsError(
                f"Too many probes from here matched nobody. Try again in about {minutes} minute"
                f"{'s' if minutes != 1 else ''}.", retry_after=wait)

    def miss(self, clients: str | Iterable[str] | None) -> None:
        """Count one non-matching probe for every key of the client."""
        keys = self._keys(clients)
        if self.limits is None or not keys:
            return
        limits, now = self.limits, self.clock()
        with self._lock:
            for key in keys:
                client = self._clients.pop(key, None) or _Client()
                self._clients[key] = client  # most recently seen last
                client.misses.append(now)
                while client.misses and client.misses[0] <= now - limits.window:
                    client.misses.popleft()
                if len(client.misses) >= limits.misses:
                    client.strikes += 1
                    client.until = now + min(limits.cooldown * 2 ** (client.strikes - 1), limits.max_cooldown)
                    client.misses.clear()
                    log.warning("client %s: %d misses in %.0f s, cool-down %.0f s", client_tag(key),
                                limits.misses, limits.window, client.until - now)
            while len(self._clients) > MAX_CLIENTS:
                self._clients.popitem(last=False)
