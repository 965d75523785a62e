"""The notes, links and history of the PostgreSQL store, each statement under its owner twice over.

Every query names its owner in its WHERE clause, and its transaction admits only that owner
(row-level security, biomem.stores.pg.schema): a query that forgot the first still returns and changes
nothing of anyone else. Semantics are the SQLite store's (biomem.stores.sqlite.note_rows).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import psycopg

from ...errors import NoteNotFoundError
from ..records import NOTE_COLUMNS, Identity, Note, check_id, now_iso


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
        """Insert notes (content, timestamp, keywords, tags, context) of one owner: (new ids, generation)."""
        with self.transaction([owner_id]) as conn:
            self.identity(owner_id)
            ids = []
            for note, vector in zip(notes, vectors):
                note_id = conn.execute(
                    "INSERT INTO notes (owner_id, content, timestamp, keywords, tags, context, embedding) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id",
                    [owner_id, note["content"], note["timestamp"], json.dumps(note["keywords"]),
                     json.dumps(note["tags"]), note["context"], np.asarray(vector, np.float32)]).fetchone()[0]
                ids.append(note_id)
                self._record(conn, owner_id, note_id, "add", None, note)
            generation = self._bump_generation(conn, owner_id)
        return ids, generation

    def _notes(self, conn: psycopg.Connection, owner_id: int, where: str, args: list) -> list[Note]:
        rows = conn.execute(f"SELECT {NOTE_COLUMNS} FROM notes WHERE owner_id = %s {where}",
                            [int(owner_id), *args]).fetchall()
        links: dict[int, list[int]] = {r[0]: [] for r in rows}
        for source, target in conn.execute("SELECT source_id, target_id FROM links WHERE owner_id = %s "
                                           "AND source_id = ANY (%s) ORDER BY target_id",
                                           [int(owner_id), list(links)]):
            links[source].append(target)
        return [Note.from_row(r, links[r[0]]) for r in rows]

    def get_note(self, owner_id: int, note_id: int) -> Note:
        """The note `note_id` if `owner_id` owns it, else NoteNotFoundError."""
        with self.transaction([owner_id]) as conn:
            found = self._notes(conn, owner_id, "AND id = %s", [check_id(note_id)])
        if not found:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return found[0]

    def get_notes(self, owner_id: int, note_ids: Iterable[int]) -> list[Note]:
        """Notes of `owner_id` among `note_ids`, in the given order (others are skipped)."""
        wanted = [int(i) for i in note_ids]
        if not wanted:
            return []
        with self.transaction([owner_id]) as conn:
            found = {n.id: n for n in self._notes(conn, owner_id, "AND id = ANY (%s)", [wanted])}
        return [found[i] for i in wanted if i in found]

    def all_notes(self, owner_id: int) -> list[Note]:
        """Every note of `owner_id`, oldest first."""
        with self.transaction([owner_id]) as conn:
            return self._notes(conn, owner_id, "ORDER BY timestamp, id", [])

    def note_vectors(self, owner_id: int) -> tuple[np.ndarray, np.ndarray | None, int]:
        """(note ids, embedding matrix, generation) of one owner's partition, oldest first."""
        with self.transaction([owner_id]) as conn:
            generation = self.generation(owner_id)
            rows = conn.execute("SELECT id, embedding FROM notes WHERE owner_id = %s ORDER BY timestamp, id",
                                [int(owner_id)]).fetchall()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        return ids, (np.stack([as_array(r[1]) for r in rows]) if rows else None), generation

    def update_note(self, owner_id: int, note_id: int, event: str, vector: np.ndarray | None = None,
                    **fields: Any) -> tuple[Note, int]:
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
            self._record(conn, owner_id, note_id, event, before.snapshot(), after.snapshot())
            generation = self._bump_generation(conn, owner_id)
        return after, generation

    def delete_note(self, owner_id: int, note_id: int, *, keep_history: bool = False) -> tuple[Note, int]:
        """Delete an owned note (its links cascade); returns it and the owner's new generation.
        Its history keeps only events and times unless `keep_history`."""
        with self.transaction([owner_id]) as conn:
            before = self.get_note(owner_id, note_id)
            conn.execute("DELETE FROM notes WHERE owner_id = %s AND id = %s", [int(owner_id), int(note_id)])
            if not keep_history:
                conn.execute("UPDATE history SET before = NULL, after = NULL WHERE owner_id = %s AND note_id = %s",
                             [int(owner_id), int(note_id)])
            self._record(conn, owner_id, note_id, "delete", before.snapshot() if keep_history else None, None)
            generation = self._bump_generation(conn, owner_id)
        return before, generation

    @staticmethod
    def _record(conn: psycopg.Connection, owner_id: int, note_id: int, event: str,
                before: dict | None, after: dict | None) -> None:
        conn.execute("INSERT INTO history (owner_id, note_id, event, before, after, at) "
                     "VALUES (%s, %s, %s, %s, %s, %s)",
                     [owner_id, note_id, event, json.dumps(before) if before else None,
                      json.dumps(after) if after else None, now_iso()])

    def add_links(self, owner_id: int, source_id: int, target_ids: Iterable[int]) -> None:
        """Link an owned note to other notes of the same owner (the foreign keys refuse others)."""
        targets = [(int(owner_id), int(source_id), int(t)) for t in target_ids if int(t) != int(source_id)]
        with self.transaction([owner_id]) as conn, conn.cursor() as cursor:
            cursor.executemany("INSERT INTO links VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", targets)

    def history(self, owner_id: int, note_id: int) -> list[dict[str, Any]]:
        with self.transaction([owner_id]) as conn:
            rows = conn.execute("SELECT id, note_id, event, before, after, at FROM history "
                                "WHERE owner_id = %s AND note_id = %s ORDER BY id",
                                [int(owner_id), check_id(note_id)]).fetchall()
        if not rows:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return [{"id": r[0], "note_id": r[1], "event": r[2], "before": json.loads(r[3]) if r[3] else None,
                 "after": json.loads(r[4]) if r[4] else None, "at": r[5]} for r in rows]

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
