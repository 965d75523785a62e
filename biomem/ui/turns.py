"""Whose turn it is in one browser tab: actions of one group run one after another, and none is dropped.

Two buttons of a group (Load demo and Compare, Delete and Forget) share the probes and results they
show, so their actions never overlap: a second action clicked while the first runs waits its turn
(its button says so) and then runs; only one click dispatched twice by Gradio (the same action again
before the first has landed) is dropped. A turn ends when the page has shown its results, so the
next action reads what the last one left in the page (Load demo's probes, for a Compare).

Clicks are served in the order the visitor made them, not the order their requests reach the server
(two clicks in one instant travel on two connections): the page numbers each click (CLICK_ORDER), and
a click waits until every earlier click of its tab has arrived, for ARRIVAL_SECONDS at most.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

# Run in the browser at each click, before its request is sent: the click's number in its tab.
CLICK_ORDER = "() => (window.bmClicks = (window.bmClicks || 0) + 1)"
ARRIVAL_SECONDS = 3.0  # how long a click waits for an earlier one of its tab that has not arrived
HOLD_SECONDS = 900.0  # a turn never given back (its tab closed mid-action) is taken over after this
MAX_GAPS = 64  # clicks of one tab held waiting for an earlier number
MAX_TABS = 100_000  # tabs whose click numbers are remembered
MAX_WAITING = 32  # waiting turns in the whole process: each holds a worker thread


class Repeated(Exception):
    """The same action again while its first dispatch has not landed: one click, dispatched twice."""


class Crowded(Exception):
    """Too many actions are waiting their turn in this process."""


@dataclass
class _Turn:
    action: str
    since: float
    landed: bool = False
    waiting: int = field(default=0)


class Turns:
    """Turns per (tab, group), shared by every tab of one page."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, hold: float = HOLD_SECONDS,
                 max_waiting: int = MAX_WAITING) -> None:
        self.clock, self.hold, self.max_waiting = clock, hold, max_waiting
        self._turns: dict[tuple[str, str], _Turn] = {}
        self._arrived: OrderedDict[str, tuple[int, set[int]]] = OrderedDict()  # tab -> (all clicks up to, later)
        self._waiting = 0
        self._changed = threading.Condition()

    def take(self, tab: str, group: str, action: str, click: int | None = None) -> None:
        """Start `action` in `group` of `tab`, after the action under way there has landed and been shown; the
        page's `click` number (CLICK_ORDER) first waits for the tab's earlier clicks to arrive."""
        key = (tab, group)
        with self._changed:
            if click:
                self._arrive(tab, int(click))
            turn = self._turns.get(key)
            if turn is not None and turn.action == action and not turn.landed and not self._abandoned(turn):
                raise Repeated(action)
            if turn is not None and not self._abandoned(turn):
                if turn.waiting or self._waiting >= self.max_waiting:
                    raise Repeated(action) if turn.waiting else Crowded(action)
                turn.waiting += 1
                self._waiting += 1
                try:
                    while self._turns.get(key) is turn and not self._abandoned(turn):
                        self._changed.wait(max(0.0, turn.since + self.hold - self.clock()))
                finally:
                    turn.waiting -= 1
                    self._waiting -= 1
            self._turns[key] = _Turn(action, self.clock())

    def _arrive(self, tab: str, click: int) -> None:
        """Note that `click` of `tab` arrived, then wait (lock held by the condition) until the earlier ones have."""
        upto, later = self._arrived.get(tab, (0, set()))
        later.add(click)
        while upto + 1 in later:
            upto += 1
            later.discard(upto)
        if len(later) > MAX_GAPS:  # numbers that never join up (a client's own): stop waiting for the gaps
            upto = max(later)
            later.clear()
        self._arrived[tab] = (upto, later)
        self._arrived.move_to_end(tab)
        while len(self._arrived) > MAX_TABS:  # bounded memory: the tabs heard from longest ago go first
            self._arrived.popitem(last=False)
        self._changed.notify_all()
        if self._arrived[tab][0] >= click - 1 or self._waiting >= self.max_waiting:
            return  # (a crowded process serves a click as it arrives rather than hold another thread)
        deadline = self.clock() + ARRIVAL_SECONDS
        self._waiting += 1
        try:
            while self._arrived.get(tab, (click,))[0] < click - 1 and (left := deadline - self.clock()) > 0:
                self._changed.wait(left)
        finally:
            self._waiting -= 1

    def landed(self, tab: str, group: str) -> bool:
        """The action's results are on their way to the page; True when another action waits to run next."""
        with self._changed:
            turn = self._turns.get((tab, group))
            if turn is None:
                return False
            turn.landed = True
            return turn.waiting > 0

    def give_back(self, tab: str, group: str) -> None:
        """The page has shown the action's results: the next action of the group may start."""
        with self._changed:
            self._turns.pop((tab, group), None)
            self._changed.notify_all()

    @property
    def waiting(self) -> int:
        """How many actions wait their turn in this process now."""
        return self._waiting

    def _abandoned(self, turn: _Turn) -> bool:
        return self.clock() - turn.since >= self.hold
