"""SQLite source of truth: identities, templates, notes, links, history, thresholds.

Every note has a NOT NULL owner; a trigger refuses links between two owners; every read
or write of a note by id takes the owner and matches on it. One connection serves all
threads behind one lock (the single write path); WAL keeps other processes' readers going.

Store opens, seals, migrates and checkpoints the file and supplies the hooks (biomem.stores.dialect) through
which the logic both stores share runs here (biomem.stores.note_logic, biomem.stores.store_logic); NoteRows
(note_rows.py) and GroupRows (group_rows.py) add SQLite's own note and group statements; the schema is
schema.py's.

The small rows every request reads (an owner's identity, generation and groups, meta, thresholds, cool-downs)
are remembered between writes (Store.memo): a search asks SQLite whether anything changed (`PRAGMA
data_version` for other connections, the connection's change count for its own writes) instead of reading
them again, so a read right after any write, by any process, sees it.
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils

from ...errors import DuplicateLabelError, ForgetIncompleteError, StoreCorruptError
from ...settings import Settings
from ..base import COLUMNS, KEYS, SealedTemplates, SearchIndex
from ..labels import label_key, rekey_people, taken
from ..partitions import HNSW_THRESHOLD, Partitions
from ..records import Identity, check_id, now_iso
from ..sealing import Sealer
from ..store_logic import StoreLogic
from .group_rows import GroupRows
from .migrations import migrate_1_to_2
from .note_rows import NoteRows
from .schema import SCHEMA, SCHEMA_VERSION, V5_COLUMNS, V6_COLUMNS, statements

log = logging.getLogger(__name__)

MEMO_ROWS = 100_000  # remembered reads kept between two writes; past it they are all read again


class Store(NoteRows, GroupRows, SealedTemplates, StoreLogic):
    """Typed access to the SQLite file; every public method is atomic and thread-safe.

    key: the 32-byte key that seals templates (default: `settings`' BIOMEM_KEY or key file, see
    biomem.stores.sealing); a store whose templates were sealed under another key does not open.
    settings: where that default key is found (default: Settings.from_env()).
    """

    def __init__(self, path: str | Path, *, key: bytes | None = None, settings: Settings | None = None) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self.lock = threading.RLock()
        self.closed = False
        self.erasure_pending = False  # a forget whose WAL checkpoint was blocked by a reader
        self._memo: dict[tuple, Any] = {}
        self._memo_version: tuple[int, int] | None = None  # (own changes, data_version) the memo was read at
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
        for statement in statements(SCHEMA):
            self.db.execute(statement)
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", [secrets.token_hex(16)])

    def _open_sealer(self, key: bytes | None, settings: Settings | None) -> Sealer:
        """The template sealer, checked against the stored check value. A new store, or a version-1
        one about to be sealed, gets its check value in the transaction that creates or migrates it,
        so a failed migration leaves the file as it was."""
        check = self.get_meta("key_check") if "meta" in self.db.table_names() else None
        return self.open_sealer(key, check, settings)

    def _write_key_check(self, db: sqlite_utils.Database) -> None:
        db.execute("INSERT OR IGNORE INTO meta VALUES ('key_check', ?)", [self.sealer.check_value(b"key-check").hex()])

    def _migrate(self, version: int) -> None:
        """Upgrade in one transaction (foreign keys off while tables are rebuilt), then compact.
        1 → 2 rebuilds every table (see biomem.stores.sqlite.migrations); 2 → 3 adds the api_keys table, 3 → 4
        the attempt-limit tables, 4 → 5 groups (V5_COLUMNS, then the new tables), 5 → 6 the ambiguity margin and
        evolution causes (V6_COLUMNS), 6 → 7 people's look-alike label keys (biomem.stores.labels.rekey_people),
        7 → 8 nothing (the version of PostgreSQL's API key grants), 8 → 9 the sources table (in SCHEMA)."""
        if version not in (1, 2, 3, 4, 5, 6, 7, 8):
            raise StoreCorruptError(f"{self.path} has schema version {version}: no migration from it")
        with self.lock:
            self.db.execute("PRAGMA foreign_keys=OFF")
            try:
                with self.transaction() as db:
                    if version == 1:
                        migrate_1_to_2(db.conn, self._create_schema, self._seal_row)
                        db.execute(V5_COLUMNS[-1])  # the rebuilt notes have the author column: fill it
                    else:
                        for statement in (*(V5_COLUMNS if version < 5 else ()), *(V6_COLUMNS if version < 6 else ())):
                            db.execute(statement)
                        self._create_schema()
                    if version < 7:
                        rekey_people(db.execute, "?")
                    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])
                    self._write_key_check(db)
            finally:
                self.db.execute("PRAGMA foreign_keys=ON")
            if version == 1:
                self.db.execute("VACUUM")  # no plaintext template left in free pages
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

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
            finally:
                self._memo.clear()  # no row remembered from before a change (a forgotten person's) outlives it
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

    def memo(self, key: tuple, read: Callable[[], Any]) -> Any:
        """`read()`'s value, remembered until the file changes: any write of this connection (its change count
        moves) or of another connection or process (`PRAGMA data_version` moves). Inside a transaction it is
        read afresh and not kept (a rollback would leave it wrong). Values must not be changed by callers."""
        with self.lock:
            conn = self.db.conn
            if conn.in_transaction:
                return read()
            version = (conn.total_changes, conn.execute("PRAGMA data_version").fetchone()[0])
            if version != self._memo_version or len(self._memo) >= MEMO_ROWS:
                self._memo.clear()
                self._memo_version = version
            if key not in self._memo:
                self._memo[key] = read()
            return self._memo[key]

    # the hooks of the shared logic (biomem.stores.dialect)
    MARK = "?"

    @contextmanager
    def _reading(self, owners: Iterable[int] | None = None) -> Iterator[sqlite_utils.Database]:
        """The connection, behind the lock (`owners` is PostgreSQL's: SQLite has no row-level security)."""
        with self.lock:
            yield self.db

    def _writing(self, owners: Iterable[int] | None = None) -> AbstractContextManager[sqlite_utils.Database]:
        """One write transaction (`owners` is PostgreSQL's)."""
        return self.transaction()

    @staticmethod
    def _among(column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} IN ({', '.join('?' * len(values))})", list(values)

    @staticmethod
    def _inserted_id(db: sqlite_utils.Database, sql: str, args: list[Any]) -> int:
        return db.execute(sql, args).lastrowid

    @staticmethod
    def _execute_many(db: sqlite_utils.Database, sql: str, rows: list[tuple]) -> None:
        db.conn.executemany(sql, rows)

    @staticmethod
    def _admit_erasure(db: sqlite_utils.Database, identity_id: int) -> None:
        """Nothing to admit: SQLite has no row-level security."""

    # identities and templates
    def add_identity(self, label: str, modality: str, templates: np.ndarray, *,
                     sample: bool = False) -> Identity:
        """A new identity (its id is never reused); DuplicateLabelError if the label, or one it looks like, is taken."""
        with self.transaction() as db:
            key = label_key(label)
            if db.execute("SELECT 1 FROM identities WHERE label_key = ?", [key]).fetchone():
                raise DuplicateLabelError(taken(label))
            identity_id = db.execute(
                "INSERT INTO identities (label, label_key, created, sample) VALUES (?, ?, ?, ?)",
                [label, key, now_iso(), int(sample)]).lastrowid
            self.add_templates(identity_id, modality, templates)
        return Identity(identity_id, label, sample)

    @staticmethod
    def _bump_templates(db: sqlite_utils.Database) -> None:
        db.execute("INSERT INTO meta VALUES ('templates_version', '1') ON CONFLICT(key) "
                   "DO UPDATE SET value = CAST(value AS INTEGER) + 1")

    def templates(self, modality: str) -> tuple[np.ndarray, np.ndarray]:
        """(identity ids, opened template matrix) of every template of `modality`, grouped by identity."""
        with self.lock:
            rows = self.db.execute("SELECT identity_id, embedding FROM templates WHERE modality = ? "
                                   "ORDER BY identity_id, id", [modality]).fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64), self._open_rows(rows, modality)

    def modalities(self, identity_id: int | None = None) -> list[str]:
        """Modalities with templates (of one identity when given)."""
        where, args = ("WHERE identity_id = ?", [int(identity_id)]) if identity_id is not None else ("", [])
        with self.lock:
            return [r[0] for r in self.db.execute(
                f"SELECT DISTINCT modality FROM templates {where} ORDER BY 1", args)]

    # service API keys (biomem.engine.keys): digests only
    def add_api_key(self, name: str, role: str, digest: str, prefix: str) -> int:
        with self.transaction() as db:
            return db.execute("INSERT INTO api_keys (name, role, digest, prefix, created) VALUES (?, ?, ?, ?, ?)",
                              [name, role, digest, prefix, now_iso()]).lastrowid

    def api_key(self, digest: str) -> tuple[int, str, str] | None:
        """(id, name, role) of the unrevoked key with this digest, else None."""
        with self.lock:
            return self.db.execute("SELECT id, name, role FROM api_keys WHERE digest = ? AND revoked IS NULL",
                                   [digest]).fetchone()

    def api_keys_in_use(self) -> bool:
        """Whether an unrevoked key exists."""
        with self.lock:
            return self.db.execute("SELECT EXISTS (SELECT 1 FROM api_keys WHERE revoked IS NULL)").fetchone()[0] == 1

    def api_keys(self) -> list[dict[str, Any]]:
        with self.lock:
            rows = self.db.execute("SELECT id, name, role, prefix, created, revoked FROM api_keys ORDER BY id")
            return [dict(zip(("id", "name", "role", "prefix", "created", "revoked"), row)) for row in rows]

    def revoke_api_key(self, key_id: int) -> bool:
        """Revoke key `key_id`; False when there is no such unrevoked key."""
        with self.transaction() as db:
            return db.execute("UPDATE api_keys SET revoked = ? WHERE id = ? AND revoked IS NULL",
                              [now_iso(), check_id(key_id, "key")]).rowcount == 1

    def search_index(self, dim: int, *, hnsw_threshold: int | None = None) -> SearchIndex:
        """Per-owner partitions derived from this file, hnswlib from `hnsw_threshold` notes (default
        20,000), their index files in `<file>.index/`."""
        return Partitions(self, self.path.with_name(self.path.name + ".index"), dim,
                          hnsw_threshold=HNSW_THRESHOLD if hnsw_threshold is None else hnsw_threshold)

    # copying between stores (biomem.stores.copying)
    def export_rows(self, table: str) -> Iterator[tuple]:
        """Every row of `table` in COLUMNS order, by key."""
        columns = COLUMNS[table]
        with self.lock:
            rows = self.db.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {KEYS[table]}").fetchall()
        yield from rows

    def import_rows(self, table: str, rows: Iterable[tuple]) -> None:
        """Insert exported rows as they are (ids kept; a meta row replaces this store's own)."""
        columns = COLUMNS[table]
        conflict = " ON CONFLICT(key) DO UPDATE SET value = excluded.value" if table == "meta" else ""
        with self.transaction() as db:
            db.conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                                f"({', '.join('?' * len(columns))}){conflict}", rows)

    def id_floor(self, table: str) -> int:
        """The highest id `table` ever gave (a deleted row's id included): never given again."""
        with self.lock:
            row = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", [table]).fetchone()
        return int(row[0]) if row else 0

    def set_id_floor(self, table: str, floor: int) -> None:
        with self.transaction() as db:
            if db.execute("UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = ?", [floor, table]).rowcount == 0:
                db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", [table, floor])

    def counts(self) -> dict[str, int]:
        """Rows per table, people and households apart (the operator's stats)."""
        with self.lock:
            kinds = dict(self.db.execute("SELECT kind, count(*) FROM identities GROUP BY kind").fetchall())
            return {"identities": kinds.get("person", 0), "groups": kinds.get("group", 0),
                    **{t: self.db[t].count for t in ("templates", "notes", "links", "history")}}
