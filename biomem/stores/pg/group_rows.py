"""The PostgreSQL store's half of households (groups): what differs from SQLite. The logic both stores share is
biomem.stores.store_logic.GroupLogic; joining hides the newcomer from every note already kept from someone, in
the same transaction (biomem.stores.groups holds the SQL both stores run); each statement admits only the rows of
the owners it is for (row-level security)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import psycopg

from ..groups import hide_from_newcomer
from ..records import Group, now_iso
from ..store_logic import GroupLogic


class PgGroupRows(GroupLogic):
    """Groups and their members of a PostgresStore, which supplies the Dialect hooks (transactions admitting
    owners), the admission of owners on a connection and the check that an identity is a person."""

    admit: Callable[[psycopg.Connection, Iterable[int]], None]

    def add_member(self, group_id: int, identity_id: int) -> bool:
        """Make a person a member of a group, hidden from the notes already kept from someone
        (biomem.stores.groups); False when they already were a member."""
        with self._writing():
            self.group(group_id)
            self.person(identity_id)
            with self._writing([group_id, identity_id]) as conn:
                added = conn.execute("INSERT INTO members VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                                     [int(group_id), int(identity_id), now_iso()]).rowcount == 1
                if added:
                    hide_from_newcomer(conn.execute, int(group_id), int(identity_id), "%s")
                return added

    def _groups(self, where: str, args: list, admitted: Sequence[int] = ()) -> list[Group]:
        """The groups matching `where` (seen with `admitted`: a member finds their memberships), then their
        members, read with those groups admitted."""
        with self._reading(admitted) as conn:
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
