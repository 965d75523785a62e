"""The SQLite store's half of households (groups): what differs from PostgreSQL. The logic both stores share is
biomem.stores.store_logic.GroupLogic; joining hides the newcomer from every note already kept from someone, in
the same transaction (biomem.stores.groups holds the SQL both stores run)."""

from __future__ import annotations

from collections.abc import Sequence

from ..groups import hide_from_newcomer
from ..records import Group, now_iso
from ..store_logic import GroupLogic


class GroupRows(GroupLogic):
    """Groups and their members of a Store, which supplies the Dialect hooks and the check that an identity is a
    person."""

    def add_member(self, group_id: int, identity_id: int) -> bool:
        """Make a person a member of a group, hidden from the notes already kept from someone
        (biomem.stores.groups); False when they already were a member."""
        with self._writing() as db:
            self.group(group_id)
            self.person(identity_id)
            added = db.execute("INSERT OR IGNORE INTO members VALUES (?, ?, ?)",
                               [int(group_id), int(identity_id), now_iso()]).rowcount == 1
            if added:
                hide_from_newcomer(db.execute, int(group_id), int(identity_id), "?")
            return added

    def _groups(self, where: str, args: list, admitted: Sequence[int] = ()) -> list[Group]:
        """The groups matching `where`, with their members (`admitted` is PostgreSQL's: SQLite has no row-level
        security)."""
        with self._reading() as db:
            rows = db.execute(f"SELECT id, label FROM identities WHERE kind = 'group' AND {where} ORDER BY id",
                              args).fetchall()
            groups = {gid: Group(gid, label) for gid, label in rows}
            if groups:
                marks = ", ".join("?" * len(groups))
                for gid, member, label in db.execute(
                        f"SELECT m.group_id, m.identity_id, p.label FROM members m JOIN identities p "
                        f"ON p.id = m.identity_id WHERE m.group_id IN ({marks}) ORDER BY m.added, m.identity_id",
                        list(groups)):
                    groups[gid].members.append(member)
                    groups[gid].member_labels.append(label)
        return list(groups.values())
