"""The PostgreSQL store's way to its database: pooled connections of the RLS-bound role, one transaction per
thread that nested calls join, and the URL user's own connection for DDL.

The store, its search and its per-owner graphs all take this object, so none of them reaches into another.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import psycopg
from pgvector.psycopg import register_vector
from psycopg_pool import ConnectionPool

from ...errors import StoreCorruptError
from ..base import without_password
from .schema import APP_ROLE


class Connections:
    """Connections to one database: `owner_connection` works before `open`, which starts the pool (the app role
    it acts as must exist: the store's migration creates it); `close` stops what `on_close` registered, then
    the pool."""

    def __init__(self, url: str, pool_size: int = 8) -> None:
        self.url = url
        self.location = without_password(url)
        self.pool_size = pool_size
        self.owns_notes = False  # whether the URL's user may alter the notes table (builds and drops graphs)
        self.closed = False
        self._pool: ConnectionPool | None = None
        self._local = threading.local()
        self._closers: list[Callable[[], None]] = []

    def open(self) -> None:
        """Start the pool; StoreCorruptError when the server cannot be reached."""
        try:
            self._pool = ConnectionPool(self.url, min_size=1, max_size=self.pool_size, configure=self._configure,
                                        open=True, timeout=30, name="biomem")
        except psycopg.OperationalError as exc:
            raise StoreCorruptError(f"cannot reach PostgreSQL at {self.location}: {exc}") from exc

    @property
    def pool(self) -> ConnectionPool:
        if self._pool is None:
            raise StoreCorruptError(f"the connections to {self.location} are not open")
        return self._pool

    @staticmethod
    def _configure(conn: psycopg.Connection) -> None:
        """A pooled connection acts as the RLS-bound role (membership checked at open), with pgvector's types."""
        conn.execute(f"SET ROLE {APP_ROLE}")
        conn.execute("SET search_path = biomem, public")
        register_vector(conn)
        conn.commit()

    @contextmanager
    def owner_connection(self) -> Iterator[psycopg.Connection]:
        """One transaction as the URL's own user, who owns the tables: migrations, DDL, copies and API keys."""
        with psycopg.connect(self.url, connect_timeout=30) as conn:
            conn.execute("SET search_path = biomem, public")
            yield conn

    @contextmanager
    def autocommit(self) -> Iterator[psycopg.Connection]:
        """The URL user's own connection in autocommit: statements that cannot run in a transaction (CREATE INDEX
        CONCURRENTLY) and session-level advisory locks."""
        with psycopg.connect(self.url, autocommit=True, connect_timeout=30) as conn:
            yield conn

    @property
    def in_transaction(self) -> bool:
        """Whether this thread is inside a `transaction` (whose admitted owners are its caller's)."""
        return getattr(self._local, "conn", None) is not None

    @contextmanager
    def transaction(self, owners: Iterable[int] | None = None) -> Iterator[psycopg.Connection]:
        """One transaction on a pooled connection (joined by nested calls on this thread), admitting
        the rows of `owners` (row-level security: nothing of anyone else is visible or writable)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            if owners is not None:
                self.admit(conn, owners)
            yield conn
            return
        with self.pool.connection() as conn:  # commits on success, rolls back on error
            self._local.conn = conn
            try:
                if owners is not None:
                    self.admit(conn, owners)
                yield conn
            finally:
                self._local.conn = None

    @contextmanager
    def reading(self) -> Iterator[psycopg.Connection]:
        """A connection for one read statement that admits no owner: the current transaction's if there
        is one, else a pooled connection in autocommit, which spares the BEGIN and COMMIT round trips."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.pool.connection() as conn:
            conn.autocommit = True
            try:
                yield conn
            finally:
                conn.autocommit = False

    @staticmethod
    def admit(conn: psycopg.Connection, owners: Iterable[int]) -> None:
        """Make `owners` the transaction's admitted owners (row-level security), replacing any others."""
        admitted = "{" + ",".join(str(int(o)) for o in owners) + "}"
        conn.execute("SELECT set_config('biomem.admitted', %s, true)", [admitted])

    def on_close(self, closer: Callable[[], None]) -> None:
        """Call `closer` when the store closes (a search index's background work)."""
        self._closers.append(closer)

    def close(self) -> None:
        """Stop background work (a graph being built is cancelled), close the pool; closing twice is harmless."""
        if not self.closed:
            for closer in self._closers:
                closer()
            if self._pool is not None:
                self._pool.close()
            self.closed = True
