"""What forgetting a person does to the groups they were in, as SQL both stores run (placeholders differ).

A person's data is every note they wrote, in their own partition and in any group (even one they have left),
with its history; who they were in other notes' history goes too (the actor column). A group they leave
without members is deleted with its notes by the caller.

A note hidden from some members is read only by the members it was written for: a newcomer is hidden from it
too (unless they wrote it), so whoever it was kept from cannot bring someone in to read it; and once no member
may read it, it is erased (no one is left alone in a household with a note kept from them).
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


def hide_from_newcomer(execute: Callable[..., Any], group: int, person: int, mark: str) -> None:
    """Hide from `person`, who joins `group`, every note of it already hidden from someone (unless they wrote it)."""
    execute(f"INSERT INTO hidden (owner_id, note_id, identity_id) SELECT n.owner_id, n.id, {mark} FROM notes n "
            f"WHERE n.owner_id = {mark} AND (n.author_id IS NULL OR n.author_id <> {mark}) "
            f"AND EXISTS (SELECT 1 FROM hidden h WHERE h.owner_id = n.owner_id AND h.note_id = n.id) "
            f"AND NOT EXISTS (SELECT 1 FROM hidden h WHERE h.owner_id = n.owner_id AND h.note_id = n.id "
            f"AND h.identity_id = {mark})", [person, group, person, person])


def erase_unreadable(execute: Callable[..., Any], group: int, mark: str) -> list[int]:
    """Erase, with their history, the notes of `group` hidden from every member it has left; returns their ids."""
    notes = [int(n) for (n,) in execute(
        f"SELECT DISTINCT h.note_id FROM hidden h WHERE h.owner_id = {mark} AND NOT EXISTS ("
        f"SELECT 1 FROM members m WHERE m.group_id = h.owner_id AND NOT EXISTS ("
        f"SELECT 1 FROM hidden x WHERE x.owner_id = h.owner_id AND x.note_id = h.note_id "
        f"AND x.identity_id = m.identity_id))", [group]).fetchall()]
    for note in notes:
        execute(f"DELETE FROM history WHERE owner_id = {mark} AND note_id = {mark}", [group, note])
        execute(f"DELETE FROM notes WHERE owner_id = {mark} AND id = {mark}", [group, note])
    return sorted(notes)


def emptied_groups(execute: Callable[..., Any], groups: list[int], mark: str) -> list[int]:
    """Those of `groups` that have no member left."""
    return [g for g in groups
            if execute(f"SELECT 1 FROM members WHERE group_id = {mark} LIMIT 1", [g]).fetchone() is None]
