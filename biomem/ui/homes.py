"""The page's household handlers: the households a probe's person is in, and founding, joining and leaving one in
person (fresh step-up probes); a household one is not in reads exactly as one that does not exist."""

from __future__ import annotations

from typing import Any, Protocol

import gradio as gr

from ..engine.memory import BioMemory
from ..errors import BioMemError, GroupNotFoundError
from ..identity.gate import Probe
from ..stores.labels import label_key
from ..stores.records import Group
from . import render, uploads
from .fields import Shown, typed_text
from .messages import fail, hint

# A household the requester is not in reads exactly as one that does not exist.
NO_HOUSEHOLD = ("No such household", "None of the households of the person the probe shows has that name: check the "
                "name, or show a member's probe.")
Sources = tuple[dict[int, str], dict[int, str]]


class Requester(Protocol):
    """What the household handlers ask of the page's controller: a probe, a step-up's, and the keys they count
    against."""

    def clients(self, request: gr.Request | None) -> list[str] | None: ...

    def probe(self, value: Any, encoder: str | None, what: str = "probe", client: list[str] | None = None,
              voice: Any = None) -> Shown: ...

    def step_up(self, value: Any, second: Any, encoder: str | None,
                client: list[str] | None) -> tuple[Probe | dict[str, Probe], list[str] | None]: ...


def sources(groups: list[Group]) -> Sources:
    """(household id -> name, member id -> name) of the households a requester is in: the names their
    notes' "from" shows (members may see each other)."""
    return ({g.id: g.label for g in groups},
            {i: label for g in groups for i, label in zip(g.members, g.member_labels, strict=True)})


def former(mem: BioMemory, person: int) -> str:
    """The name of a note's author who has left its household (or "a former member")."""
    try:
        return mem.store.identity(person).label
    except BioMemError:
        return "a former member"


def sourced(mem: BioMemory, note: dict[str, Any], named: Sources) -> dict[str, Any]:
    """A note's view with the names of where it came from: its household (None: the requester's own)
    and its author (None for an operator's import)."""
    groups, people = named
    scope, author = note.get("scope"), note.get("author")
    return {**note, "scope_label": groups.get(scope) if scope is not None else None,
            "author_label": None if author is None else people.get(author) or former(mem, author)}


class Households:
    """The Households panel and the Remember's "where", over one BioMemory and the controller's probes."""

    def __init__(self, mem: BioMemory, requester: Requester) -> None:
        self.mem = mem
        self.requester = requester

    def of(self, probe: Any, encoder: str | None = None, request: gr.Request | None = None,
           voice: Any = None) -> dict[str, Any]:
        """The households of whoever the probe shows, with their members: the Remember's choices. Only
        after the gate admitted the requester, and only theirs (a stranger is refused, as for Remember; a probe
        the gate cannot tell between two people is refused as ambiguous, naming nobody)."""
        proof, client, _ = self.requester.probe(probe, encoder, client=self.requester.clients(request), voice=voice)
        gate = self.mem.identify(proof, policy="best", client=client)
        person = self.mem.owner_of(gate)  # AmbiguousProbeError, or UnknownIdentityError for nobody
        return {"person": person, "label": gate.labels[person],
                "groups": [{"id": g.id, "label": g.label,
                            "members": [[i, name] for i, name in zip(g.members, g.member_labels, strict=True)]}
                           for g in self.mem.groups(identity=person)]}

    def found(self, label: str, probe: Any, second: Any, encoder: str | None,
                        request: gr.Request | None = None) -> str:
        """Found a household named `label`: its founder shows a fresh step-up probe and is its first member."""
        label = typed_text(label, "household name", probe, second)
        try:
            if not label:
                raise hint("Give the new household a name.", "No household name")
            proof, client = self.requester.step_up(probe, second, encoder, self.requester.clients(request))
            home = self.mem.create_group(label, probe=proof, client=client)
        finally:
            uploads.discard(probe, second)
        return (f"Founded the household **{render.esc(home.label)}** with **{render.esc(home.member_labels[0])}** "
                "as its first member. Anyone joins it in person: a member's probe and theirs, under "
                "**Join a household**.")

    def named(self, person: int, label: str) -> Group:
        """`person`'s household named `label`, in any case or look-alike letters (biomem.stores.labels); one that is
        not theirs reads as one that does not exist."""
        key = label_key(label)
        home = next((g for g in self.mem.groups(identity=person) if label_key(g.label) == key), None)
        if home is None:
            raise fail(NO_HOUSEHOLD[1], NO_HOUSEHOLD[0])
        return home

    def join(self, label: str, member: Any, member_second: Any, newcomer: Any, newcomer_second: Any,
                       encoder: str | None, request: gr.Request | None = None) -> str:
        """A member brings a newcomer into one of the member's households (named `label`): both show fresh
        step-up probes. A member's probe that shows no household of that name gets the same answer whether
        such a household exists or not."""
        probes = (member, member_second, newcomer, newcomer_second)
        label = typed_text(label, "household name", *probes)
        try:
            if not label:
                raise hint("Give the name of the household to join.", "No household name")
            if not uploads.upload_path(member) or not uploads.upload_path(newcomer):
                raise hint("Give both probes: a member of the household, and the person joining it.",
                           "Two people needed")
            keys = self.requester.clients(request)
            inviter, client = self.requester.step_up(member, member_second, encoder, keys)
            joining, counted = self.requester.step_up(newcomer, newcomer_second, encoder, keys)
            client = client or counted
            member_id = self.mem.verify(inviter, "Inviting someone", client=client)
            home = self.named(member_id, label)
            try:
                home = self.mem.add_member(home.id, probe=inviter, member_probe=joining, client=client)
            except GroupNotFoundError:  # the member left it in the meantime
                raise fail(NO_HOUSEHOLD[1], NO_HOUSEHOLD[0]) from None
        finally:
            uploads.discard(*probes)
        return (f"**{render.esc(home.member_labels[-1])}** joined **{render.esc(home.label)}**: its members are "
                f"{', '.join(render.esc(name) for name in home.member_labels)}. Each of them now reads its notes "
                "with their own probe.")

    def leave(self, label: str, probe: Any, second: Any, encoder: str | None,
                        request: gr.Request | None = None) -> str:
        """The person a fresh step-up probe shows leaves their household named `label` (the last member to
        leave takes it and its notes with them). A household they are not in reads as one that does not exist."""
        label = typed_text(label, "household name", probe, second)
        try:
            if not label:
                raise hint("Give the name of the household to leave.", "No household name")
            proof, client = self.requester.step_up(probe, second, encoder, self.requester.clients(request))
            person = self.mem.verify(proof, "Leaving a household", client=client)
            home = self.named(person, label)
            try:
                left = self.mem.remove_member(home.id, person, probe=proof, client=client)
            except GroupNotFoundError:  # left in the meantime
                raise fail(NO_HOUSEHOLD[1], NO_HOUSEHOLD[0]) from None
        finally:
            uploads.discard(probe, second)
        name = render.esc(home.label)
        if left is None:
            return f"You were the last member of **{name}**: it is gone, with its notes."
        return f"You left **{name}**: its notes no longer reach you. Its members now: " + ", ".join(
            render.esc(n) for n in left.member_labels) + "."
