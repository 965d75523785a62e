"""Groups (households, teams): owners of notes that several people share, reached only by a member's live probe.

    family = mem.create_group("Home", probe=ana)                 # Ana founds it and is its first member
    mem.add_member(family.id, probe=ana, member_probe=ben)       # Ben joins in person: both probes, step-up
    mem.add("The Wi-Fi password is …", probe=ana, scope=family.id)
    mem.add("Chloe's party is on Saturday", probe=ana, scope=family.id, hidden_from=[chloe.id])
    mem.search("wifi?", probe=ben)                               # Ben's own notes and the household's

A group is an identity of kind "group": it has no templates, so no probe ever matches it, and its notes live
in its own partition, so linking and evolution never mix a group's notes with a person's. A person's reach is
their own partition plus their groups', read from the store at every call: a removal takes effect on the next
query. A non-member naming a group gets GroupNotFoundError, as for a group that does not exist. A probe of one of
the demo's sample people founds, joins, invites to and leaves nothing (SampleReadOnlyError, biomem.engine.access):
anyone can show their captures.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import DuplicateLabelError, GroupNotFoundError, InvalidInputError
from ..identity.biometrics import Clients
from ..identity.enrolment import check_label
from ..stores import MemoryStore
from ..stores.labels import label_key
from ..stores.records import Group, check_id
from .erasure import Erasure
from .requesters import Requesters


class Households:
    """The group calls, and what a person may read through their groups (`reach`). Probe-keyed calls are a
    requester's (founding, inviting and removing need the step-up match of a person who is not a sample person);
    identity=/operator=True calls are the trusted operator's."""

    def __init__(self, store: MemoryStore, requesters: Requesters, erasure: Erasure) -> None:
        self.store = store
        self.requesters = requesters
        self.erasure = erasure

    def create_group(self, label: str, *, probe: Any = None, identity: int | None = None,
                     client: Clients = None) -> Group:
        """A new group founded by the requester (step-up `probe`) or, as the operator, by person `identity`;
        its founder is its first member. DuplicateLabelError when the founder already has a group of that name."""
        label = check_label(label)
        if (identity is None) == (probe is None):
            raise InvalidInputError("create_group() takes exactly one of probe= or identity=")
        founder = self.store.person(identity).id if identity is not None else \
            self.requesters.prove(probe, "Founding a household", client=client)
        self._check_new_label(founder, label)
        return self.store.group(self.store.add_group(label, [founder]).id)

    def add_member(self, group: int, *, probe: Any = None, member_probe: Any = None, identity: int | None = None,
                   client: Clients = None) -> Group:
        """Add a person to a group: a member invites (step-up `probe`) and the newcomer shows up in person (their
        own step-up `member_probe`); or, as the operator, person `identity` is added. The newcomer never reads a
        note written before they came that was kept from someone (biomem.stores.groups)."""
        group = check_id(group, "group")
        if identity is not None:
            if probe is not None or member_probe is not None:
                raise InvalidInputError("add_member() takes probe= and member_probe=, or identity= alone")
            found = self.store.group(group)
            newcomer = self.store.person(identity).id
        else:
            if probe is None or member_probe is None:
                raise InvalidInputError("add_member() needs the inviting member's probe= and the newcomer's "
                                        "member_probe=: nobody joins a household without showing up")
            found = self.member_group(self.requesters.prove(probe, "Inviting someone", client=client), group)
            newcomer = self.requesters.prove(member_probe, "Joining a household", client=client)
        if newcomer in found.members:
            raise InvalidInputError(f"{found.member_labels[found.members.index(newcomer)]} is already a member")
        self._check_new_label(newcomer, found.label)
        self.store.add_member(group, newcomer)
        return self.store.group(group)

    def remove_member(self, group: int, member: int, *, probe: Any = None, operator: bool = False,
                      client: Clients = None) -> Group | None:
        """Take `member` out of a group: any member with a fresh step-up probe may (themselves included), or the
        operator. A group left without members is deleted with its notes (then None is returned); a note hidden
        from every member left is erased (biomem.stores.groups)."""
        group, member = check_id(group, "group"), check_id(member, "identity")
        found = self._operator_or_member(group, probe, operator, "Removing a member", client)
        if member not in found.members:
            raise GroupNotFoundError(f"no member {member} in this household")
        erased = self.store.remove_member(group, member)
        after = self.store.group(group)
        if not after.members:
            self.erasure.erase(group)
            return None
        if erased:  # notes kept from everyone left: gone from the index and the files too
            self.erasure.dropped(group)
            self.store.checkpoint()
        return after

    def groups(self, *, probe: Any = None, identity: int | None = None, client: Clients = None) -> list[Group]:
        """The requester's groups (or person `identity`'s, for the operator) with their members' labels."""
        if (identity is None) == (probe is None):
            raise InvalidInputError("groups() takes exactly one of probe= or identity=")
        person = self.store.person(identity).id if identity is not None else self.requesters.owner(probe, client)
        return self.store.groups_of(person)

    def delete_group(self, group: int, *, probe: Any = None, operator: bool = False, client: Clients = None,
                     timeout: float = 10.0) -> int:
        """Erase a group and its notes, links and history, as forget erases a person (a member's step-up
        probe, or the operator); returns its id."""
        group = check_id(group, "group")
        self._operator_or_member(group, probe, operator, "Deleting a household", client)
        self.erasure.erase(group, timeout)
        return group

    # ---- helpers ------------------------------------------------------------------------------

    def _operator_or_member(self, group: int, probe: Any, operator: bool, action: str, client: Clients) -> Group:
        if operator == (probe is not None):
            raise InvalidInputError("pass either a member's probe= or operator=True")
        if operator:
            return self.store.group(group)
        return self.member_group(self.requesters.prove(probe, action, client=client), group)

    def member_group(self, person: int, group: int) -> Group:
        """The group if `person` is a member; GroupNotFoundError otherwise (as if it did not exist)."""
        for found in self.store.groups_of(person):
            if found.id == group:
                return found
        raise GroupNotFoundError(f"no household {group} among yours")

    def _check_new_label(self, person: int, label: str) -> None:
        if any(label_key(g.label) == label_key(label) for g in self.store.groups_of(person)):
            raise DuplicateLabelError(f"you already belong to a household named {label!r}, or one that looks like it: "
                                      "choose another name")

    def reach(self, people: Iterable[int]) -> tuple[list[int], frozenset[int]]:
        """What `people` may read together: their own partitions and their groups', and the ids of the group
        notes hidden from any of them (left out of every read)."""
        people = list(dict.fromkeys(people))
        groups = list(dict.fromkeys(g for person in people for g in self.store.group_ids(person)))
        return people + groups, frozenset(self.store.hidden_notes(people, groups))

    def check_audience(self, group: Group, author: int | None, hidden_from: Sequence[Any]) -> list[int]:
        """`hidden_from` as member ids of `group`, none of them the author; InvalidInputError otherwise."""
        if isinstance(hidden_from, (str, bytes)) or not isinstance(hidden_from, (list, tuple, set, frozenset)):
            raise InvalidInputError("hidden_from is a list of member ids")
        hidden = sorted({check_id(i, "identity") for i in hidden_from})
        if author in hidden:
            raise InvalidInputError("you cannot hide a note from yourself")
        strangers = [i for i in hidden if i not in group.members]
        if strangers:
            raise InvalidInputError(f"hidden_from names {strangers}, who are not members of this household")
        if hidden and len(hidden) == len(group.members):
            raise InvalidInputError("a note hidden from every member could never be read")
        return hidden
