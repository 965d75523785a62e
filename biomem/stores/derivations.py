"""Which note's analysis read which notes, as SQL both stores run (placeholders differ).

A-Mem's evolve prompt shows the LLM the new note's neighbours; what evolution then writes (the new note's
strengthened tags, its neighbours' contexts and tags) derives from their text. Each note keeps the ids of the
notes its prompt showed (`sources`), so that deleting or rewriting one takes back everything derived from it,
down the chain (biomem.notes.agent.MemoryAgent.take_back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Event = tuple[int, int, str, int | None]  # history id, note id, event, cause note id


def record_sources(execute: Callable[..., Any], owner: int, note: int, sources: Iterable[int], mark: str) -> None:
    """Keep that note `note`'s analysis read `sources`, those still stored (one deleted meanwhile is skipped)."""
    for source in sources:
        execute(f"INSERT INTO sources (owner_id, note_id, source_id) SELECT owner_id, {mark}, id FROM notes "
                f"WHERE owner_id = {mark} AND id = {mark}", [int(note), int(owner), int(source)])


def derivations(execute: Callable[..., Any], owner: int, note: int, mark: str) -> tuple[list[Event],
                                                                                      dict[int, list[int]]]:
    """The owner's add, evolve and update events from note `note`'s add on, oldest first, and the sources of the
    notes added after it (a note can only read notes stored before it)."""
    start = execute(f"SELECT min(id) FROM history WHERE owner_id = {mark} AND note_id = {mark} AND event = 'add'",
                    [int(owner), int(note)]).fetchone()[0]
    if start is None:
        return [], {}
    events = [(int(i), int(n), str(e), None if c is None else int(c)) for i, n, e, c in execute(
        f"SELECT id, note_id, event, cause_id FROM history WHERE owner_id = {mark} AND id >= {mark} "
        f"AND event IN ('add', 'evolve', 'update') ORDER BY id", [int(owner), int(start)]).fetchall()]
    sources: dict[int, list[int]] = {}
    for reader, source in execute(f"SELECT note_id, source_id FROM sources WHERE owner_id = {mark} "
                                  f"AND note_id > {mark}", [int(owner), int(note)]).fetchall():
        sources.setdefault(int(reader), []).append(int(source))
    return events, sources
