"""The SQLite store's households (groups): an owner of notes with members and no templates. Joining hides the
newcomer from every note already kept from someone, and a removal erases the notes no member left may read, in the
same transaction (biomem.stores.groups holds the SQL both stores run)."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import sqlite_utils

from ...errors import UnknownIdentityError
from ..groups import erase_unreadable, hide_from_newcomer
from ..records import GROUP_KEY_PREFIX, Group, Identity, check_id, now_iso


class GroupRows:
    """Groups and their members of a Store, which supplies the connection, its lock, transactions and the check
    that an identity is a person."""

    db: sqlite_utils.Database
    lock: threading.RLock
    transaction: Callable[[], AbstractContextManager[sqlite_utils.Database]]
    person: Callable[[int], Identity]

    def add_group(self, label: str, members: Sequence[int] = ()) -> Identity:
        """A new group (an owner of notes with no templates) with `members`; labels need not be unique."""
        with self.transaction() as db:
            group_id = db.execute("INSERT INTO identities (label, label_key, created, kind) VALUES (?, ?, ?, 'group')",
                                  [label, GROUP_KEY_PREFIX + secrets.token_hex(16), now_iso()]).lastrowid
            for member in members:
                self.add_member(group_id, member)
        return Identity(group_id, label, False, "group")

    def add_member(self, group_id: int, identity_id: int) -> bool:
        """Make a person a member of a group, hidden from the notes already kept from someone
        (biomem.stores.groups); False when they already were a member."""
        with self.transaction() as db:
            self.group(group_id)
            self.person(identity_id)
            added = db.execute("INSERT OR IGNORE INTO members VALUES (?, ?, ?)",
                               [int(group_id), int(identity_id), now_iso()]).rowcount == 1
            if added:
                hide_from_newcomer(db.execute, int(group_id), int(identity_id), "?")
            return added

    def remove_member(self, group_id: int, identity_id: int) -> list[int]:
        """Take a person out of a group and erase the notes no member left may read; returns their ids."""
        with self.transaction() as db:
            db.execute("DELETE FROM members WHERE group_id = ? AND identity_id = ?", [int(group_id), int(identity_id)])
            erased = erase_unreadable(db.execute, int(group_id), "?")
            if erased:
                db.execute("UPDATE identities SET generation = generation + 1 WHERE id = ?", [int(group_id)])
            return erased

    def group(self, group_id: int) -> Group:
        """The group `group_id` with its members; UnknownIdentityError when there is no such group."""
        found = self._groups("i.id = ?", [check_id(group_id, "group")])
        if not found:
            raise UnknownIdentityError(f"no group with id {group_id}")
        return found[0]

    def groups_of(self, identity_id: int) -> list[Group]:
        """The groups a person is a member of, with their members, oldest first."""
        return self._groups("i.id IN (SELECT group_id FROM members WHERE identity_id = ?)", [int(identity_id)])

    def all_groups(self) -> list[Group]:
        """Every group with its members (the operator's view)."""
        return self._groups("1", [])

    def _groups(self, where: str, args: list) -> list[Group]:
        with self.lock:
            rows = self.db.execute(f"SELECT i.id, i.label FROM identities i WHERE i.kind = 'group' AND {where} "
                                   "ORDER BY i.id", args).fetchall()
            groups = {gid: Group(gid, label) for gid, label in rows}
            if groups:
                marks = ", ".join("?" * len(groups))
                for gid, member, label in self.db.execute(
                        f"SELECT m.group_id, m.identity_id, p.label FROM members m JOIN identities p "
                        f"ON p.id = m.identity_id WHERE m.group_id IN ({marks}) ORDER BY m.added, m.identity_id",
                        list(groups)):
                    groups[gid].members.append(member)
                    groups[gid].member_labels.append(label)
        return list(groups.values())
