"""The notes, links and history tables of the store, every row read and written under its owner.

NoteRows is Store's half for notes (biomem.stores.sqlite.store): a note is reached by id only together with its
owner, links join two notes of one owner (a trigger refuses others), and every change bumps the
owner's generation, which the partition indexes follow.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import sqlite_utils

from ...errors import NoteNotFoundError
from ..records import NOTE_COLUMNS, Identity, Note, check_id, from_blob, now_iso, to_blob


class NoteRows:
    """Notes, links and history of a Store, which supplies the connection, its lock, transactions,
    identity lookups and the meta table."""

    db: sqlite_utils.Database
    lock: threading.RLock
    transaction: Callable[[], AbstractContextManager[sqlite_utils.Database]]
    identity: Callable[[int], Identity]
    get_meta: Callable[[str, str | None], str | None]

    def generation(self, owner_id: int) -> int:
        with self.lock:
            row = self.db.execute("SELECT generation FROM identities WHERE id = ?",
                                  [int(owner_id)]).fetchone()
        return int(row[0]) if row else -1

    @staticmethod
    def _bump_generation(db: sqlite_utils.Database, owner_id: int) -> int:
        """Mark the owner's partition changed; returns the new generation (for index patches)."""
        return db.execute("UPDATE identities SET generation = generation + 1 WHERE id = ? "
                          "RETURNING generation", [owner_id]).fetchone()[0]

    def insert_notes(self, owner_id: int, notes: list[dict[str, Any]],
                     vectors: np.ndarray) -> tuple[list[int], int]:
        """Insert notes (content, timestamp, keywords, tags, context) of one owner.

        Returns the new ids and the owner's new generation.
        """
        with self.transaction() as db:
            self.identity(owner_id)
            ids = []
            for note, vector in zip(notes, vectors):
                note_id = db.execute(
                    "INSERT INTO notes (owner_id, content, timestamp, keywords, tags, context, embedding) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [owner_id, note["content"], note["timestamp"], json.dumps(note["keywords"]),
                     json.dumps(note["tags"]), note["context"], to_blob(vector)]).lastrowid
                ids.append(note_id)
                self._record(db, owner_id, note_id, "add", None, note)
            generation = self._bump_generation(db, owner_id)
        return ids, generation

    def _note_row(self, owner_id: int, note_id: int) -> tuple:
        row = self.db.execute(f"SELECT {NOTE_COLUMNS} FROM notes WHERE id = ? AND owner_id = ?",
                              [check_id(note_id), int(owner_id)]).fetchone()
        if row is None:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return row

    def _links(self, note_ids: list[int]) -> dict[int, list[int]]:
        links: dict[int, list[int]] = {i: [] for i in note_ids}
        for chunk_start in range(0, len(note_ids), 500):
            chunk = note_ids[chunk_start:chunk_start + 500]
            marks = ",".join("?" * len(chunk))
            for source, target in self.db.execute(
                    f"SELECT source_id, target_id FROM links WHERE source_id IN ({marks}) "
                    "ORDER BY target_id", chunk):
                links[source].append(target)
        return links

    def get_note(self, owner_id: int, note_id: int) -> Note:
        """The note `note_id` if `owner_id` owns it, else NoteNotFoundError."""
        with self.lock:
            row = self._note_row(owner_id, note_id)
            return Note.from_row(row, self._links([row[0]])[row[0]])

    def get_notes(self, owner_id: int, note_ids: Iterable[int]) -> list[Note]:
        """Notes of `owner_id` among `note_ids`, in the given order (others are skipped)."""
        wanted = [int(i) for i in note_ids]
        if not wanted:
            return []
        with self.lock:
            rows = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for row in self.db.execute(
                        f"SELECT {NOTE_COLUMNS} FROM notes "
                        f"WHERE +owner_id = ? AND id IN ({marks})",  # '+': look up by id, then check
                        [int(owner_id), *chunk]):
                    rows[row[0]] = row
            links = self._links(list(rows))
        return [Note.from_row(rows[i], links[i]) for i in wanted if i in rows]

    def all_notes(self, owner_id: int) -> list[Note]:
        """Every note of `owner_id`, oldest first."""
        with self.lock:
            rows = self.db.execute(
                f"SELECT {NOTE_COLUMNS} FROM notes "
                "WHERE owner_id = ? ORDER BY timestamp, id", [int(owner_id)]).fetchall()
            links = self._links([r[0] for r in rows])
        return [Note.from_row(r, links[r[0]]) for r in rows]

    def note_vectors(self, owner_id: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(note ids, embedding matrix, generation) of one owner's partition, oldest first."""
        with self.lock:
            generation = self.generation(owner_id)
            rows = self.db.execute("SELECT id, embedding FROM notes WHERE owner_id = ? "
                                   "ORDER BY timestamp, id", [int(owner_id)]).fetchall()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        matrix = np.stack([from_blob(r[1]) for r in rows]) if rows else None
        return ids, matrix, generation

    def update_note(self, owner_id: int, note_id: int, event: str, vector: np.ndarray | None = None,
                    **fields: Any) -> tuple[Note, int]:
        """Change fields of an owned note and record before/after; returns it and the generation."""
        with self.transaction() as db:
            before = self.get_note(owner_id, note_id)
            values = {k: json.dumps(v) if k in ("keywords", "tags") else v for k, v in fields.items()}
            if vector is not None:
                values["embedding"] = to_blob(vector)
            unknown = set(values) - {"content", "timestamp", "keywords", "tags", "context", "embedding"}
            if unknown:
                raise ValueError(f"not note fields: {sorted(unknown)}")
            assignments = ", ".join(f"{column} = ?" for column in values)
            db.execute(f"UPDATE notes SET {assignments} WHERE id = ? AND owner_id = ?",
                       [*values.values(), int(note_id), int(owner_id)])
            after = self.get_note(owner_id, note_id)
            self._record(db, owner_id, note_id, event, before.snapshot(), after.snapshot())
            generation = self._bump_generation(db, owner_id)
        return after, generation

    def delete_note(self, owner_id: int, note_id: int, *, keep_history: bool = False) -> tuple[Note, int]:
        """Delete an owned note (its links cascade); returns it and the owner's new generation.
        Its history keeps only events and times unless `keep_history` (the audit trail with texts)."""
        with self.transaction() as db:
            before = self.get_note(owner_id, note_id)
            db.execute("DELETE FROM notes WHERE id = ? AND owner_id = ?", [int(note_id), int(owner_id)])
            if not keep_history:
                db.execute("UPDATE history SET before = NULL, after = NULL WHERE owner_id = ? AND note_id = ?",
                           [int(owner_id), int(note_id)])
            self._record(db, owner_id, note_id, "delete", before.snapshot() if keep_history else None, None)
            generation = self._bump_generation(db, owner_id)
        return before, generation

    @staticmethod
    def _record(db: sqlite_utils.Database, owner_id: int, note_id: int, event: str,
                before: dict | None, after: dict | None) -> None:
        db.execute("INSERT INTO history (owner_id, note_id, event, before, after, at) "
                   "VALUES (?, ?, ?, ?, ?, ?)",
                   [owner_id, note_id, event, json.dumps(before) if before else None,
                    json.dumps(after) if after else None, now_iso()])

    def add_links(self, owner_id: int, source_id: int, target_ids: Iterable[int]) -> None:
        """Link an owned note to other notes of the same owner (the trigger refuses others)."""
        with self.transaction() as db:
            for target in target_ids:
                if int(target) != int(source_id):
                    db.execute("INSERT OR IGNORE INTO links VALUES (?, ?, ?)",
                               [int(owner_id), int(source_id), int(target)])

    def history(self, owner_id: int, note_id: int) -> list[dict[str, Any]]:
        with self.lock:
            rows = self.db.execute(
                "SELECT id, note_id, event, before, after, at FROM history "
                "WHERE owner_id = ? AND note_id = ? ORDER BY id", [int(owner_id), check_id(note_id)]).fetchall()
        if not rows:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return [{"id": r[0], "note_id": r[1], "event": r[2],
                 "before": json.loads(r[3]) if r[3] else None,
                 "after": json.loads(r[4]) if r[4] else None, "at": r[5]} for r in rows]

    def note_total(self) -> int:
        """Number of notes of all owners (kept by triggers: COUNT(*) is slow on large stores)."""
        return int(self.get_meta("note_total", "0"))

    def note_summary(self, owners: Sequence[int] | None = None) -> dict[int, tuple[int, str]]:
        """Per owner (every owner, or those in `owners`): (number of notes, latest timestamp) — what a
        gated-out panel may show. Every owner means a scan of every note: keep it off request paths."""
        if owners is not None and not owners:
            return {}
        where = f"WHERE owner_id IN ({', '.join('?' * len(owners))})" if owners is not None else ""
        with self.lock:
            return {owner: (count, latest) for owner, count, latest in self.db.execute(
                f"SELECT owner_id, COUNT(*), MAX(timestamp) FROM notes {where} GROUP BY owner_id",
                [int(o) for o in owners or []])}
