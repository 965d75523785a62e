"""SQLite source of truth: identities, templates, notes, links, history, thresholds.

Every note has a NOT NULL owner; a trigger refuses links between two owners; every read
or write of a note by id takes the owner and matches on it. One connection serves all
threads behind one lock (the single write path); WAL keeps other processes' readers going.
"""

from __future__ import annotations

import json
import logging
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils

from .errors import (
    DuplicateLabelError,
    ForgetIncompleteError,
    InvalidInputError,
    NoteNotFoundError,
    StoreCorruptError,
    UnknownIdentityError,
)
from .migrations import migrate_1_to_2
from .sealing import Sealer, load_key
from .settings import Settings

log = logging.getLogger(__name__)
SCHEMA_VERSION = 2

# Version 2: ids are AUTOINCREMENT (never reused, so nothing keyed by an id can reach a later
# person), labels are unique case-insensitively, templates are sealed, thresholds carry a
# stricter step-up τ, identities say whether they are sample people (see disclosure).
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS identities (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    label TEXT NOT NULL,
    label_key TEXT NOT NULL UNIQUE,  -- casefolded label
    created TEXT NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,  -- bumped on every change to the owner's notes
    sample INTEGER NOT NULL DEFAULT 0  -- 1: a demo/sample person, not a real enrolment
);
CREATE TABLE IF NOT EXISTS templates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    identity_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    modality TEXT NOT NULL,
    embedding BLOB NOT NULL,  -- AES-GCM sealed float32 vector (biomem.sealing)
    created TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS templates_by_modality ON templates(modality, identity_id);
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    content TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    keywords TEXT NOT NULL DEFAULT '[]',
    tags TEXT NOT NULL DEFAULT '[]',
    context TEXT NOT NULL DEFAULT '',
    embedding BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS notes_by_owner ON notes(owner_id, timestamp);
INSERT OR IGNORE INTO meta VALUES ('note_total', '0');
CREATE TRIGGER IF NOT EXISTS notes_counted AFTER INSERT ON notes
BEGIN UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'note_total'; END;
CREATE TRIGGER IF NOT EXISTS notes_uncounted AFTER DELETE ON notes
BEGIN UPDATE meta SET value = CAST(value AS INTEGER) - 1 WHERE key = 'note_total'; END;
CREATE TABLE IF NOT EXISTS links (
    owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    source_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
    target_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
    PRIMARY KEY (source_id, target_id)
);
CREATE INDEX IF NOT EXISTS links_by_target ON links(target_id);
CREATE TRIGGER IF NOT EXISTS links_same_owner BEFORE INSERT ON links
WHEN (SELECT owner_id FROM notes WHERE id = NEW.source_id) IS NOT NEW.owner_id
  OR (SELECT owner_id FROM notes WHERE id = NEW.target_id) IS NOT NEW.owner_id
BEGIN SELECT RAISE(ABORT, 'links must join two notes of the same owner'); END;
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    note_id INTEGER NOT NULL,
    event TEXT NOT NULL,          -- add | update | evolve | delete
    before TEXT,
    after TEXT,
    at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS history_by_note ON history(owner_id, note_id);
CREATE TABLE IF NOT EXISTS thresholds (
    modality TEXT PRIMARY KEY,
    tau REAL,  -- the gate's τ
    source TEXT,
    tau_strict REAL,  -- step-up τ (lower false-match rate) for destructive or broad actions
    strict_source TEXT,
    updated TEXT NOT NULL
);
"""


def _statements(script: str) -> list[str]:
    """Split the schema into statements (triggers contain ';' inside BEGIN ... END)."""
    parts, current = [], ""
    for line in script.splitlines():
        current += line + "\n"
        if sqlite3.complete_statement(current):
            parts.append(current.strip())
            current = ""
    return parts


def now_iso() -> str:
    """Current UTC time, ISO 8601, seconds precision."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


def check_id(value: object, what: str = "note") -> int:
    """A row id as a positive int; InvalidInputError for anything else (bools, floats, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 < int(value) < 2**63:
        raise InvalidInputError(f"a {what} id is a positive integer, got {value!r}")
    return int(value)


@dataclass
class Identity:
    """An enrolled person: the owner of notes and templates."""

    id: int
    label: str
    sample: bool = False  # a demo/sample person (may be shown under the "demo" disclosure)


@dataclass
class Note:
    """One memory of one owner (A-Mem's note plus its owner)."""

    id: int
    owner: int
    content: str
    timestamp: str
    keywords: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    context: str = ""
    links: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "owner": self.owner, "memory": self.content, "content": self.content,
            "timestamp": self.timestamp, "keywords": self.keywords, "tags": self.tags,
            "context": self.context, "links": self.links,
        }

    def snapshot(self) -> dict[str, Any]:
        """The fields history records before and after a change."""
        return {"content": self.content, "timestamp": self.timestamp, "keywords": self.keywords,
                "tags": self.tags, "context": self.context}


class Store:
    """Typed access to the SQLite file; every public method is atomic and thread-safe.

    key: the 32-byte key that seals templates (default: `settings`' BIOMEM_KEY or key file, see
    biomem.sealing); a store whose templates were sealed under another key does not open.
    settings: where that default key is found (default: Settings.from_env()).
    """

    def __init__(self, path: str | Path, *, key: bytes | None = None, settings: Settings | None = None) -> None:
        self.path = Path(path)
        self.lock = threading.RLock()
        self.closed = False
        self.erasure_pending = False  # a forget whose WAL checkpoint was blocked by a reader
        try:
            conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30,
                                   isolation_level=None)  # transactions are explicit, see transaction()
            self.db = sqlite_utils.Database(conn)
            self._check_is_ours()
            for pragma in ("journal_mode=WAL", "foreign_keys=ON", "secure_delete=ON",
                           "synchronous=NORMAL", "busy_timeout=30000"):
                self.db.execute(f"PRAGMA {pragma}")
            new = "meta" not in self.db.table_names()
            version = SCHEMA_VERSION if new else int(self.get_meta("schema_version", "0"))
            if version > SCHEMA_VERSION:
                raise StoreCorruptError(f"{self.path} has schema version {version}, "
                                        f"this Bio-Memory reads versions up to {SCHEMA_VERSION}")
            self.sealer = self._open_sealer(key, settings)
            if version < SCHEMA_VERSION:
                self._migrate(version)
            else:
                with self.transaction() as db:
                    self._create_schema()
                    db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
                    self._write_key_check(db)
        except sqlite3.DatabaseError as exc:
            raise StoreCorruptError(f"{self.path} is not a readable SQLite database ({exc}); "
                                    "it was left untouched") from exc

    def _create_schema(self) -> None:
        for statement in _statements(SCHEMA):
            self.db.execute(statement)
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", [secrets.token_hex(16)])

    def _open_sealer(self, key: bytes | None, settings: Settings | None) -> Sealer:
        """The template sealer, checked against the stored check value. A new store, or a version-1
        one about to be sealed, gets its check value in the transaction that creates or migrates it,
        so a failed migration leaves the file as it was."""
        tables = set(self.db.table_names())
        check = self.get_meta("key_check") if "meta" in tables else None
        sealer = Sealer(key if key is not None else load_key(create=check is None, settings=settings))
        if check is not None:
            sealer.verify(bytes.fromhex(check), b"key-check")
        return sealer

    def _write_key_check(self, db: sqlite_utils.Database) -> None:
        db.execute("INSERT OR IGNORE INTO meta VALUES ('key_check', ?)", [self.sealer.check_value(b"key-check").hex()])

    def _migrate(self, version: int) -> None:
        """Upgrade in one transaction (foreign keys off while tables are rebuilt), then compact."""
        if version != 1:
            raise StoreCorruptError(f"{self.path} has schema version {version}: no migration from it")
        with self.lock:
            self.db.execute("PRAGMA foreign_keys=OFF")
            try:
                with self.transaction() as db:
                    migrate_1_to_2(db.conn, self._create_schema, self._seal_row)
                    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])
                    self._write_key_check(db)
            finally:
                self.db.execute("PRAGMA foreign_keys=ON")
            self.db.execute("VACUUM")  # no plaintext template left in free pages
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    @property
    def store_id(self) -> str:
        """Random id of this store, made at creation: index files are stamped with it."""
        return self.get_meta("store_id")

    def _context(self, identity_id: int, modality: str) -> bytes:
        return f"template:{self.store_id}:{int(identity_id)}:{modality}".encode()

    def _seal_row(self, vector: np.ndarray, identity_id: int, modality: str) -> bytes:
        return self.sealer.seal(vector, self._context(identity_id, modality))

    def rekey(self, key: bytes) -> None:
        """Re-seal every template (and the check value) under `key`, in one transaction."""
        new = Sealer(key)
        with self.transaction() as db:
            rows = db.execute("SELECT id, identity_id, modality, embedding FROM templates").fetchall()
            for template_id, owner, modality, blob in rows:
                context = self._context(owner, modality)
                db.execute("UPDATE templates SET embedding = ? WHERE id = ?",
                           [new.seal(self.sealer.open(blob, context), context), template_id])
            db.execute("UPDATE meta SET value = ? WHERE key = 'key_check'", [new.check_value(b"key-check").hex()])
            self._bump_templates(db)
        self.sealer = new
        self.checkpoint()

    def _check_is_ours(self) -> None:
        tables = set(self.db.table_names())
        if tables and "meta" not in tables:
            raise StoreCorruptError(f"{self.path} is an SQLite database of something else "
                                    f"(tables: {', '.join(sorted(tables)[:5])}); left untouched")

    @contextmanager
    def transaction(self) -> Iterator[sqlite_utils.Database]:
        """Hold the lock and one write transaction; roll back everything on any error.

        Writes use plain SQL inside it: sqlite-utils' own write helpers commit on exit,
        which would split one logical change into several.
        """
        with self.lock:
            if self.db.conn.in_transaction:  # nested: the outer transaction decides
                yield self.db
                return
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def close(self) -> None:
        """Checkpoint the WAL into the main file and close; closing twice is harmless."""
        with self.lock:
            if self.closed:
                return
            busy, _, _ = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy and self.erasure_pending:
                log.warning("closed %s while another connection still reads it: erased pages of a forget "
                            "remain in its write-ahead log until the next checkpoint", self.path)
            self.db.close()
            self.closed = True

    def checkpoint(self, timeout: float = 10.0) -> None:
        """Copy the WAL into the main file and truncate it to zero bytes, waiting up to
        `timeout` seconds for other connections' readers; ForgetIncompleteError if they stay
        (and `erasure_pending` stays set until a later checkpoint succeeds)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            self.db.execute("PRAGMA busy_timeout=100")
            try:
                while True:
                    busy, _, _ = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                    wal = self.path.with_name(self.path.name + "-wal")
                    if not busy and (not wal.exists() or wal.stat().st_size == 0):
                        self.erasure_pending = False
                        return
                    if time.monotonic() > deadline:
                        self.erasure_pending = True
                        raise ForgetIncompleteError(
                            f"another connection kept reading {self.path} for {timeout:g} s: the rows are "
                            "deleted, but their erased pages are still in its write-ahead log; call "
                            "finish_erasure() once the reader is done (forget() and close() retry it) "
                            "before telling anyone their data is gone")
                    time.sleep(0.05)
            finally:
                self.db.execute("PRAGMA busy_timeout=30000")

    # meta and thresholds
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        with self.lock:
            row = self.db.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])

    def threshold(self, modality: str, *, step_up: bool = False) -> tuple[float, str] | None:
        """(τ, provenance) stored for `modality` (the step-up τ with `step_up`), else None."""
        columns = "tau_strict, strict_source" if step_up else "tau, source"
        with self.lock:
            row = self.db.execute(f"SELECT {columns} FROM thresholds WHERE modality = ?",
                                  [modality]).fetchone()
        return (float(row[0]), row[1]) if row and row[0] is not None else None

    def calibrated(self) -> list[str]:
        """Modalities with a stored τ (calibrated or set by hand)."""
        with self.lock:
            return [r[0] for r in self.db.execute("SELECT modality FROM thresholds ORDER BY 1")]

    def set_threshold(self, modality: str, tau: float, source: str, *, step_up: bool = False) -> None:
        columns = ("tau_strict", "strict_source") if step_up else ("tau", "source")
        with self.transaction() as db:
            db.execute(f"INSERT INTO thresholds (modality, {columns[0]}, {columns[1]}, updated) "
                       f"VALUES (?, ?, ?, ?) ON CONFLICT(modality) DO UPDATE SET {columns[0]} = excluded."
                       f"{columns[0]}, {columns[1]} = excluded.{columns[1]}, updated = excluded.updated",
                       [modality, float(tau), source, now_iso()])

    # identities and templates
    def add_identity(self, label: str, modality: str, templates: np.ndarray, *,
                     sample: bool = False) -> Identity:
        """A new identity (its id is never reused); DuplicateLabelError if the label is taken."""
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM identities WHERE label_key = ?", [label.casefold()]).fetchone():
                raise DuplicateLabelError(f"the name {label!r} is taken: choose another")
            identity_id = db.execute(
                "INSERT INTO identities (label, label_key, created, sample) VALUES (?, ?, ?, ?)",
                [label, label.casefold(), now_iso(), int(sample)]).lastrowid
            self.add_templates(identity_id, modality, templates)
        return Identity(identity_id, label, sample)

    def add_templates(self, identity_id: int, modality: str, templates: np.ndarray) -> None:
        with self.transaction() as db:
            self.identity(identity_id)
            db.conn.executemany(
                "INSERT INTO templates (identity_id, modality, embedding, created) VALUES (?, ?, ?, ?)",
                [(identity_id, modality, self._seal_row(t, identity_id, modality), now_iso())
                 for t in templates])
            self._bump_templates(db)

    @staticmethod
    def _bump_templates(db: sqlite_utils.Database) -> None:
        db.execute("INSERT INTO meta VALUES ('templates_version', '1') ON CONFLICT(key) "
                   "DO UPDATE SET value = CAST(value AS INTEGER) + 1")

    def templates_version(self) -> str:
        return self.get_meta("templates_version", "0")

    def identity(self, identity_id: int) -> Identity:
        with self.lock:
            row = self.db.execute("SELECT id, label, sample FROM identities WHERE id = ?",
                                  [check_id(identity_id, "identity")]).fetchone()
        if row is None:
            raise UnknownIdentityError(f"no identity with id {identity_id}")
        return Identity(row[0], row[1], bool(row[2]))

    def identities(self) -> list[Identity]:
        with self.lock:
            return [Identity(i, label, bool(sample)) for i, label, sample in
                    self.db.execute("SELECT id, label, sample FROM identities ORDER BY id")]

    def templates(self, modality: str) -> tuple[np.ndarray, np.ndarray]:
        """(identity ids, opened template matrix) of every template of `modality`, grouped by identity."""
        with self.lock:
            rows = self.db.execute("SELECT identity_id, embedding FROM templates WHERE modality = ? "
                                   "ORDER BY identity_id, id", [modality]).fetchall()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        matrix = (np.stack([self.sealer.open(blob, self._context(owner, modality)) for owner, blob in rows])
                  if rows else np.zeros((0, 0), np.float32))
        return ids, matrix

    def modalities(self, identity_id: int | None = None) -> list[str]:
        """Modalities with templates (of one identity when given)."""
        where, args = ("WHERE identity_id = ?", [int(identity_id)]) if identity_id is not None else ("", [])
        with self.lock:
            return [r[0] for r in self.db.execute(
                f"SELECT DISTINCT modality FROM templates {where} ORDER BY 1", args)]

    def delete_identity(self, identity_id: int) -> None:
        """Delete the identity and, by cascade, its templates, notes, links and history (secure_delete
        zeroes the main file's pages; checkpoint() then empties the WAL)."""
        with self.transaction() as db:
            self.identity(identity_id)
            db.execute("DELETE FROM identities WHERE id = ?", [int(identity_id)])
            self._bump_templates(db)

    # notes
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
        row = self.db.execute(
            "SELECT id, owner_id, content, timestamp, keywords, tags, context FROM notes "
            "WHERE id = ? AND owner_id = ?", [check_id(note_id), int(owner_id)]).fetchone()
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

    @staticmethod
    def _to_note(row: tuple, links: list[int]) -> Note:
        return Note(id=row[0], owner=row[1], content=row[2], timestamp=row[3],
                    keywords=json.loads(row[4]), tags=json.loads(row[5]), context=row[6], links=links)

    def get_note(self, owner_id: int, note_id: int) -> Note:
        """The note `note_id` if `owner_id` owns it, else NoteNotFoundError."""
        with self.lock:
            row = self._note_row(owner_id, note_id)
            return self._to_note(row, self._links([row[0]])[row[0]])

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
                        "SELECT id, owner_id, content, timestamp, keywords, tags, context FROM notes "
                        f"WHERE +owner_id = ? AND id IN ({marks})",  # '+': look up by id, then check
                        [int(owner_id), *chunk]):
                    rows[row[0]] = row
            links = self._links(list(rows))
        return [self._to_note(rows[i], links[i]) for i in wanted if i in rows]

    def all_notes(self, owner_id: int) -> list[Note]:
        """Every note of `owner_id`, oldest first."""
        with self.lock:
            rows = self.db.execute(
                "SELECT id, owner_id, content, timestamp, keywords, tags, context FROM notes "
                "WHERE owner_id = ? ORDER BY timestamp, id", [int(owner_id)]).fetchall()
            links = self._links([r[0] for r in rows])
        return [self._to_note(r, links[r[0]]) for r in rows]

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

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {t: self.db[t].count for t in ("identities", "templates", "notes", "links", "history")}

    def note_summary(self) -> dict[int, tuple[int, str]]:
        """Per owner: (number of notes, latest timestamp) — what a gated-out panel may show."""
        with self.lock:
            return {owner: (count, latest) for owner, count, latest in self.db.execute(
                "SELECT owner_id, COUNT(*), MAX(timestamp) FROM notes GROUP BY owner_id")}
