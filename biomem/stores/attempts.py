"""The attempt-limit tables' writes, shared by both stores: the miss counts behind biomem.identity.limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..vocabulary import AttemptLimits


def record_misses(execute: Callable[[str, list[Any]], Any], clients: list[str], now: float,
                  limits: AttemptLimits, misses: int = 1) -> list[tuple[str, float]]:
    """A store's attempt_miss: `misses` misses for each client digest in the `attempts` and `cooldowns`
    tables, through `execute(sql, params)` ("?" placeholders) inside the caller's transaction.

    A client cools down when its misses since max(now - window, its last cool-down's start) reach `misses`
    (0: no such rule), for cooldown_for(strikes); or, with a `budget`, when its misses inside budget_window
    reach the budget, until enough of them age out for one more to fit: no budget_window ever holds more than
    `budget` misses, so the budget bounds a client's guesses exactly. Misses older than either window, and
    cool-downs over for longer than max_cooldown and budget_window, are pruned on the way. Returns (client,
    end) of the clients whose misses started a cool-down."""
    execute("DELETE FROM attempts WHERE at <= ?", [now - max(limits.window, limits.budget_window)])
    execute("DELETE FROM cooldowns WHERE ends <= ?", [now - max(limits.max_cooldown, limits.budget_window)])
    cooled = []
    for client in clients:
        for _ in range(misses):
            execute("INSERT INTO attempts (client, at) VALUES (?, ?)", [client, now])
        row = execute("SELECT ends, strikes FROM cooldowns WHERE client = ?", [client]).fetchone()
        strikes = row[1] if row else 0
        end = 0.0
        if limits.misses:
            since = max(now - limits.window, row[0] - limits.cooldown_for(strikes) if row else now - limits.window)
            (recent,) = execute("SELECT count(*) FROM attempts WHERE client = ? AND at > ?",
                                [client, since]).fetchone()
            end = now + limits.cooldown_for(strikes + 1) if recent >= limits.misses else end
        if limits.budget is not None:
            (spent,) = execute("SELECT count(*) FROM attempts WHERE client = ? AND at > ?",
                               [client, now - limits.budget_window]).fetchone()
            if spent >= limits.budget:  # until the (spent - budget + 1)-th oldest of the window ages out
                (oldest,) = execute("SELECT at FROM attempts WHERE client = ? AND at > ? ORDER BY at LIMIT 1 "
                                    "OFFSET ?", [client, now - limits.budget_window, spent - limits.budget]).fetchone()
                end = max(end, oldest + limits.budget_window)
        if end:
            execute("INSERT INTO cooldowns (client, ends, strikes) VALUES (?, ?, ?) ON CONFLICT (client) "
                    "DO UPDATE SET ends = excluded.ends, strikes = excluded.strikes", [client, end, strikes + 1])
            cooled.append((client, end))
    return cooled
