"""Stop signals as an exception: SIGTERM (a service manager, `docker stop`, a Space's restart) and SIGINT (Ctrl-C)
end the block they interrupt, so every `with` and `finally` on the way out closes its store, and the process ends
quietly. `biomem serve` and `python app.py` run inside it."""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # a service manager's or `docker stop`'s, and Ctrl-C


class _Stopped(BaseException):
    """A stop signal (SIGTERM, SIGINT) raised where the process is, so every `with` on the way out closes its store
    (a BaseException, as KeyboardInterrupt is: no `except Exception` on the way swallows it)."""


def _raise_stopped(signum: int, frame: object) -> None:
    """Raise _Stopped once: a second signal while the stores close is ignored (kill -9 still ends the process)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise _Stopped(signal.Signals(signum).name)


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGTERM and SIGINT end the block as an exception (its stores closed on the way out) and the command quietly.
    While uvicorn serves, it takes both signals itself, shuts down, then raises the one it got again: here."""
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in STOP_SIGNALS}
    try:
        yield
    except _Stopped as stop:
        logging.getLogger("biomem").info("stopped by %s; the store is closed", stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
