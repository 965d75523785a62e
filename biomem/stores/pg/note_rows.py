"""The PostgreSQL half of the notes, links and history: what differs from SQLite, each statement under its
owner twice over.

The logic both stores share is biomem.stores.note_logic's. Every query names its owner in its WHERE clause,
and its transaction admits only that owner, or the owners a read spans (a person and their groups: find_note,
list_notes, hidden_notes) (row-level security, biomem.stores.pg.schema): a query that forgot the first still
returns and changes nothing of anyone else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import psycopg

from ..derivations import record_sources
from ..note_logic import NoteLogic
from ..records import NOTE_COLUMNS, Note, add_events, authorship


def as_array(vector: Any) -> np.ndarray:
    """A pgvector value (pgvector.Vector, or an array) as float32 numpy."""
    return np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32)


class PgNoteRows(NoteLogic):
    """Notes, links and history of a PostgresStore, which supplies the Dialect hooks (transactions admitting
    owners) and identity lookups."""

    DIALECT = "postgres"

    @staticmethod
    def _stored(vector: np.ndarray) -> np.ndarray:
        return np.asarray(vector, np.float32)

    @staticmethod
    def _vector(value: Any) -> np.ndarray:
        return as_array(value)

    @staticmethod
    def _page(limit: int | None, offset: int) -> list[int | None]:
        """A negative limit is none (LIMIT NULL), a negative offset 0, as in SQLite."""
        return [None if limit is None or int(limit) < 0 else int(limit), max(int(offset), 0)]

    def insert_notes(self, owner_id: int, notes: list[dict[str, Any]],
                     vectors: np.ndarray) -> tuple[list[int], int]:
        """Insert notes (content, timestamp, keywords, tags, context; optionally author, metadata, hidden_from,
        links) of one owner with their links, in one transaction: (new ids, generation). `links` names notes of
        the owner already stored; one deleted meanwhile is skipped (_still_there), never an error."""
        with self._writing([owner_id]) as conn:
            self.identity(owner_id)
            targets = self._still_there(conn, owner_id, {int(t) for note in notes
                                                         for t in (*note.get("links", ()), *note.get("sources", ()))})
            ids = []
            for note, vector in zip(notes, vectors):
                note_id = conn.execute(
                    "INSERT INTO notes (owner_id, content, timestamp, keywords, tags, context, embedding, author_id, "
                    "metadata) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb) RETURNING id",
                    [owner_id, note["content"], note["timestamp"], json.dumps(note["keywords"]),
                     json.dumps(note["tags"]), note["context"], self._stored(vector),
                     *authorship(owner_id, note)]).fetchone()[0]
                ids.append(note_id)
                hidden = [(owner_id, note_id, int(i)) for i in note.get("hidden_from", ())]
                if hidden:
                    self._execute_many(conn, "INSERT INTO hidden VALUES (%s, %s, %s)", hidden)
                for event, before, after in add_events(note):
                    self._record(conn, owner_id, note_id, event, before, after,
                                 note.get("author") if event == "add" else None, note_id if event == "evolve" else None)
                record_sources(conn.execute, owner_id, note_id,
                               [s for s in note.get("sources", ()) if int(s) in targets], "%s")
                links = [(owner_id, note_id, t) for t in note.get("links", ()) if int(t) in targets]
                if links:
                    self._execute_many(conn, "INSERT INTO links VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", links)
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

    def _select_notes(self, conn: psycopg.Connection, where: str, args: list[Any]) -> list[Note]:
        return self._from_rows(conn, conn.execute(f"SELECT {NOTE_COLUMNS} FROM notes WHERE {where}", args).fetchall())

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

    def get_notes_among(self, owners: Sequence[int], note_ids: Iterable[int]) -> list[Note]:
        """Notes of any of `owners` among `note_ids`, in the given order (others are skipped): one read for a
        search's hits in several partitions."""
        wanted, owners = [int(i) for i in note_ids], [int(o) for o in owners]
        if not wanted:
            return []
        with self._reading(owners) as conn:
            found = {n.id: n for n in self._select_notes(conn, "owner_id = ANY (%s) AND id = ANY (%s)",
                                                         [owners, wanted])}
        return [found[i] for i in wanted if i in found]

    def add_links(self, owner_id: int, source_id: int, target_ids: Iterable[int]) -> None:
        """Link an owned note to other notes of the same owner (the foreign keys refuse others)."""
        targets = [(int(owner_id), int(source_id), int(t)) for t in target_ids if int(t) != int(source_id)]
        with self._writing([owner_id]) as conn:
            self._execute_many(conn, "INSERT INTO links VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", targets)

    def note_summary(self, owners: Sequence[int] | None = None) -> dict[int, tuple[int, str]]:
        """Per owner (every owner, or those in `owners`): (number of notes, latest timestamp), through the
        database's counting function (no note is read by this process)."""
        if owners is not None and not owners:
            return {}
        with self._reading() as conn:
            rows = conn.execute("SELECT owner_id, notes, latest FROM note_summary(%s)",
                                [None if owners is None else [int(o) for o in owners]])
            return {owner: (int(count), latest) for owner, count, latest in rows}
