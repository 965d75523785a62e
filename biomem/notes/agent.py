"""A-Mem's agentic note life cycle, confined to one owner: build, embed, link, evolve.

Note construction asks the LLM for keywords, context and tags; the embedding covers
content + context + keywords + tags; the 5 nearest neighbours *of the same owner* go to the
evolution step, whose links (note ids) and neighbour updates can only touch that owner's
notes. In a group, neighbours also share the new note's author and audience (the members it is
hidden from): evolution never carries a hidden note's words into a note its excluded member
reads, nor one member's words into another's note, which would outlive forgetting them. A
note whose tags evolution strengthened, and evolved neighbours, are embedded again: every
stored vector embeds its note as stored. Deleting or rewriting a note takes back what its evolution wrote into
its neighbours, and what the evolution of every later note that read text derived from it wrote (take_back): the
notes an evolve prompt showed are kept as the new note's sources. So no derived copy of its words outlives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import NoteNotFoundError
from ..stores import NoteStore, SearchIndex
from ..stores.base import Within
from ..stores.records import Note
from .llm import LLM, Draft
from .textenc import TextEncoder


def embedding_text(content: str, context: str, keywords: Sequence[str], tags: Sequence[str]) -> str:
    """The string e_i embeds: content, context, keywords and tags (A-Mem)."""
    return f"{content} {context} {', '.join(keywords)} {', '.join(tags)}"


class MemoryAgent:
    """Writes notes of one owner at a time through the store, keeping partitions in step."""

    def __init__(self, store: NoteStore, partitions: SearchIndex, text: TextEncoder, llm: LLM, *,
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

    def _store(self, owner_id: int, draft: Draft, vector: np.ndarray, extra: dict[str, Any],
               links: Sequence[int] = ()) -> int:
        """Insert one note and its vector as they are, with its links to those of `links` not deleted meanwhile
        (one transaction: an add that succeeds is stored whole, one that fails wrote nothing)."""
        note = {**vars(draft), **extra, "links": list(links)}
        (note_id,), generation = self.store.insert_notes(owner_id, [note], vector[None, :])
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
        if decision is None or not decision.should_evolve:
            return self._store(owner_id, draft, vector, extra)
        # what evolution writes derives from the neighbours' text the prompt showed: their ids are kept
        # (sources), and tags it strengthened are an "evolve" the note caused itself (own_tags), both to be
        # taken back when one of those texts goes (take_back)
        extra = {**extra, "sources": [n.id for n in notes]}
        if "strengthen" in decision.actions and decision.tags_to_update \
                and list(decision.tags_to_update) != draft.tags:
            extra["own_tags"], draft.tags = list(draft.tags), list(decision.tags_to_update)
            vector = self.embed([draft])[0]  # the stored vector embeds the note as stored (A-Mem)
        allowed = {n.id for n in notes}
        links = [i for i in decision.suggested_connections if i in allowed]  # never another owner's
        note_id = self._store(owner_id, draft, vector, extra, links)
        if "update_neighbor" in decision.actions:
            self._update_neighbours(owner_id, note_id, notes, decision.new_context_neighborhood,
                                    decision.new_tags_neighborhood)
        return note_id

    def _update_neighbours(self, owner_id: int, cause: int, notes: Sequence[Note], contexts: Sequence[str],
                           tags: Sequence[Sequence[str]]) -> None:
        """Write the evolution of note `cause` into its neighbours, each "evolve" event naming `cause` (to be undone
        when `cause` is deleted or rewritten: undo_evolution)."""
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
            try:
                _, generation = self.store.update_note(owner_id, note.id, "evolve", vector, cause=cause,
                                                       context=note.context, tags=note.tags)
            except NoteNotFoundError:  # deleted since it was read (nothing written): there is nothing to evolve
                continue
            self.partitions.updated(owner_id, note.id, vector, generation)

    def take_back(self, owner_id: int, note_id: int) -> list[int]:
        """Before note `note_id` is deleted or rewritten, take back every text derived from it: what its evolution
        wrote (undo_evolution), and what the evolution of each later note whose prompt showed it, or showed a
        note then holding text derived from it, wrote (into that note's tags and its neighbours), and so on down
        the chain. Returns the notes whose evolution was undone, in the order they were added."""
        events, sources = self.store.derivations(owner_id, note_id)
        causes, derived = {note_id: None}, {note_id}  # notes whose evolution is undone; notes holding derived text
        for _, note, event, cause in events:
            if event == "add" and note != note_id and derived.intersection(sources.get(note, ())):
                causes[note] = None  # its prompt showed derived text: all its evolution wrote derives from it
            elif event == "evolve" and cause in causes:
                derived.add(note)
            elif event == "update":
                derived.discard(note)  # re-analysed from its content alone
        self.undo_evolution(owner_id, list(causes), besides=note_id)  # the note itself is about to go or change
        return list(causes)

    def undo_evolution(self, owner_id: int, causes: Sequence[int], besides: int | None = None) -> list[int]:
        """Take back what the evolution of the notes `causes` wrote (into their neighbours, and into their own tags),
        as if each were taken back in turn, oldest first; returns the notes restored, each embedded and written
        once. `besides` (a note about to be deleted or re-analysed) is left as it is.

        A note goes back to its context and tags before the first evolve event a cause wrote on it, and its history
        loses the evolve (and unevolve) events from that one on: each was written from a text that held the
        cause's words. A later update of the note (re-analysed from its content alone) ends that span: its fields
        then stay, only that update's before goes, and a cause's evolve event after the update starts another.
        Earlier evolutions survive; the note is embedded again and one "unevolve" event per span, without a
        before, records what it holds now."""
        sinces: dict[int, list[int]] = {}
        for cause in causes:
            for note_id, since in self.store.evolved_by(owner_id, cause).items():
                if note_id != besides:
                    sinces.setdefault(note_id, []).append(since)
        restored: list[tuple[Note, list[tuple[int, int | None]]]] = []
        for note_id, rows in sinces.items():
            try:
                events, note = self.store.history(owner_id, note_id), self.store.get_note(owner_id, note_id)
            except NoteNotFoundError:  # deleted meanwhile: nothing of it to restore
                continue
            spans: list[tuple[int, int | None]] = []
            for since in sorted(rows):
                if spans and (spans[-1][1] is None or since < spans[-1][1]):
                    continue  # inside a span already taken back
                spans.append((since, next((e["id"] for e in events if e["id"] > since and e["event"] == "update"),
                                          None)))
            since, until = spans[-1]
            if until is None:
                before = next(e["before"] for e in events if e["id"] == since)
                note.context, note.tags = before["context"], before["tags"]
            restored.append((note, spans))
        if not restored:
            return []
        for (note, spans), vector in zip(restored, self.embed([note for note, _ in restored])):
            try:
                for since, until in spans:
                    _, generation = self.store.unevolve(owner_id, note.id, since, until, note.context, note.tags,
                                                        vector)
            except NoteNotFoundError:
                continue
            self.partitions.updated(owner_id, note.id, vector, generation)
        return [note.id for note, _ in restored]

    def rewrite(self, owner_id: int, note_id: int, content: str, *, actor: int | None = None) -> Note:
        """Replace an owned note's content: analysed and embedded again, history kept (made by `actor`); what its
        old text's evolution wrote into its neighbours is taken back first (undo_evolution)."""
        before = self.store.get_note(owner_id, note_id)
        draft = self.draft(content, before.timestamp)
        vector = self.embed([draft])[0]
        self.take_back(owner_id, note_id)  # once the analysis succeeded: a failed LLM call changes nothing
        note, generation = self.store.update_note(owner_id, note_id, "update", vector, actor, content=content,
                                                  keywords=draft.keywords, tags=draft.tags,
                                                  context=draft.context)
        self.partitions.updated(owner_id, note_id, vector, generation)
        return note
