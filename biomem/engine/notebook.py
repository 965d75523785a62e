"""Notes: add, read, list, rewrite, delete and trace the notes of a person the gate already admitted (or the
operator named). Every read goes through the person's reach (their own notes and their groups', less those
hidden from them), so an id of anyone else's note is NoteNotFoundError, as for an id that never existed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import InvalidInputError, NotAuthorisedError, NoteNotFoundError
from ..notes.agent import MemoryAgent
from ..notes.llm import LLM
from ..stores import MemoryStore, SearchIndex
from ..stores.filters import Filter
from ..stores.records import Identity, Note, check_id
from .households import Households


class Notebook:
    """The note calls, for an admitted person: arguments arrive checked (the façade and sessions check them)."""

    def __init__(self, store: MemoryStore, agent: MemoryAgent, partitions: SearchIndex, llm: LLM,
                 households: Households) -> None:
        self.store = store
        self.agent = agent
        self.partitions = partitions
        self.llm = llm
        self.households = households

    def add(self, writer: Identity, text: str, when: str, *, scope: int | None = None,
            hidden_from: Sequence[Any] = (), metadata: dict[str, Any] | None = None, infer: bool = True) -> Note:
        """Remember `text` for `writer` (a person, or a group for the operator's import), in `scope` (one of the
        writer's groups) if given, kept from the members `hidden_from`."""
        owner, author, hidden = self._placement(writer, scope, hidden_from)
        (note_id,) = self.agent.ingest(owner, [text], [when], infer=bool(infer), author=author,
                                       metadata=metadata, hidden_from=hidden)
        return self.store.get_note(owner, note_id)

    def _placement(self, writer: Identity, scope: int | None, hidden_from: Sequence[Any]) -> tuple[int, int | None,
                                                                                                    list[int]]:
        """(owner, author, hidden member ids) of a note `writer` writes into `scope`."""
        if writer.kind == "group":  # the operator's import into a group: nobody wrote it
            if scope is not None:
                raise InvalidInputError("a note imported into a group takes no scope")
            return writer.id, None, self.households.check_audience(self.store.group(writer.id), None, hidden_from)
        if scope is None:
            if hidden_from:
                raise InvalidInputError("hidden_from applies to a household's note: give its scope too")
            return writer.id, writer.id, []
        group = self.households.member_group(writer.id, check_id(scope, "group"))
        return group.id, writer.id, self.households.check_audience(group, writer.id, hidden_from)

    def add_many(self, owner: Identity, texts: list[str], stamps: list[str], batch_size: int = 256) -> list[int]:
        """A trusted bulk import of `owner`'s history (a person's, or a group's with no author), embedded in batches;
        returns the note ids."""
        author = owner.id if owner.kind == "person" else None
        ids: list[int] = []
        for start in range(0, len(texts), batch_size):
            ids += self.agent.ingest(owner.id, texts[start:start + batch_size], stamps[start:start + batch_size],
                                     author=author)
        return ids

    def get(self, person: int, note_id: int) -> Note:
        """One of the notes `person` may read (anyone else's id raises NoteNotFoundError)."""
        owners, excluded = self.households.reach([person])
        note = self.store.find_note(owners, note_id)
        if note.id in excluded:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return note

    def listing(self, person: int, where: Filter | None = None, offset: int = 0,
                limit: int | None = None) -> list[Note]:
        """The notes `person` may read that match `where`, oldest first, `limit` from `offset` (a broad read: the
        caller proved the person at the step-up τ)."""
        owners, excluded = self.households.reach([person])
        return self.store.list_notes(owners, where=where, excluded=excluded, offset=offset, limit=limit)[0]

    def update(self, person: int, note_id: int, text: str) -> Note:
        """Rewrite one of `person`'s notes, or a group note they wrote (analysed and embedded again)."""
        note = self.get(person, note_id)
        if note.author != person:
            raise NotAuthorisedError("only the member who wrote a household's note may change it")
        note = self.agent.rewrite(note.owner, note.id, text, actor=person)
        self.llm.drop_owner(note.owner)
        return note

    def delete(self, person: int, note_id: int, *, keep_history: bool = False, timeout: float = 10.0) -> Note:
        """Delete a note `person` may read, its derived words and (unless `keep_history`) its text in the history,
        out of the write-ahead log before this returns; returns what was deleted."""
        owner = self.get(person, note_id).owner
        self.agent.take_back(owner, note_id)  # no derived copy of its words outlives it (docs/erasure.md)
        note, generation = self.store.delete_note(owner, note_id, keep_history=keep_history, actor=person)
        self.partitions.deleted(owner, note_id, generation)
        self.llm.drop_owner(owner)
        self.store.checkpoint(timeout)
        return note

    def history(self, person: int, note_id: int) -> list[dict[str, Any]]:
        """Every event of a note `person` may read. A group's deleted note keeps no list of whom it was hidden
        from, so its history is shown to nobody; a person's own deleted note's is."""
        try:
            owner = self.get(person, note_id).owner
        except NoteNotFoundError:
            owner = person
        return self.store.history(owner, note_id)
