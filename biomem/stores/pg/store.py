"""PostgreSQL + pgvector store: the same operations as the SQLite store, for several engine processes.

Connections come from a psycopg pool; each acts as the RLS-bound role `biomem_app` (biomem.stores.pg.schema)
and each note, link, history, template or membership statement runs in a transaction whose `biomem.admitted`
names the owners it is for (a person, or the groups whose notes they reach). Schema creation, upgrades,
copies and API keys use one connection as the URL's own user, who owns the tables. Generations and the
template version live in the database, so every process sees the others' writes on its next query.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from ...errors import DuplicateLabelError, NotAuthorisedError, StoreCorruptError
from ...settings import Settings
from ..base import COLUMNS, KEYS, SealedTemplates, SearchIndex
from ..labels import label_key, taken
from ..records import Identity, check_id, metadata_json, now_iso
from ..sealing import Sealer
from ..store_logic import StoreLogic
from .connections import Connections
from .graphs import GRAPH_FLOOR, HNSW_THRESHOLD
from .group_rows import PgGroupRows
from .note_rows import PgNoteRows, as_array
from .schema import APP_ROLE, MIGRATIONS, SCHEMA_VERSION
from .search import DatabaseSearch

# One HNSW graph over every owner's notes (pgvector's defaults, m 16, ef_construction 64): what search used
# before per-owner graphs (biomem.stores.pg.graphs); kept for benchmarks/pg_retrieval.py's comparison
VECTOR_INDEX = "CREATE INDEX notes_hnsw ON notes USING hnsw (embedding vector_ip_ops)"


class PostgresStore(PgNoteRows, PgGroupRows, SealedTemplates, StoreLogic):
    """The store in a PostgreSQL database (pgvector >= 0.8); every public method is one transaction.

    url: postgresql://user[:password]@host[:port]/db (or with ?host=/socket/dir). The user must own
    the `biomem` schema to create or upgrade it, and may act as `biomem_app` (PostgreSQL 16+).
    key, settings: the template key, as for the SQLite store.
    pool_size: most connections this process holds.
    """

    def __init__(self, url: str, *, key: bytes | None = None, settings: Settings | None = None,
                 pool_size: int = 8) -> None:
        self.connections = Connections(url, pool_size)
        self.url, self.location = url, self.connections.location
        self.erasure_pending = False  # PostgreSQL's erasure is the server's (see checkpoint)
        try:
            self._migrate()
        except psycopg.OperationalError as exc:
            raise StoreCorruptError(f"cannot reach PostgreSQL at {self.location}: {exc}") from exc
        self.connections.open()
        self.sealer = self._open_key(key, settings)

    def _open_key(self, key: bytes | None, settings: Settings | None) -> Sealer:
        check = self.get_meta("key_check")
        sealer = self.open_sealer(key, check, settings)
        if check is None:  # a new store: its check value, unless another process wrote one first
            with self.transaction() as conn:
                conn.execute("INSERT INTO meta VALUES ('key_check', %s) ON CONFLICT DO NOTHING",
                             [sealer.check_value(b"key-check").hex()])
            sealer.verify(bytes.fromhex(self.get_meta("key_check")), b"key-check")
        return sealer

    def _migrate(self) -> None:
        """Create the schema or bring it to SCHEMA_VERSION, one transaction under an advisory lock."""
        with self.owner_connection() as conn:
            self._check_member(conn)
            version = self._version(conn)
            if version == SCHEMA_VERSION:
                self.connections.owns_notes = self._owns_notes(conn)
                return
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('biomem schema'))")
            version = self._version(conn)  # another process may have done it while we waited
            if version > SCHEMA_VERSION:
                raise StoreCorruptError(f"{self.location} has schema version {version}, this Bio-Memory "
                                        f"reads versions up to {SCHEMA_VERSION}")
            if version == 0:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            for step in range(max(version + 1, min(MIGRATIONS)), SCHEMA_VERSION + 1):
                migration = MIGRATIONS[step]
                if isinstance(migration, str):
                    conn.execute(migration)
                else:
                    migration(conn)
            if version == 0:
                conn.execute("INSERT INTO biomem.meta VALUES ('store_id', %s)", [secrets.token_hex(16)])
            conn.execute("INSERT INTO biomem.meta VALUES ('schema_version', %s) ON CONFLICT (key) "
                         "DO UPDATE SET value = excluded.value", [str(SCHEMA_VERSION)])
            self._check_member(conn)
            self.connections.owns_notes = self._owns_notes(conn)

    @staticmethod
    def _owns_notes(conn: psycopg.Connection) -> bool:
        """Whether the connection's user may alter the notes table (its owner, a member of that role, a superuser)."""
        return bool(conn.execute("SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class "
                                 "WHERE oid = 'biomem.notes'::regclass").fetchone()[0])

    @staticmethod
    def _check_member(conn: psycopg.Connection) -> None:
        """StoreCorruptError unless the URL's user may act as the engine's role (once that role exists)."""
        member = conn.execute("SELECT pg_has_role(current_user, oid, 'SET') FROM pg_roles WHERE rolname = %s",
                              [APP_ROLE]).fetchone()
        if member is not None and not member[0]:
            raise StoreCorruptError(f"the database user may not act as {APP_ROLE}: GRANT {APP_ROLE} TO <user> "
                                    "(README, Storage)")

    @staticmethod
    def _version(conn: psycopg.Connection) -> int:
        if conn.execute("SELECT to_regclass('biomem.meta')").fetchone()[0] is None:
            return 0
        row = conn.execute("SELECT value FROM biomem.meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    # connections (biomem.stores.pg.connections)
    def transaction(self, owners: Iterable[int] | None = None) -> AbstractContextManager[psycopg.Connection]:
        """One transaction admitting the rows of `owners`, joined by nested calls on this thread."""
        return self.connections.transaction(owners)

    def reading(self) -> AbstractContextManager[psycopg.Connection]:
        """A connection for one read statement that admits no owner."""
        return self.connections.reading()

    def owner_connection(self) -> AbstractContextManager[psycopg.Connection]:
        """One transaction as the URL's own user: migrations, DDL, copies and API keys."""
        return self.connections.owner_connection()

    admit = staticmethod(Connections.admit)

    # the hooks of the shared logic (biomem.stores.dialect)
    MARK = "%s"

    def _reading(self, owners: Iterable[int] | None = None) -> AbstractContextManager[psycopg.Connection]:
        """A read admitting `owners`; with none, one statement in autocommit (reading)."""
        return self.reading() if owners is None else self.transaction(owners)

    def _writing(self, owners: Iterable[int] | None = None) -> AbstractContextManager[psycopg.Connection]:
        return self.transaction(owners)

    @staticmethod
    def _among(column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY (%s)", [list(values)]

    @staticmethod
    def _inserted_id(conn: psycopg.Connection, sql: str, args: list[Any]) -> int:
        return conn.execute(f"{sql} RETURNING id", args).fetchone()[0]

    @staticmethod
    def _execute_many(conn: psycopg.Connection, sql: str, rows: list[tuple]) -> None:
        with conn.cursor() as cursor:
            cursor.executemany(sql, rows)

    @staticmethod
    def memo(key: tuple, read: Callable[[], Any]) -> Any:
        """`read()` now: nothing is remembered, other processes write the same database."""
        return read()

    def _admit_erasure(self, conn: psycopg.Connection, identity_id: int) -> None:
        """Admit the person and every group: the notes they wrote may be in any group, even one they left."""
        groups = [g for (g,) in conn.execute("SELECT id FROM identities WHERE kind = 'group'")]
        self.admit(conn, [int(identity_id), *groups])

    @property
    def closed(self) -> bool:
        return self.connections.closed

    def close(self) -> None:
        """Stop background work (a graph being built is cancelled), close the pool; closing twice is harmless."""
        self.connections.close()

    def checkpoint(self, timeout: float = 10.0) -> None:
        """Nothing to do here: deleted rows are gone for every query at commit; the server's vacuum
        reclaims their pages and its WAL retention decides when the bytes leave (README)."""

    def search_index(self, dim: int, *, hnsw_threshold: int | None = None) -> SearchIndex:
        """Search in the database: exact per-owner scans, and an HNSW graph of its own for each partition of
        at least `hnsw_threshold` notes (default HNSW_THRESHOLD, 10,000; raised to GRAPH_FLOOR, 1,000; a
        threshold above every partition scans them all): biomem.stores.pg.graphs. This open builds the graphs
        that are due, CONCURRENTLY, unless another process is at it (then in the background); a write that
        makes a partition cross the threshold builds its graph in the background."""
        self.ensure_vector_index(dim, hnsw=False)
        threshold = max(HNSW_THRESHOLD if hnsw_threshold is None else int(hnsw_threshold), GRAPH_FLOOR)
        search = DatabaseSearch(self.connections, hnsw_threshold=threshold)
        search.index_partitions(wait=False)
        return search

    def ensure_vector_index(self, dim: int, *, hnsw: bool = False) -> None:
        """Type the note embeddings as vector(dim) and, with `hnsw`, give them one HNSW index over every
        owner (VECTOR_INDEX: the benchmark's baseline; search builds graphs per owner instead)."""
        with self.transaction() as conn:
            typed = conn.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                                 "'biomem.notes'::regclass AND attname = 'embedding'").fetchone()[0]
            indexed = conn.execute("SELECT to_regclass('biomem.notes_hnsw')").fetchone()[0] is not None
        if typed == f"vector({dim})" and (indexed or not hnsw):
            return
        if typed not in ("vector", f"vector({dim})"):
            raise StoreCorruptError(f"{self.location} holds {typed} note embeddings, the text model makes {dim}-d ones")
        with self.owner_connection() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('biomem schema'))")
            if typed == "vector":
                conn.execute(f"ALTER TABLE notes ALTER COLUMN embedding TYPE vector({int(dim)})")
            if hnsw:
                conn.execute(VECTOR_INDEX.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS"))

    # identities and templates
    def add_identity(self, label: str, modality: str, templates: np.ndarray, *, sample: bool = False) -> Identity:
        """A new identity (its id is never reused); DuplicateLabelError if the label, or one it looks like, is taken."""
        with self.transaction() as conn:
            row = conn.execute("INSERT INTO identities (label, label_key, created, sample) VALUES (%s, %s, %s, %s) "
                               "ON CONFLICT (label_key) DO NOTHING RETURNING id",
                               [label, label_key(label), now_iso(), bool(sample)]).fetchone()
            if row is None:
                raise DuplicateLabelError(taken(label))
            self.add_templates(row[0], modality, templates)
        return Identity(row[0], label, sample)

    @staticmethod
    def _bump_templates(conn: psycopg.Connection) -> None:
        conn.execute("INSERT INTO meta VALUES ('templates_version', '1') ON CONFLICT (key) "
                     "DO UPDATE SET value = (meta.value::bigint + 1)::text")

    def templates(self, modality: str) -> tuple[np.ndarray, np.ndarray]:
        """(identity ids, opened template matrix) of every template of `modality` (the gallery)."""
        with self.transaction() as conn:
            rows = conn.execute("SELECT identity_id, embedding FROM gallery(%s)", [modality]).fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64), self._open_rows(rows, modality)

    def modalities(self, identity_id: int | None = None) -> list[str]:
        with self.transaction() as conn:
            return [r[0] for r in conn.execute("SELECT gallery_modalities(%s)",
                                               [None if identity_id is None else int(identity_id)])]

    # service API keys (biomem.engine.keys): digests only, written and listed by the tables' owner (schema version 8)
    @contextmanager
    def _keys_as_owner(self) -> Iterator[psycopg.Connection]:
        """owner_connection(), for the operator's key management: NotAuthorisedError when the URL's user does not
        own the tables (a replica's login, which may only act as the engine's role)."""
        try:
            with self.owner_connection() as conn:
                yield conn
        except psycopg.errors.InsufficientPrivilege:
            raise NotAuthorisedError(f"API keys are created, listed and revoked with the URL of the user who owns "
                                     f"the store's tables (docs/storage.md); {self.location}'s user may not") from None

    def add_api_key(self, name: str, role: str, digest: str, prefix: str) -> int:
        with self._keys_as_owner() as conn:
            return conn.execute("INSERT INTO api_keys (name, role, digest, prefix, created) "
                                "VALUES (%s, %s, %s, %s, %s) RETURNING id",
                                [name, role, digest, prefix, now_iso()]).fetchone()[0]

    def api_key(self, digest: str) -> tuple[int, str, str] | None:
        """(id, name, role) of the unrevoked key with this digest, else None: the engine's role reads no table."""
        with self.reading() as conn:
            return conn.execute("SELECT id, name, role FROM api_key(%s)", [digest]).fetchone()

    def api_keys_in_use(self) -> bool:
        """Whether an unrevoked key exists, asked as the engine's role."""
        with self.reading() as conn:
            return bool(conn.execute("SELECT api_keys_in_use()").fetchone()[0])

    def api_keys(self) -> list[dict[str, Any]]:
        with self._keys_as_owner() as conn:
            rows = conn.execute("SELECT id, name, role, prefix, created, revoked FROM api_keys ORDER BY id")
            return [dict(zip(("id", "name", "role", "prefix", "created", "revoked"), row)) for row in rows]

    def revoke_api_key(self, key_id: int) -> bool:
        with self._keys_as_owner() as conn:
            return conn.execute("UPDATE api_keys SET revoked = %s WHERE id = %s AND revoked IS NULL",
                                [now_iso(), check_id(key_id, "key")]).rowcount == 1

    def counts(self) -> dict[str, int]:
        with self.transaction() as conn:
            return dict(conn.execute("SELECT name, n FROM row_counts()").fetchall())

    # copying between stores (biomem.stores.copying), as the tables' owner: no row-level security applies
    def export_rows(self, table: str) -> Iterator[tuple]:
        columns = COLUMNS[table]
        with self.owner_connection() as conn:
            register_vector(conn)
            for row in conn.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {KEYS[table]}"):
                yield tuple(_portable(column, value) for column, value in zip(columns, row))

    def import_rows(self, table: str, rows: Iterable[tuple]) -> None:
        """Insert exported rows as they are (ids kept; a meta row replaces this store's own), by COPY."""
        columns = COLUMNS[table]
        with self.owner_connection() as conn:
            register_vector(conn)
            if table == "meta":  # the store's own rows are there already: upsert
                conn.cursor().executemany("INSERT INTO meta (key, value) VALUES (%s, %s) "
                                          "ON CONFLICT (key) DO UPDATE SET value = excluded.value", rows)
                return
            # notes: one HNSW build over the copied rows, not one graph insertion per row
            indexed = table == "notes" and conn.execute("SELECT to_regclass('biomem.notes_hnsw')").fetchone()[0]
            if indexed:
                conn.execute("DROP INDEX notes_hnsw")
            with conn.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(tuple(_native(table, c, v) for c, v in zip(columns, row)))
            if indexed:
                conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
                conn.execute(VECTOR_INDEX)

    def id_floor(self, table: str) -> int:
        """The highest id `table` ever gave (a deleted row's id included): never given again."""
        with self.owner_connection() as conn:
            sequence = conn.execute("SELECT pg_get_serial_sequence(%s, 'id')", [f"biomem.{table}"]).fetchone()[0]
            row = conn.execute("SELECT last_value, is_called FROM " + sequence).fetchone()
        return int(row[0]) if row[1] else 0

    def set_id_floor(self, table: str, floor: int) -> None:
        if floor > 0:
            with self.owner_connection() as conn:
                conn.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", [f"biomem.{table}", int(floor)])


def _portable(column: str, value: Any) -> Any:
    """A PostgreSQL value as the SQLite store exports it (float32 bytes, 0/1, metadata as JSON text)."""
    if column == "embedding" and not isinstance(value, bytes):
        return as_array(value).tobytes()
    if column == "sample":
        return int(value)
    if column == "metadata":  # jsonb, read as a dict: the text SQLite keeps (records.metadata_json)
        return metadata_json(value)
    return value


def _native(table: str, column: str, value: Any) -> Any:
    """An exported value as this store keeps it (note embeddings as vectors, sample as a boolean; metadata's
    JSON text goes into the jsonb column as it is)."""
    if table == "notes" and column == "embedding":
        return np.frombuffer(value, dtype=np.float32)
    if column == "sample":
        return bool(value)
    return value
