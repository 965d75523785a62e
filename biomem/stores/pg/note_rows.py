"""The notes, links and history of the PostgreSQL store, each statement under its owner twice over.

Every query names its owner in its WHERE clause, and its transaction admits only that owner, or the owners
a read spans (a person and their groups: find_note, list_notes, hidden_notes) (row-level security,
biomem.stores.pg.schema): a query that forgot the first still returns and changes nothing of anyone else.
Semantics are the SQLite store's (biomem.stores.sqlite.note_rows).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import psycopg

from ...errors import NoteNotFoundError
from ..derivations import Event, derivations, record_sources
from ..filter_sql import compile_filter
from ..filters import Filter
from ..records import (
    HISTORY_COLUMNS,
    NOTE_COLUMNS,
    Identity,
    Note,
    add_events,
    authorship,
    check_id,
    history_events,
    history_row,
)


def as_array(vector: Any) -> np.ndarray:
    """A pgvector value (pgvector.Vector, or an array) as float32 numpy."""
    return np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32)


class PgNoteRows:
    """Notes, links and history of a PostgresStore, which supplies transactions and identity lookups."""

    transaction: Callable[..., AbstractContextManager[psycopg.Connection]]
    identity: Callable[[int], Identity]
    get_meta: Callable[[str, str | None], str | None]

    def generation(self, owner_id: int) -> int:
        with self.transaction() as conn:
            row = conn.execute("SELECT generation FROM identities WHERE id = %s", [int(owner_id)]).fetchone()
        return int(row[0]) if row else -1

    @staticmethod
    def _bump_generation(conn: psycopg.Connection, owner_id: int) -> int:
        return conn.execute("UPDATE identities SET generation = generation + 1 WHERE id = %s RETURNING generation",
                            [owner_id]).fetchone()[0]

    def insert_notes(self, owner_id: int, notes: list[dict[str, Any]],
                     vectors: np.ndarray) -> tuple[list[int], int]:
        """Insert notes (content, timestamp, keywords, tags, context; optionally author, metadata, hidden_from,
        links) of one owner with their links, in one transaction: (new ids, generation). `links` names notes of
        the owner already stored; one deleted meanwhile is skipped (_still_there), never an error."""
        with self.transaction([owner_id]) as conn:
            self.identity(owner_id)
            targets = self._still_there(conn, owner_id, {int(t) for note in notes
                                                         for t in (*note.get("links", ()), *note.get("sources", ()))})
            ids = []
            for note, vector in zip(notes, vectors):
                note_id = conn.execute(
                    "INSERT INTO notes (owner_id, content, timestamp, keywords, tags, context, embedding, author_id, "
                    "metadata) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb) RETURNING id",
                    [owner_id, note["content"], note["timestamp"], json.dumps(note["keywords"]),
                     json.dumps(note["tags"]), note["context"], np.asarray(vector, np.float32),
                     *authorship(owner_id, note)]).fetchone()[0]
                ids.append(note_id)
                hidden = [(owner_id, note_id, int(i)) for i in note.get("hidden_from", ())]
                if hidden:
                    with conn.cursor() as cursor:
                        cursor.executemany("INSERT INTO hidden VALUES (%s, %s, %s)", hidden)
                for event, before, after in add_events(note):
                    self._record(conn, owner_id, note_id, event, before, after,
                                 note.get("author") if event == "add" else None, note_id if event == "evolve" else None)
                record_sources(conn.execute, owner_id, note_id,
                               [s for s in note.get("sources", ()) if int(s) in targets], "%s")
                links = [(owner_id, note_id, t) for t in note.get("links", ()) if int(t) in targets]
                if links:
                    with conn.cursor() as cursor:
                        cursor.executemany("INSERT INTO links VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", links)
            generation = self._bump_generation(conn, owner_id)
        return ids, generation

    @staticmethod
    def _still_there(conn: psycopg.Connection, owner_id: int, note_ids: set[int]) -> set[int]:
        """Those of the owner's `note_ids` that exist, locked (FOR KEY SHARE) until the transaction ends: a delete
        that started first is waited for and its note left out, one that comes later waits and then takes the
        new links with its note. Taken before the transaction writes anything, so it never waits holding a lock
        a delete needs (the note count's row)."""
        if not note_ids:
            return set()
        return {r[0] for r in conn.execute("SELECT id FROM notes WHERE owner_id = %s AND id = ANY (%s) ORDER BY id "
                                           "FOR KEY SHARE", [int(owner_id), sorted(note_ids)])}

    def _notes(self, conn: psycopg.Connection, owner_id: int, where: str, args: list) -> list[Note]:
        rows = conn.execute(f"SELECT {NOTE_COLUMNS} FROM notes WHERE owner_id = %s {where}",
                            [int(owner_id), *args]).fetchall()
        return self._from_rows(conn, rows)

    @staticmethod
    def _from_rows(conn: psycopg.Connection, rows: Sequence[tuple]) -> list[Note]:
        """Notes of NOTE_COLUMNS rows, with the ids they link to and the members they are hidden from."""
        if not rows:
            return []
        owners, ids = sorted({r[1] for r in rows}), [r[0] for r in rows]
        links: dict[int, list[int]] = {i: [] for i in ids}
        hidden: dict[int, list[int]] = {i: [] for i in ids}
        for source, target in conn.execute("SELECT source_id, target_id FROM links WHERE owner_id = ANY (%s) "
                                           "AND source_id = ANY (%s) ORDER BY target_id", [owners, ids]):
            links[source].append(target)
        for note, person in conn.execute("SELECT note_id, identity_id FROM hidden WHERE owner_id = ANY (%s) "
                                         "AND note_id = ANY (%s) ORDER BY identity_id", [owners, ids]):
            hidden[note].append(person)
        return [Note.from_row(r, links[r[0]], hidden[r[0]]) for r in rows]

    def get_note(self, owner_id: int, note_id: int) -> Note:
        """The note `note_id` if `owner_id` owns it, else NoteNotFoundError."""
        with self.transaction([owner_id]) as conn:
            found = self._notes(conn, owner_id, "AND id = %s", [check_id(note_id)])
        if not found:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return found[0]

    def get_notes(self, owner_id: int, note_ids: Iterable[int]) -> list[Note]:
        """Notes of `owner_id` among `note_ids`, in the given order (others are skipped)."""
        return self.get_notes_among([owner_id], note_ids)

    def get_notes_among(self, owners: Sequence[int], note_ids: Iterable[int]) -> list[Note]:
        """Notes of any of `owners` among `note_ids`, in the given order (others are skipped): one read for a
        search's hits in several partitions."""
        wanted, owners = [int(i) for i in note_ids], [int(o) for o in owners]
        if not wanted:
            return []
        with self.transaction(owners) as conn:
            rows = conn.execute(f"SELECT {NOTE_COLUMNS} FROM notes WHERE owner_id = ANY (%s) AND id = ANY (%s)",
                                [owners, wanted]).fetchall()
            found = {n.id: n for n in self._from_rows(conn, rows)}
        return [found[i] for i in wanted if i in found]

    def all_notes(self, owner_id: int) -> list[Note]:
        """Every note of `owner_id`, oldest first."""
        with self.transaction([owner_id]) as conn:
            return self._notes(conn, owner_id, "ORDER BY timestamp, id", [])

    def find_note(self, owners: Sequence[int], note_id: int) -> Note:
        """The note `note_id` if one of `owners` owns it, else NoteNotFoundError."""
        wanted, owners = check_id(note_id), [int(o) for o in owners]
        with self.transaction(owners) as conn:
            rows = conn.execute(f"SELECT {NOTE_COLUMNS} FROM notes WHERE id = %s AND owner_id = ANY (%s)",
                                [wanted, owners]).fetchall()
            if not rows:
                raise NoteNotFoundError(f"no note {note_id} among your memories")
            return self._from_rows(conn, rows)[0]

    def list_notes(self, owners: Sequence[int], *, where: Filter | None = None, excluded: Collection[int] = (),
                   offset: int = 0, limit: int | None = None) -> tuple[list[Note], int]:
        """One page of the notes of `owners` that match `where` and are not `excluded`, oldest first, and
        how many there are in all (a negative limit is none, a negative offset 0, as in SQLite)."""
        condition, args = self._condition(owners, where, excluded)
        page = None if limit is None or int(limit) < 0 else int(limit)
        with self.transaction([int(o) for o in owners]) as conn:
            (total,) = conn.execute(f"SELECT count(*) FROM notes WHERE {condition}", args).fetchone()
            rows = conn.execute(f"SELECT {NOTE_COLUMNS} FROM notes WHERE {condition} ORDER BY timestamp, id "
                                "LIMIT %s OFFSET %s", [*args, page, max(int(offset), 0)]).fetchall()
            return self._from_rows(conn, rows), int(total)

    def note_ids_where(self, owner_id: int, where: Filter) -> np.ndarray:
        """Ids of the owner's notes that match `where` (a search's filter, applied before its top-K)."""
        condition, args = self._condition([owner_id], where, ())
        with self.transaction([owner_id]) as conn:
            return np.array([r[0] for r in conn.execute(f"SELECT id FROM notes WHERE {condition}", args)],
                            dtype=np.int64)

    @staticmethod
    def _condition(owners: Sequence[int], where: Filter | None, excluded: Collection[int]) -> tuple[str, list]:
        """The WHERE condition (and its %s parameters) of the notes of `owners` matching `where`, not `excluded`."""
        sql, args = "owner_id = ANY (%s)", [[int(o) for o in owners]]
        if excluded:
            sql += " AND NOT (id = ANY (%s))"
            args.append([int(i) for i in excluded])
        if where is not None:
            expression, values = compile_filter(where, "postgres")
            sql, args = f"{sql} AND ({expression})", [*args, *values]
        return sql, args

    def group_ids(self, identity_id: int) -> list[int]:
        """Ids of the groups a person is a member of, oldest first (what a search reaches)."""
        with self.transaction([identity_id]) as conn:
            return [r[0] for r in conn.execute("SELECT group_id FROM members WHERE identity_id = %s "
                                               "ORDER BY group_id", [int(identity_id)])]

    def hidden_notes(self, people: Sequence[int], owners: Sequence[int]) -> set[int]:
        """Ids of the notes of `owners` (groups) hidden from any of `people`."""
        if not people or not owners:
            return set()
        owners = [int(o) for o in owners]
        with self.transaction(owners) as conn:
            return {r[0] for r in conn.execute("SELECT note_id FROM hidden WHERE identity_id = ANY (%s) "
                                               "AND owner_id = ANY (%s)", [[int(p) for p in people], owners])}

    def circles(self, owner_id: int) -> dict[int, tuple[int | None, frozenset[int]]]:
        """Note id -> (its author, the members it is hidden from) for every note of the owner: whose words a
        note holds and who reads it, which evolution must not mix (biomem.notes.agent)."""
        found: dict[int, tuple[int | None, set[int]]] = {}
        with self.transaction([owner_id]) as conn:
            for note, author, hidden in conn.execute(
                    "SELECT n.id, n.author_id, h.identity_id FROM notes n LEFT JOIN hidden h "
                    "ON h.owner_id = n.owner_id AND h.note_id = n.id WHERE n.owner_id = %s", [int(owner_id)]):
                people = found.setdefault(note, (author, set()))[1]
                if hidden is not None:
                    people.add(hidden)
        return {note: (author, frozenset(people)) for note, (author, people) in found.items()}

    def note_vectors(self, owner_id: int) -> tuple[np.ndarray, np.ndarray | None, int]:
        """(note ids, embedding matrix, generation) of one owner's partition, oldest first."""
        with self.transaction([owner_id]) as conn:
            generation = self.generation(owner_id)
            rows = conn.execute("SELECT id, embedding FROM notes WHERE owner_id = %s ORDER BY timestamp, id",
                                [int(owner_id)]).fetchall()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        return ids, (np.stack([as_array(r[1]) for r in rows]) if rows else None), generation

    def update_note(self, owner_id: int, note_id: int, event: str, vector: np.ndarray | None = None,
                    actor: int | None = None, cause: int | None = None, **fields: Any) -> tuple[Note, int]:
        """Change fields of an owned note and record before/after; returns it and the generation."""
        values = {k: json.dumps(v) if k in ("keywords", "tags") else v for k, v in fields.items()}
        if vector is not None:
            values["embedding"] = np.asarray(vector, np.float32)
        unknown = set(values) - {"content", "timestamp", "keywords", "tags", "context", "embedding"}
        if unknown:
            raise ValueError(f"not note fields: {sorted(unknown)}")
        with self.transaction([owner_id]) as conn:
            before = self.get_note(owner_id, note_id)
            conn.execute(f"UPDATE notes SET {', '.join(f'{c} = %s' for c in values)} WHERE owner_id = %s AND id = %s",
                         [*values.values(), int(owner_id), int(note_id)])
            after = self.get_note(owner_id, note_id)
            self._record(conn, owner_id, note_id, event, before.snapshot(), after.snapshot(), actor, cause)
            generation = self._bump_generation(conn, owner_id)
        return after, generation

    def evolved_by(self, owner_id: int, cause_id: int) -> dict[int, int]:
        """Note id -> id of the first "evolve" history row that note `cause_id`'s evolution wrote on it, for each
        note of the owner it evolved that still exists."""
        with self.transaction([owner_id]) as conn:
            return dict(conn.execute(
                "SELECT h.note_id, min(h.id) FROM history h JOIN notes n ON n.id = h.note_id AND n.owner_id = %s "
                "WHERE h.owner_id = %s AND h.cause_id = %s AND h.event = 'evolve' GROUP BY h.note_id",
                [int(owner_id), int(owner_id), int(cause_id)]))

    def derivations(self, owner_id: int, note_id: int) -> tuple[list[Event], dict[int, list[int]]]:
        """biomem.stores.derivations.derivations of the owner's note."""
        with self.transaction([owner_id]) as conn:
            return derivations(conn.execute, owner_id, note_id, "%s")

    def unevolve(self, owner_id: int, note_id: int, since: int, until: int | None, context: str, tags: list[str],
                 vector: np.ndarray) -> tuple[Note, int]:
        """Undo evolution from history row `since` up to row `until` (an update; None: to the end): its evolve and
        unevolve rows go, the update's before goes, the note takes `context`, `tags` and `vector`, and one
        "unevolve" event records the result (no before). Returns the note and the generation."""
        owner_id, note_id = int(owner_id), int(note_id)
        with self.transaction([owner_id]) as conn:
            self.get_note(owner_id, note_id)
            conn.execute("DELETE FROM history WHERE owner_id = %s AND note_id = %s AND id >= %s "
                         "AND (%s::bigint IS NULL OR id < %s) AND event IN ('evolve', 'unevolve')",
                         [owner_id, note_id, int(since), until, until])
            if until is not None:
                conn.execute("UPDATE history SET before = NULL WHERE owner_id = %s AND id = %s", [owner_id, until])
            conn.execute("UPDATE notes SET context = %s, tags = %s, embedding = %s WHERE owner_id = %s AND id = %s",
                         [context, json.dumps(tags), np.asarray(vector, np.float32), owner_id, note_id])
            after = self.get_note(owner_id, note_id)
            self._record(conn, owner_id, note_id, "unevolve", None, after.snapshot())
            generation = self._bump_generation(conn, owner_id)
        return after, generation

    def delete_note(self, owner_id: int, note_id: int, *, keep_history: bool = False,
                    actor: int | None = None) -> tuple[Note, int]:
        """Delete an owned note (its links cascade); returns it and the owner's new generation.
        Its history keeps only events and times unless `keep_history`."""
        with self.transaction([owner_id]) as conn:
            before = self.get_note(owner_id, note_id)
            conn.execute("DELETE FROM notes WHERE owner_id = %s AND id = %s", [int(owner_id), int(note_id)])
            if not keep_history:
                conn.execute("UPDATE history SET before = NULL, after = NULL WHERE owner_id = %s AND note_id = %s",
                             [int(owner_id), int(note_id)])
            self._record(conn, owner_id, note_id, "delete", before.snapshot() if keep_history else None, None,
                         actor)
            generation = self._bump_generation(conn, owner_id)
        return before, generation

    @staticmethod
    def _record(conn: psycopg.Connection, owner_id: int, note_id: int, event: str,
                before: dict | None, after: dict | None, actor: int | None = None,
                cause: int | None = None) -> None:
        conn.execute(f"INSERT INTO history ({HISTORY_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                     history_row(owner_id, note_id, event, before, after, actor, cause))

    def add_links(self, owner_id: int, source_id: int, target_ids: Iterable[int]) -> None:
        """Link an owned note to other notes of the same owner (the foreign keys refuse others)."""
        targets = [(int(owner_id), int(source_id), int(t)) for t in target_ids if int(t) != int(source_id)]
        with self.transaction([owner_id]) as conn, conn.cursor() as cursor:
            cursor.executemany("INSERT INTO links VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", targets)

    def history(self, owner_id: int, note_id: int) -> list[dict[str, Any]]:
        with self.transaction([owner_id]) as conn:
            rows = conn.execute("SELECT id, note_id, event, before, after, at, actor_id FROM history "
                                "WHERE owner_id = %s AND note_id = %s ORDER BY id",
                                [int(owner_id), check_id(note_id)]).fetchall()
        if not rows:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return history_events(rows)

    def note_total(self) -> int:
        """Number of notes of all owners (kept by a trigger: count(*) is slow on large stores)."""
        return int(self.get_meta("note_total", "0"))

    def note_summary(self, owners: Sequence[int] | None = None) -> dict[int, tuple[int, str]]:
        """Per owner (every owner, or those in `owners`): (number of notes, latest timestamp), through the
        database's counting function (no note is read by this process)."""
        if owners is not None and not owners:
            return {}
        with self.transaction() as conn:
            rows = conn.execute("SELECT owner_id, notes, latest FROM note_summary(%s)",
                                [None if owners is None else [int(o) for o in owners]])
            return {owner: (int(count), latest) for owner, count, latest in rows}
