"""What a gated search or question returns: SearchResult and Answer, each with the view a requester
may be shown (`as_dict()`, under the store's disclosure policy)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..identity.disclosure import linked_view, note_view
from ..identity.gate import GateResult
from ..stores.records import Note


@dataclass
class SearchResult:
    """Retrieval under the gate: the decision, the admitted top-K, how many notes stayed out.

    `gate` is the full decision for trusted in-process code (evaluation, tests); `as_dict()`
    is what a requester may be shown, under the store's disclosure policy. `linked` holds the
    notes reached through the hits' links (A-Mem's Zettelkasten), each with the id of the hit
    it came from; always notes of the hit's owner.
    """

    gate: GateResult
    notes: list[tuple[Note, float]]
    gated_out: int
    view: dict[str, Any] = field(default_factory=dict)  # disclosed gate and kept-out views
    linked: list[tuple[Note, int]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"results": [note_view(n, s) for n, s in self.notes], **linked_view(self.linked), **self.view}


@dataclass
class Answer:
    """An answer, the notes it read (hits, then linked notes with the hit they came from), the gate
    decision and the exact prompt. `omitted`: retrieved notes left out of the prompt, lowest-ranked
    first, to keep it within its token budget (BioMemory's prompt_tokens)."""

    text: str
    notes: list[tuple[Note, float]]
    gate: GateResult
    prompt: str
    gated_out: int = 0
    view: dict[str, Any] = field(default_factory=dict)
    linked: list[tuple[Note, int]] = field(default_factory=list)
    omitted: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"answer": self.text, "results": [note_view(n, s) for n, s in self.notes], **linked_view(self.linked),
                "omitted": self.omitted, **self.view}
