"""The SQLite half of the notes, links and history tables: what differs from PostgreSQL.

NoteRows is Store's half for notes (biomem.stores.sqlite.store): the logic both stores share is
biomem.stores.note_logic's; here are SQLite's own reads and writes. A note is reached by id only together with
its owner, links join two notes of one owner (a trigger refuses others), and a note is read in one query with
the ids it links to and the members it is hidden from (NOTE_SELECT).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import sqlite_utils

from ..derivations import record_sources
from ..note_logic import NoteLogic
from ..records import NOTE_COLUMNS, Note, add_events, authorship, from_blob, to_blob

# NOTE_COLUMNS, then the ids the note links to and the members it is hidden from, comma-separated: one query
# reads a search's hits whole (both subqueries walk a primary key: (source_id, target_id), (note_id, identity_id))
NOTE_SELECT = (f"SELECT {NOTE_COLUMNS}, "
               "(SELECT group_concat(l.target_id) FROM links l WHERE l.source_id = notes.id), "
               "(SELECT group_concat(h.identity_id) FROM hidden h WHERE h.note_id = notes.id) FROM notes")


def id_list(joined: str | None) -> list[int]:
    """The ids of a group_concat, ascending ([] for NULL)."""
    return sorted(int(i) for i in joined.split(",")) if joined else []


class NoteRows(NoteLogic):
    """Notes, links and history of a Store, which supplies the connection, its lock, the Dialect hooks,
    identity lookups and the meta table."""

    DIALECT = "sqlite"
    db: sqlite_utils.Database

    @staticmethod
    def _from_rows(rows: Sequence[tuple]) -> list[Note]:
        """The notes of rows of NOTE_SELECT."""
        return [Note.from_row(r, id_list(r[9]), id_list(r[10])) for r in rows]

    def _select_notes(self, conn: sqlite_utils.Database, where: str, args: list[Any]) -> list[Note]:
        return self._from_rows(conn.execute(f"{NOTE_SELECT} WHERE {where}", args).fetchall())

    @staticmethod
    def _stored(vector: np.ndarray) -> bytes:
        return to_blob(vector)

    @staticmethod
    def _vector(value: bytes) -> np.ndarray:
        return from_blob(value)

    @staticmethod
    def _page(limit: int | None, offset: int) -> list[int]:
        """LIMIT -1 is none; SQLite takes a negative OFFSET as 0."""
        return [-1 if limit is None else int(limit), int(offset)]

    def insert_notes(self, owner_id: int, notes: list[dict[str, Any]],
                     vectors: np.ndarray) -> tuple[list[int], int]:
        """Insert notes (content, timestamp, keywords, tags, context; optionally author, metadata, hidden_from,
        links) of one owner with their links, in one transaction. `links` names notes of the owner already
        stored; one deleted meanwhile is skipped, never an error.

        Returns the new ids and the owner's new generation.
        """
        with self._writing([owner_id]) as db:
            self.identity(owner_id)
            ids = []
            for note, vector in zip(notes, vectors):
                note_id = db.execute(
                    "INSERT INTO notes (owner_id, content, timestamp, keywords, tags, context, embedding, "
                    "author_id, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [owner_id, note["content"], note["timestamp"], json.dumps(note["keywords"]),
                     json.dumps(note["tags"]), note["context"], to_blob(vector), *authorship(owner_id, note)]
                ).lastrowid
                ids.append(note_id)
                self._execute_many(db, "INSERT INTO hidden VALUES (?, ?, ?)",
                                   [(owner_id, note_id, int(i)) for i in note.get("hidden_from", ())])
                for event, before, after in add_events(note):
                    self._record(db, owner_id, note_id, event, before, after,
                                 note.get("author") if event == "add" else None, note_id if event == "evolve" else None)
                record_sources(db.execute, owner_id, note_id, note.get("sources", ()), "?")
                for target in note.get("links", ()):
                    db.execute("INSERT OR IGNORE INTO links SELECT owner_id, ?, id FROM notes "
                               "WHERE owner_id = ? AND id = ? AND id <> ?",
                               [note_id, int(owner_id), int(target), note_id])
            generation = self._bump_generation(db, owner_id)
        return ids, generation

    def get_notes_among(self, owners: Sequence[int], note_ids: Iterable[int]) -> list[Note]:
        """Notes of any of `owners` among `note_ids`, in the given order (others are skipped): one read for a
        search's hits in several partitions."""
        wanted, owners = [int(i) for i in note_ids], [int(o) for o in owners]
        if not wanted:
            return []
        owned = ", ".join("?" * len(owners))
        with self._reading() as db:
            rows = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for row in db.execute(
                        f"{NOTE_SELECT} WHERE +owner_id IN ({owned}) AND id IN ({marks})",  # '+': by id, then check
                        [*owners, *chunk]):
                    rows[row[0]] = row
        found = {n.id: n for n in self._from_rows(list(rows.values()))}
        return [found[i] for i in wanted if i in found]

    def add_links(self, owner_id: int, source_id: int, target_ids: Iterable[int]) -> None:
        """Link an owned note to other notes of the same owner (the trigger refuses others)."""
        with self._writing([owner_id]) as db:
            for target in target_ids:
                if int(target) != int(source_id):
                    db.execute("INSERT OR IGNORE INTO links VALUES (?, ?, ?)",
                               [int(owner_id), int(source_id), int(target)])

    def note_summary(self, owners: Sequence[int] | None = None) -> dict[int, tuple[int, str]]:
        """Per owner (every owner, or those in `owners`): (number of notes, latest timestamp) — what a
        gated-out panel may show. Every owner means a scan of every note: keep it off request paths."""
        if owners is not None and not owners:
            return {}
        where = f"WHERE owner_id IN ({', '.join('?' * len(owners))})" if owners is not None else ""
        with self._reading() as db:
            return {owner: (count, latest) for owner, count, latest in db.execute(
                f"SELECT owner_id, COUNT(*), MAX(timestamp) FROM notes {where} GROUP BY owner_id",
                [int(o) for o in owners or []])}
