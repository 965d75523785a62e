"""The attempt-limit tables' writes, shared by both stores: the miss counts behind biomem.identity.limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..vocabulary import AttemptLimits


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
