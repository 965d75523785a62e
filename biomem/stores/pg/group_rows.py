"""The PostgreSQL store's households (groups): an owner of notes with members and no templates. Joining hides the
newcomer from every note already kept from someone, and a removal erases the notes no member left may read, in the
same transaction (biomem.stores.groups holds the SQL both stores run); each statement admits only the rows of the
owners it is for (row-level security)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager

import psycopg

from ...errors import UnknownIdentityError
from ..groups import erase_unreadable, hide_from_newcomer
from ..records import GROUP_KEY_PREFIX, Group, Identity, check_id, now_iso


class PgGroupRows:
    """Groups and their members of a PostgresStore, which supplies its transactions (admitting owners), the
    admission of owners on a connection and the check that an identity is a person."""

    transaction: Callable[..., AbstractContextManager[psycopg.Connection]]
    admit: Callable[[psycopg.Connection, Iterable[int]], None]
    person: Callable[[int], Identity]

    def add_group(self, label: str, members: Sequence[int] = ()) -> Identity:
        """A new group (an owner of notes with no templates) with `members`; labels need not be unique."""
        with self.transaction() as conn:
            group_id = conn.execute("INSERT INTO identities (label, label_key, created, kind) "
                                    "VALUES (%s, %s, %s, 'group') RETURNING id",
                                    [label, GROUP_KEY_PREFIX + secrets.token_hex(16), now_iso()]).fetchone()[0]
            for member in members:
                self.add_member(group_id, member)
        return Identity(group_id, label, False, "group")

    def add_member(self, group_id: int, identity_id: int) -> bool:
        """Make a person a member of a group, hidden from the notes already kept from someone
        (biomem.stores.groups); False when they already were a member."""
        with self.transaction():
            self.group(group_id)
            self.person(identity_id)
            with self.transaction([group_id, identity_id]) as conn:
                added = conn.execute("INSERT INTO members VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                                     [int(group_id), int(identity_id), now_iso()]).rowcount == 1
                if added:
                    hide_from_newcomer(conn.execute, int(group_id), int(identity_id), "%s")
                return added

    def remove_member(self, group_id: int, identity_id: int) -> list[int]:
        """Take a person out of a group and erase the notes no member left may read; returns their ids."""
        with self.transaction([group_id, identity_id]) as conn:
            conn.execute("DELETE FROM members WHERE group_id = %s AND identity_id = %s",
                         [int(group_id), int(identity_id)])
            erased = erase_unreadable(conn.execute, int(group_id), "%s")
            if erased:
                conn.execute("UPDATE identities SET generation = generation + 1 WHERE id = %s", [int(group_id)])
            return erased

    def group(self, group_id: int) -> Group:
        """The group `group_id` with its members; UnknownIdentityError when there is no such group."""
        found = self._groups("id = %s", [check_id(group_id, "group")])
        if not found:
            raise UnknownIdentityError(f"no group with id {group_id}")
        return found[0]

    def groups_of(self, identity_id: int) -> list[Group]:
        """The groups a person is a member of, with their members, oldest first."""
        return self._groups("id IN (SELECT group_id FROM members WHERE identity_id = %s)", [int(identity_id)],
                            admitted=[int(identity_id)])

    def all_groups(self) -> list[Group]:
        """Every group with its members (the operator's view)."""
        return self._groups("true", [])

    def _groups(self, where: str, args: list, admitted: Sequence[int] = ()) -> list[Group]:
        """The groups matching `where` (seen with `admitted`: a member finds their memberships), then their
        members, read with those groups admitted."""
        with self.transaction(admitted) as conn:
            rows = conn.execute(f"SELECT id, label FROM identities WHERE kind = 'group' AND {where} ORDER BY id",
                                args).fetchall()
            groups = {gid: Group(gid, label) for gid, label in rows}
            if groups:
                self.admit(conn, [*admitted, *groups])
                for gid, member, label in conn.execute(
                        "SELECT m.group_id, m.identity_id, p.label FROM members m JOIN identities p "
                        "ON p.id = m.identity_id WHERE m.group_id = ANY (%s) ORDER BY m.added, m.identity_id",
                        [list(groups)]):
                    groups[gid].members.append(member)
                    groups[gid].member_labels.append(label)
        return list(groups.values())
