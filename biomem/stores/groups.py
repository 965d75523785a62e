"""What forgetting a person does to the groups they were in, as SQL both stores run (placeholders differ).

A person's data is every note they wrote, in their own partition and in any group (even one they have left),
with its history; who they were in other notes' history goes too (the actor column). A group they leave
without members is deleted with its notes by the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def erase_from_groups(execute: Callable[..., Any], person: int, mark: str) -> tuple[list[int], list[int]]:
    """Delete the notes `person` wrote in groups, with their history (a deleted one's too), and their name from
    other history.
    `execute` runs one statement inside the caller's transaction; `mark` is its placeholder ("?" or "%s").
    Returns (groups whose notes changed or that lose this member, the groups this person was a member of)."""
    member_of = [int(g) for (g,) in execute(f"SELECT group_id FROM members WHERE identity_id = {mark}", [person])]
    written = execute(f"SELECT owner_id, id FROM notes WHERE author_id = {mark} AND owner_id <> {mark}",
                      [person, person]).fetchall()
    # a note of theirs already deleted keeps its history (with its text, if kept): its 'add' event names them
    deleted = execute(f"SELECT owner_id, note_id FROM history WHERE event = 'add' AND actor_id = {mark} "
                      f"AND owner_id <> {mark}", [person, person]).fetchall()
    for owner, note in {*map(tuple, written), *map(tuple, deleted)}:
        execute(f"DELETE FROM history WHERE owner_id = {mark} AND note_id = {mark}", [owner, note])
    execute(f"DELETE FROM notes WHERE author_id = {mark} AND owner_id <> {mark}", [person, person])
    execute(f"UPDATE history SET actor_id = NULL WHERE actor_id = {mark}", [person])
    return sorted({int(owner) for owner, _ in written} | set(member_of)), member_of


def emptied_groups(execute: Callable[..., Any], groups: list[int], mark: str) -> list[int]:
    """Those of `groups` that have no member left."""
    return [g for g in groups
            if execute(f"SELECT 1 FROM members WHERE group_id = {mark} LIMIT 1", [g]).fetchone() is None]
