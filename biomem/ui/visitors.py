"""Each page session belongs to the client that opened it: its session hash is an identifier, not a secret.

Gradio keys a visitor's server-side state (an unlocked listing, a webcam burst, the households offered
to a Remember) by the session hash the browser sends with every event. Anyone who learns a hash can
send it too, so the first event of a session binds the hash to its client (address and browser), and
an event that presents the hash from another client is refused before its handler runs.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ..errors import NotAuthorisedError

IDLE_SECONDS = 24 * 3600.0  # a binding unused this long is forgotten (Gradio's own state is gone by then)
MAX_VISITORS = 100_000  # bounded memory: the least recently seen bindings go first


class Visitors:
    """Page session hash -> the client it belongs to, most recently seen last."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, idle: float = IDLE_SECONDS,
                 limit: int = MAX_VISITORS) -> None:
        self.clock, self.idle, self.limit = clock, idle, limit
        self._clients: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def admit(self, session: str, client: str) -> None:
        """Bind `session` to `client` on first sight; NotAuthorisedError when another client presents it."""
        if not session:
            return  # outside a page session (a direct call): nothing of a visitor to reach
        now = self.clock()
        with self._lock:
            bound = self._clients.get(session)
            if bound is not None and bound[0] != client and now - bound[1] < self.idle:
                raise NotAuthorisedError("This page session belongs to another browser: reload the page.")
            self._clients[session] = (client, now)
            self._clients.move_to_end(session)
            while len(self._clients) > self.limit:
                self._clients.popitem(last=False)
