"""The notes, links and history logic both stores share, every row read and written under its owner.

NoteLogic holds what a note operation does, the same in both dialects, over the hooks of
biomem.stores.dialect.Dialect and a few of its own: how a note row is read whole (_select_notes), how an
embedding is stored (_stored, _vector) and a page's LIMIT and OFFSET (_page). Every change bumps the owner's
generation, which the search indexes follow. The dialects' own halves: biomem.stores.sqlite.note_rows,
biomem.stores.pg.note_rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import NoteNotFoundError
from .derivations import Event, derivations
from .dialect import Dialect
from .filter_sql import compile_filter
from .filters import Filter
from .records import HISTORY_COLUMNS, Note, check_id, history_events, history_row

# The note fields update_note may change.
NOTE_FIELDS = frozenset({"content", "timestamp", "keywords", "tags", "context", "embedding"})


class NoteLogic(Dialect):
    """Notes, links and history of a store, over the hooks its dialect supplies (see the module)."""

    DIALECT: str  # compile_filter's dialect: "sqlite" or "postgres"
    get_notes_among: Callable[[Sequence[int], Iterable[int]], list[Note]]  # each dialect reads many ids its own way
    _select_notes: Callable[[Any, str, list[Any]], list[Note]]  # (conn, where, args): whole notes, in row order
    _stored: Callable[[np.ndarray], Any]  # an embedding as its column takes it
    _vector: Callable[[Any], np.ndarray]  # an embedding column's value as float32
    _page: Callable[[int | None, int], list[Any]]  # (limit, offset): the LIMIT and OFFSET parameters
    get_meta: Callable[[str, str | None], str | None]

    def generation(self, owner_id: int) -> int:
        """The owner's partition generation (-1 for no such owner): it moves with every change of its notes."""
        owner_id, m = int(owner_id), self.MARK
        row = self.memo(("generation", owner_id), lambda: self._fetch_one(
            f"SELECT generation FROM identities WHERE id = {m}", [owner_id]))
        return int(row[0]) if row else -1

    def _record(self, conn: Any, owner_id: int, note_id: int, event: str, before: dict | None, after: dict | None,
                actor: int | None = None, cause: int | None = None) -> None:
        """One history row (biomem.stores.records.history_row) in the caller's transaction."""
        conn.execute(f"INSERT INTO history ({HISTORY_COLUMNS}) VALUES ({', '.join([self.MARK] * 8)})",
                     history_row(owner_id, note_id, event, before, after, actor, cause))

    def get_note(self, owner_id: int, note_id: int) -> Note:
        """The note `note_id` if `owner_id` owns it, else NoteNotFoundError."""
        return self.find_note([owner_id], note_id)

    def get_notes(self, owner_id: int, note_ids: Iterable[int]) -> list[Note]:
        """Notes of `owner_id` among `note_ids`, in the given order (others are skipped)."""
        return self.get_notes_among([owner_id], note_ids)

    def all_notes(self, owner_id: int) -> list[Note]:
        """Every note of `owner_id`, oldest first."""
        with self._reading([owner_id]) as conn:
            return self._select_notes(conn, f"owner_id = {self.MARK} ORDER BY timestamp, id", [int(owner_id)])

    def find_note(self, owners: Sequence[int], note_id: int) -> Note:
        """The note `note_id` if one of `owners` owns it, else NoteNotFoundError."""
        owners = [int(o) for o in owners]
        owned, args = self._among("owner_id", owners)
        with self._reading(owners) as conn:
            found = self._select_notes(conn, f"id = {self.MARK} AND {owned}", [check_id(note_id), *args])
        if not found:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return found[0]

    def list_notes(self, owners: Sequence[int], *, where: Filter | None = None, excluded: Collection[int] = (),
                   offset: int = 0, limit: int | None = None) -> tuple[list[Note], int]:
        """One page of the notes of `owners` that match `where` and are not `excluded`, oldest first, and
        how many there are in all (a negative limit is none, a negative offset 0)."""
        condition, args = self._condition(owners, where, excluded)
        m = self.MARK
        with self._reading([int(o) for o in owners]) as conn:
            (total,) = conn.execute(f"SELECT count(*) FROM notes WHERE {condition}", args).fetchone()
            notes = self._select_notes(conn, f"{condition} ORDER BY timestamp, id LIMIT {m} OFFSET {m}",
                                       [*args, *self._page(limit, offset)])
        return notes, int(total)

    def note_ids_where(self, owner_id: int, where: Filter) -> np.ndarray:
        """Ids of the owner's notes that match `where` (a search's filter, applied before its top-K)."""
        condition, args = self._condition([owner_id], where, ())
        with self._reading([owner_id]) as conn:
            return np.array([r[0] for r in conn.execute(f"SELECT id FROM notes WHERE {condition}", args)],
                            dtype=np.int64)

    def _condition(self, owners: Sequence[int], where: Filter | None, excluded: Collection[int]) -> tuple[str, list]:
        """The WHERE condition (and its parameters) of the notes of `owners` matching `where`, not `excluded`."""
        sql, args = self._among("owner_id", [int(o) for o in owners])
        if excluded:
            kept, ids = self._among("id", [int(i) for i in excluded])
            sql, args = f"{sql} AND NOT ({kept})", [*args, *ids]
        if where is not None:
            expression, values = compile_filter(where, self.DIALECT)
            sql, args = f"{sql} AND ({expression})", [*args, *values]
        return sql, args

    def group_ids(self, identity_id: int) -> list[int]:
        """Ids of the groups a person is a member of, oldest first (what a search reaches)."""
        identity_id = int(identity_id)

        def read() -> tuple[int, ...]:
            with self._reading([identity_id]) as conn:
                return tuple(r[0] for r in conn.execute(
                    f"SELECT group_id FROM members WHERE identity_id = {self.MARK} ORDER BY group_id", [identity_id]))
        return list(self.memo(("groups", identity_id), read))

    def hidden_notes(self, people: Sequence[int], owners: Sequence[int]) -> set[int]:
        """Ids of the notes of `owners` (groups) hidden from any of `people`."""
        if not people or not owners:
            return set()
        people, owners = tuple(map(int, people)), tuple(map(int, owners))

        def read() -> frozenset[int]:
            readers, reader_args = self._among("identity_id", people)
            owned, owner_args = self._among("owner_id", owners)
            with self._reading(owners) as conn:
                return frozenset(r[0] for r in conn.execute(
                    f"SELECT note_id FROM hidden WHERE {readers} AND {owned}", [*reader_args, *owner_args]))
        return set(self.memo(("hidden", people, owners), read))

    def circles(self, owner_id: int) -> dict[int, tuple[int | None, frozenset[int]]]:
        """Note id -> (its author, the members it is hidden from) for every note of the owner: whose words a
        note holds and who reads it, which evolution must not mix (biomem.notes.agent)."""
        found: dict[int, tuple[int | None, set[int]]] = {}
        with self._reading([owner_id]) as conn:
            for note, author, hidden in conn.execute(
                    "SELECT n.id, n.author_id, h.identity_id FROM notes n LEFT JOIN hidden h "
                    f"ON h.owner_id = n.owner_id AND h.note_id = n.id WHERE n.owner_id = {self.MARK}",
                    [int(owner_id)]):
                people = found.setdefault(note, (author, set()))[1]
                if hidden is not None:
                    people.add(hidden)
        return {note: (author, frozenset(people)) for note, (author, people) in found.items()}

    def note_vectors(self, owner_id: int) -> tuple[np.ndarray, np.ndarray | None, int]:
        """(note ids, embedding matrix or None, generation) of one owner's partition, oldest first."""
        with self._reading([owner_id]) as conn:
            generation = self.generation(owner_id)
            rows = conn.execute(f"SELECT id, embedding FROM notes WHERE owner_id = {self.MARK} "
                                "ORDER BY timestamp, id", [int(owner_id)]).fetchall()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        return ids, (np.stack([self._vector(r[1]) for r in rows]) if rows else None), generation

    def update_note(self, owner_id: int, note_id: int, event: str, vector: np.ndarray | None = None,
                    actor: int | None = None, cause: int | None = None, **fields: Any) -> tuple[Note, int]:
        """Change fields of an owned note and record before/after; returns it and the generation."""
        values = {k: json.dumps(v) if k in ("keywords", "tags") else v for k, v in fields.items()}
        if vector is not None:
            values["embedding"] = self._stored(vector)
        unknown = set(values) - NOTE_FIELDS
        if unknown:
            raise ValueError(f"not note fields: {sorted(unknown)}")
        m = self.MARK
        with self._writing([owner_id]) as conn:
            before = self.get_note(owner_id, note_id)
            conn.execute(f"UPDATE notes SET {', '.join(f'{c} = {m}' for c in values)} "
                         f"WHERE owner_id = {m} AND id = {m}", [*values.values(), int(owner_id), int(note_id)])
            after = self.get_note(owner_id, note_id)
            self._record(conn, owner_id, note_id, event, before.snapshot(), after.snapshot(), actor, cause)
            generation = self._bump_generation(conn, owner_id)
        return after, generation

    def evolved_by(self, owner_id: int, cause_id: int) -> dict[int, int]:
        """Note id -> id of the first "evolve" history row that note `cause_id`'s evolution wrote on it, for each
        note of the owner it evolved that still exists."""
        m = self.MARK
        with self._reading([owner_id]) as conn:
            return dict(conn.execute(
                f"SELECT h.note_id, min(h.id) FROM history h JOIN notes n ON n.id = h.note_id AND n.owner_id = {m} "
                f"WHERE h.owner_id = {m} AND h.cause_id = {m} AND h.event = 'evolve' GROUP BY h.note_id",
                [int(owner_id), int(owner_id), int(cause_id)]))

    def derivations(self, owner_id: int, note_id: int) -> tuple[list[Event], dict[int, list[int]]]:
        """biomem.stores.derivations.derivations of the owner's note."""
        with self._reading([owner_id]) as conn:
            return derivations(conn.execute, owner_id, note_id, self.MARK)

    def unevolve(self, owner_id: int, note_id: int, since: int, until: int | None, context: str, tags: list[str],
                 vector: np.ndarray) -> tuple[Note, int]:
        """Undo evolution from history row `since` up to row `until` (an update; None: to the end): its evolve and
        unevolve rows go, the update's before goes, the note takes `context`, `tags` and `vector`, and one
        "unevolve" event records the result (no before). Returns the note and the generation."""
        owner_id, note_id, m = int(owner_id), int(note_id), self.MARK
        with self._writing([owner_id]) as conn:
            self.get_note(owner_id, note_id)
            before_until, bound = (f" AND id < {m}", [until]) if until is not None else ("", [])
            conn.execute(f"DELETE FROM history WHERE owner_id = {m} AND note_id = {m} AND id >= {m}{before_until} "
                         "AND event IN ('evolve', 'unevolve')", [owner_id, note_id, int(since), *bound])
            if until is not None:
                conn.execute(f"UPDATE history SET before = NULL WHERE owner_id = {m} AND id = {m}", [owner_id, until])
            conn.execute(f"UPDATE notes SET context = {m}, tags = {m}, embedding = {m} WHERE owner_id = {m} "
                         f"AND id = {m}", [context, json.dumps(tags), self._stored(vector), owner_id, note_id])
            after = self.get_note(owner_id, note_id)
            self._record(conn, owner_id, note_id, "unevolve", None, after.snapshot())
            generation = self._bump_generation(conn, owner_id)
        return after, generation

    def delete_note(self, owner_id: int, note_id: int, *, keep_history: bool = False,
                    actor: int | None = None) -> tuple[Note, int]:
        """Delete an owned note (its links cascade); returns it and the owner's new generation.
        Its history keeps only events and times unless `keep_history` (the audit trail with texts)."""
        m = self.MARK
        with self._writing([owner_id]) as conn:
            before = self.get_note(owner_id, note_id)
            conn.execute(f"DELETE FROM notes WHERE owner_id = {m} AND id = {m}", [int(owner_id), int(note_id)])
            if not keep_history:
                conn.execute(f"UPDATE history SET before = NULL, after = NULL WHERE owner_id = {m} AND note_id = {m}",
                             [int(owner_id), int(note_id)])
            self._record(conn, owner_id, note_id, "delete", before.snapshot() if keep_history else None, None, actor)
            generation = self._bump_generation(conn, owner_id)
        return before, generation

    def history(self, owner_id: int, note_id: int) -> list[dict[str, Any]]:
        """The note's history events, oldest first; NoteNotFoundError when it has none."""
        m = self.MARK
        with self._reading([owner_id]) as conn:
            rows = conn.execute(f"SELECT id, note_id, event, before, after, at, actor_id FROM history "
                                f"WHERE owner_id = {m} AND note_id = {m} ORDER BY id",
                                [int(owner_id), check_id(note_id)]).fetchall()
        if not rows:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return history_events(rows)

    def note_total(self) -> int:
        """Number of notes of all owners (kept by triggers: count(*) is slow on large stores)."""
        return int(self.get_meta("note_total", "0"))
