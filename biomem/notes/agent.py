"""A-Mem's agentic note life cycle, confined to one owner: build, embed, link, evolve.

Note construction asks the LLM for keywords, context and tags; the embedding covers
content + context + keywords + tags; the 5 nearest neighbours *of the same owner* go to the
evolution step, whose links (note ids) and neighbour updates can only touch that owner's
notes. In a group, neighbours also share the new note's author and audience (the members it is
hidden from): evolution never carries a hidden note's words into a note its excluded member
reads, nor one member's words into another's note, which would outlive forgetting them. A
note whose tags evolution strengthened, and evolved neighbours, are embedded again: every
stored vector embeds its note as stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..stores import MemoryStore, SearchIndex
from ..stores.base import Within
from ..stores.records import Note
from .llm import LLM, Draft
from .textenc import TextEncoder


def embedding_text(content: str, context: str, keywords: Sequence[str], tags: Sequence[str]) -> str:
    """The string e_i embeds: content, context, keywords and tags (A-Mem)."""
    return f"{content} {context} {', '.join(keywords)} {', '.join(tags)}"


class MemoryAgent:
    """Writes notes of one owner at a time through the store, keeping partitions in step."""

    def __init__(self, store: MemoryStore, partitions: SearchIndex, text: TextEncoder, llm: LLM, *,
                 neighbours: int = 5) -> None:
        self.store = store
        self.partitions = partitions
        self.text = text
        self.llm = llm
        self.neighbours = neighbours

    def draft(self, content: str, timestamp: str) -> Draft:
        """Note construction: one LLM analysis of the content."""
        meta = self.llm.analyze(content)
        return Draft(content=content, timestamp=timestamp, keywords=meta.keywords,
                     tags=meta.tags, context=meta.context)

    def embed(self, drafts: Sequence[Draft | Note], batch_size: int = 64) -> np.ndarray:
        return self.text.encode([embedding_text(d.content, d.context, d.keywords, d.tags)
                                 for d in drafts], batch_size=batch_size)

    def ingest(self, owner_id: int, contents: Sequence[str], timestamps: Sequence[str], *,
               infer: bool = True, author: int | None = None, metadata: dict[str, Any] | None = None,
               hidden_from: Sequence[int] = ()) -> list[int]:
        """Build, embed (in one batch), then link and evolve each note in order; returns ids.
        infer=False stores each text as given: embedded, no LLM analysis, no links, no evolution.
        `author` wrote them (None: an operator's import into a group); `hidden_from`: members of the
        owner group who never read them."""
        extra = {"author": author, "metadata": metadata or {}, "hidden_from": list(hidden_from)}
        if not infer:
            drafts = [Draft(content=c, timestamp=t, keywords=[], tags=[], context="")
                      for c, t in zip(contents, timestamps)]
            return [self._store(owner_id, d, v, extra) for d, v in zip(drafts, self.embed(drafts))]
        drafts = [self.draft(c, t) for c, t in zip(contents, timestamps)]
        vectors = self.embed(drafts)
        return [self._link_and_store(owner_id, d, v, extra) for d, v in zip(drafts, vectors)]

    def _store(self, owner_id: int, draft: Draft, vector: np.ndarray, extra: dict[str, Any]) -> int:
        """Insert one note and its vector as they are."""
        (note_id,), generation = self.store.insert_notes(owner_id, [{**vars(draft), **extra}], vector[None, :])
        self.partitions.added(owner_id, [note_id], vector[None, :], generation)
        return note_id

    def _circle(self, owner_id: int, author: int | None, hidden_from: Sequence[int]) -> Within | None:
        """The notes a new note of a group may link to and evolve: those of the same author and hidden from
        exactly the same members. None for a person's own note (all of the partition is theirs)."""
        if author == owner_id:
            return None
        circle = (author, frozenset(hidden_from))
        return Within(only=frozenset(n for n, found in self.store.circles(owner_id).items() if found == circle))

    def _link_and_store(self, owner_id: int, draft: Draft, vector: np.ndarray, extra: dict[str, Any]) -> int:
        hits = self.partitions.search(owner_id, vector, self.neighbours,
                                      self._circle(owner_id, extra["author"], extra["hidden_from"]))
        scores = dict(hits)
        notes = self.store.get_notes(owner_id, [i for i, _ in hits])  # same owner and circle by construction
        neighbours = [(n, scores[n.id]) for n in notes]
        decision = self.llm.evolve(draft, neighbours) if neighbours else None
        if decision and decision.should_evolve and "strengthen" in decision.actions \
                and decision.tags_to_update and list(decision.tags_to_update) != draft.tags:
            draft.tags = list(decision.tags_to_update)
            vector = self.embed([draft])[0]  # the stored vector embeds the note as stored (A-Mem)
        note_id = self._store(owner_id, draft, vector, extra)
        if decision is None or not decision.should_evolve:
            return note_id
        allowed = {n.id for n in notes}
        links = [i for i in decision.suggested_connections if i in allowed]  # never another owner's
        if links:
            self.store.add_links(owner_id, note_id, links)
        if "update_neighbor" in decision.actions:
            self._update_neighbours(owner_id, notes, decision.new_context_neighborhood,
                                    decision.new_tags_neighborhood)
        return note_id

    def _update_neighbours(self, owner_id: int, notes: Sequence[Note], contexts: Sequence[str],
                           tags: Sequence[Sequence[str]]) -> None:
        changed = []
        for i, note in enumerate(notes):
            new_context = contexts[i] if i < len(contexts) and contexts[i] else note.context
            new_tags = list(tags[i]) if i < len(tags) and tags[i] else note.tags
            if (new_context, new_tags) != (note.context, note.tags):
                note.context, note.tags = new_context, new_tags
                changed.append(note)
        if not changed:
            return
        for note, vector in zip(changed, self.embed(changed)):
            _, generation = self.store.update_note(owner_id, note.id, "evolve", vector,
                                                   context=note.context, tags=note.tags)
            self.partitions.updated(owner_id, note.id, vector, generation)

    def rewrite(self, owner_id: int, note_id: int, content: str, *, actor: int | None = None) -> Note:
        """Replace an owned note's content: analysed and embedded again, history kept (made by `actor`)."""
        before = self.store.get_note(owner_id, note_id)
        draft = self.draft(content, before.timestamp)
        vector = self.embed([draft])[0]
        note, generation = self.store.update_note(owner_id, note_id, "update", vector, actor, content=content,
                                                  keywords=draft.keywords, tags=draft.tags,
                                                  context=draft.context)
        self.partitions.updated(owner_id, note_id, vector, generation)
        return note
