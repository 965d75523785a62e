"""The attempt-limit tables' writes, shared by both stores: the miss counts behind biomem.identity.limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..vocabulary import AttemptLimits


def record_misses(execute: Callable[[str, list[Any]], Any], clients: list[str], now: float,
                  limits: AttemptLimits, misses: int = 1) -> list[tuple[str, float]]:
    """A store's attempt_miss: `misses` misses for each client digest in the `attempts` and `cooldowns`
    tables, through `execute(sql, params)` ("?" placeholders) inside the caller's transaction.

    A client cools down when its misses since max(now - window, its last cool-down's start) reach `misses`,
    or (with a `budget`) its misses inside budget_window reach the budget: those are not forgotten by a
    cool-down, so a client past its budget cools down again at each further miss, for twice as long.
    Misses older than either window, and cool-downs over for longer than the longest one, are pruned on
    the way. Returns (client, end) of the clients whose misses started a cool-down."""
    execute("DELETE FROM attempts WHERE at <= ?", [now - max(limits.window, limits.budget_window)])
    execute("DELETE FROM cooldowns WHERE ends <= ?", [now - limits.max_cooldown])
    cooled = []
    for client in clients:
        for _ in range(misses):
            execute("INSERT INTO attempts (client, at) VALUES (?, ?)", [client, now])
        row = execute("SELECT ends, strikes FROM cooldowns WHERE client = ?", [client]).fetchone()
        strikes = row[1] if row else 0
        since = max(now - limits.window, row[0] - limits.cooldown_for(strikes) if row else now - limits.window)
        (recent,) = execute("SELECT count(*) FROM attempts WHERE client = ? AND at > ?", [client, since]).fetchone()
        spent = 0
        if limits.budget is not None:
            (spent,) = execute("SELECT count(*) FROM attempts WHERE client = ? AND at > ?",
                               [client, now - limits.budget_window]).fetchone()
        if recent >= limits.misses or (limits.budget is not None and spent >= limits.budget):
            end = now + limits.cooldown_for(strikes + 1)
            execute("INSERT INTO cooldowns (client, ends, strikes) VALUES (?, ?, ?) ON CONFLICT (client) "
                    "DO UPDATE SET ends = excluded.ends, strikes = excluded.strikes", [client, end, strikes + 1])
            cooled.append((client, end))
    return cooled
