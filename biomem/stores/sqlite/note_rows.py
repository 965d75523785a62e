"""The notes, links and history tables of the store, every row read and written under its owner.

NoteRows is Store's half for notes (biomem.stores.sqlite.store): a note is reached by id only together with its
owner, links join two notes of one owner (a trigger refuses others), and every change bumps the
owner's generation, which the partition indexes follow. A note is read in one query with the ids it links to
and the members it is hidden from (NOTE_SELECT).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import sqlite_utils

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
    from_blob,
    history_events,
    history_row,
    to_blob,
)

# NOTE_COLUMNS, then the ids the note links to and the members it is hidden from, comma-separated: one query
# reads a search's hits whole (both subqueries walk a primary key: (source_id, target_id), (note_id, identity_id))
NOTE_SELECT = (f"SELECT {NOTE_COLUMNS}, "
               "(SELECT group_concat(l.target_id) FROM links l WHERE l.source_id = notes.id), "
               "(SELECT group_concat(h.identity_id) FROM hidden h WHERE h.note_id = notes.id) FROM notes")


def id_list(joined: str | None) -> list[int]:
    """The ids of a group_concat, ascending ([] for NULL)."""
    return sorted(int(i) for i in joined.split(",")) if joined else []


class NoteRows:
    """Notes, links and history of a Store, which supplies the connection, its lock, transactions,
    identity lookups and the meta table."""

    db: sqlite_utils.Database
    lock: threading.RLock
    transaction: Callable[[], AbstractContextManager[sqlite_utils.Database]]
    identity: Callable[[int], Identity]
    get_meta: Callable[[str, str | None], str | None]
    memo: Callable[[tuple, Callable[[], Any]], Any]

    def generation(self, owner_id: int) -> int:
        owner_id = int(owner_id)
        row = self.memo(("generation", owner_id), lambda: self.db.execute(
            "SELECT generation FROM identities WHERE id = ?", [owner_id]).fetchone())
        return int(row[0]) if row else -1

    @staticmethod
    def _bump_generation(db: sqlite_utils.Database, owner_id: int) -> int:
        """Mark the owner's partition changed; returns the new generation (for index patches)."""
        return db.execute("UPDATE identities SET generation = generation + 1 WHERE id = ? "
                          "RETURNING generation", [owner_id]).fetchone()[0]

    def insert_notes(self, owner_id: int, notes: list[dict[str, Any]],
                     vectors: np.ndarray) -> tuple[list[int], int]:
        """Insert notes (content, timestamp, keywords, tags, context; optionally author, metadata, hidden_from,
        links) of one owner with their links, in one transaction. `links` names notes of the owner already
        stored; one deleted meanwhile is skipped, never an error.

        Returns the new ids and the owner's new generation.
        """
        with self.transaction() as db:
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
                db.conn.executemany("INSERT INTO hidden VALUES (?, ?, ?)",
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

    @staticmethod
    def _from_rows(rows: Sequence[tuple]) -> list[Note]:
        """The notes of rows of NOTE_SELECT."""
        return [Note.from_row(r, id_list(r[9]), id_list(r[10])) for r in rows]

    def get_note(self, owner_id: int, note_id: int) -> Note:
        """The note `note_id` if `owner_id` owns it, else NoteNotFoundError."""
        with self.lock:
            row = self.db.execute(f"{NOTE_SELECT} WHERE id = ? AND owner_id = ?",
                                  [check_id(note_id), int(owner_id)]).fetchone()
        if row is None:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return self._from_rows([row])[0]

    def get_notes(self, owner_id: int, note_ids: Iterable[int]) -> list[Note]:
        """Notes of `owner_id` among `note_ids`, in the given order (others are skipped)."""
        return self.get_notes_among([owner_id], note_ids)

    def get_notes_among(self, owners: Sequence[int], note_ids: Iterable[int]) -> list[Note]:
        """Notes of any of `owners` among `note_ids`, in the given order (others are skipped): one read for a
        search's hits in several partitions."""
        wanted, owners = [int(i) for i in note_ids], [int(o) for o in owners]
        if not wanted:
            return []
        owned = ", ".join("?" * len(owners))
        with self.lock:
            rows = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for row in self.db.execute(
                        f"{NOTE_SELECT} WHERE +owner_id IN ({owned}) AND id IN ({marks})",  # '+': by id, then check
                        [*owners, *chunk]):
                    rows[row[0]] = row
        found = {n.id: n for n in self._from_rows(list(rows.values()))}
        return [found[i] for i in wanted if i in found]

    def all_notes(self, owner_id: int) -> list[Note]:
        """Every note of `owner_id`, oldest first."""
        with self.lock:
            rows = self.db.execute(f"{NOTE_SELECT} WHERE owner_id = ? ORDER BY timestamp, id",
                                   [int(owner_id)]).fetchall()
        return self._from_rows(rows)

    def find_note(self, owners: Sequence[int], note_id: int) -> Note:
        """The note `note_id` if one of `owners` owns it, else NoteNotFoundError."""
        marks = ", ".join("?" * len(owners))
        with self.lock:
            row = self.db.execute(f"{NOTE_SELECT} WHERE id = ? AND owner_id IN ({marks})",
                                  [check_id(note_id), *[int(o) for o in owners]]).fetchone()
        if row is None:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return self._from_rows([row])[0]

    def list_notes(self, owners: Sequence[int], *, where: Filter | None = None, excluded: Collection[int] = (),
                   offset: int = 0, limit: int | None = None) -> tuple[list[Note], int]:
        """One page of the notes of `owners` that match `where` and are not `excluded`, oldest first, and
        how many there are in all."""
        condition, args = self._condition(owners, where, excluded)
        with self.lock:
            (total,) = self.db.execute(f"SELECT count(*) FROM notes WHERE {condition}", args).fetchone()
            rows = self.db.execute(f"{NOTE_SELECT} WHERE {condition} ORDER BY timestamp, id "
                                   "LIMIT ? OFFSET ?", [*args, -1 if limit is None else int(limit),
                                                        int(offset)]).fetchall()
        return self._from_rows(rows), int(total)

    def note_ids_where(self, owner_id: int, where: Filter) -> np.ndarray:
        """Ids of the owner's notes that match `where` (a search's filter, applied before its top-K)."""
        condition, args = self._condition([owner_id], where, ())
        with self.lock:
            return np.array([r[0] for r in self.db.execute(f"SELECT id FROM notes WHERE {condition}", args)],
                            dtype=np.int64)

    @staticmethod
    def _condition(owners: Sequence[int], where: Filter | None, excluded: Collection[int]) -> tuple[str, list]:
        sql, args = f"owner_id IN ({', '.join('?' * len(owners))})", [int(o) for o in owners]
        if excluded:
            sql += f" AND id NOT IN ({', '.join('?' * len(excluded))})"
            args += [int(i) for i in excluded]
        if where is not None:
            expression, values = compile_filter(where, "sqlite")
            sql, args = f"{sql} AND ({expression})", [*args, *values]
        return sql, args

    def group_ids(self, identity_id: int) -> list[int]:
        """Ids of the groups a person is a member of, oldest first (what a search reaches)."""
        identity_id = int(identity_id)
        return list(self.memo(("groups", identity_id), lambda: tuple(r[0] for r in self.db.execute(
            "SELECT group_id FROM members WHERE identity_id = ? ORDER BY group_id", [identity_id]))))

    def hidden_notes(self, people: Sequence[int], owners: Sequence[int]) -> set[int]:
        """Ids of the notes of `owners` (groups) hidden from any of `people`."""
        if not people or not owners:
            return set()
        people, owners = tuple(map(int, people)), tuple(map(int, owners))
        return set(self.memo(("hidden", people, owners), lambda: frozenset(r[0] for r in self.db.execute(
            f"SELECT note_id FROM hidden WHERE identity_id IN ({', '.join('?' * len(people))}) "
            f"AND owner_id IN ({', '.join('?' * len(owners))})", [*people, *owners]))))

    def circles(self, owner_id: int) -> dict[int, tuple[int | None, frozenset[int]]]:
        """Note id -> (its author, the members it is hidden from) for every note of the owner: whose words a
        note holds and who reads it, which evolution must not mix (biomem.notes.agent)."""
        found: dict[int, tuple[int | None, set[int]]] = {}
        with self.lock:
            for note, author, hidden in self.db.execute(
                    "SELECT n.id, n.author_id, h.identity_id FROM notes n LEFT JOIN hidden h "
                    "ON h.owner_id = n.owner_id AND h.note_id = n.id WHERE n.owner_id = ?", [int(owner_id)]):
                people = found.setdefault(note, (author, set()))[1]
                if hidden is not None:
                    people.add(hidden)
        return {note: (author, frozenset(people)) for note, (author, people) in found.items()}

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
                    actor: int | None = None, cause: int | None = None, **fields: Any) -> tuple[Note, int]:
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
            self._record(db, owner_id, note_id, event, before.snapshot(), after.snapshot(), actor, cause)
            generation = self._bump_generation(db, owner_id)
        return after, generation

    def evolved_by(self, owner_id: int, cause_id: int) -> dict[int, int]:
        """Note id -> id of the first "evolve" history row that note `cause_id`'s evolution wrote on it, for each
        note of the owner it evolved that still exists."""
        with self.lock:
            return dict(self.db.execute(
                "SELECT h.note_id, MIN(h.id) FROM history h JOIN notes n ON n.id = h.note_id AND n.owner_id = ? "
                "WHERE h.owner_id = ? AND h.cause_id = ? AND h.event = 'evolve' GROUP BY h.note_id",
                [int(owner_id), int(owner_id), int(cause_id)]))

    def derivations(self, owner_id: int, note_id: int) -> tuple[list[Event], dict[int, list[int]]]:
        """biomem.stores.derivations.derivations of the owner's note."""
        with self.lock:
            return derivations(self.db.execute, owner_id, note_id, "?")

    def unevolve(self, owner_id: int, note_id: int, since: int, until: int | None, context: str, tags: list[str],
                 vector: np.ndarray) -> tuple[Note, int]:
        """Undo evolution from history row `since` up to row `until` (an update; None: to the end): its evolve and
        unevolve rows go, the update's before goes, the note takes `context`, `tags` and `vector`, and one
        "unevolve" event records the result (no before). Returns the note and the generation."""
        owner_id, note_id = int(owner_id), int(note_id)
        with self.transaction() as db:
            self.get_note(owner_id, note_id)
            db.execute("DELETE FROM history WHERE owner_id = ? AND note_id = ? AND id >= ? AND (? IS NULL OR id < ?) "
                       "AND event IN ('evolve', 'unevolve')", [owner_id, note_id, int(since), until, until])
            if until is not None:
                db.execute("UPDATE history SET before = NULL WHERE owner_id = ? AND id = ?", [owner_id, until])
            db.execute("UPDATE notes SET context = ?, tags = ?, embedding = ? WHERE id = ? AND owner_id = ?",
                       [context, json.dumps(tags), to_blob(vector), note_id, owner_id])
            after = self.get_note(owner_id, note_id)
            self._record(db, owner_id, note_id, "unevolve", None, after.snapshot())
            generation = self._bump_generation(db, owner_id)
        return after, generation

    def delete_note(self, owner_id: int, note_id: int, *, keep_history: bool = False,
                    actor: int | None = None) -> tuple[Note, int]:
        """Delete an owned note (its links cascade); returns it and the owner's new generation.
        Its history keeps only events and times unless `keep_history` (the audit trail with texts)."""
        with self.transaction() as db:
            before = self.get_note(owner_id, note_id)
            db.execute("DELETE FROM notes WHERE id = ? AND owner_id = ?", [int(note_id), int(owner_id)])
            if not keep_history:
                db.execute("UPDATE history SET before = NULL, after = NULL WHERE owner_id = ? AND note_id = ?",
                           [int(owner_id), int(note_id)])
            self._record(db, owner_id, note_id, "delete", before.snapshot() if keep_history else None, None, actor)
            generation = self._bump_generation(db, owner_id)
        return before, generation

    @staticmethod
    def _record(db: sqlite_utils.Database, owner_id: int, note_id: int, event: str,
                before: dict | None, after: dict | None, actor: int | None = None,
                cause: int | None = None) -> None:
        db.execute(f"INSERT INTO history ({HISTORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   history_row(owner_id, note_id, event, before, after, actor, cause))

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
                "SELECT id, note_id, event, before, after, at, actor_id FROM history "
                "WHERE owner_id = ? AND note_id = ? ORDER BY id", [int(owner_id), check_id(note_id)]).fetchall()
        if not rows:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return history_events(rows)

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
