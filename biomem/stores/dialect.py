"""The hooks through which the logic both stores share (note_logic, store_logic) runs its SQL in either dialect.

A store supplies them (biomem.stores.sqlite.store, biomem.stores.pg.store); the shared mixins, in the manner of
sqlite-utils' Queryable, write each statement once with MARK as its placeholder and hold each read and write
the way the store's dialect does: SQLite behind its one lock and BEGIN IMMEDIATE, PostgreSQL in a transaction
that admits the owners it is for (row-level security).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any


class Dialect:
    """What a store's dialect supplies to the shared logic; a connection here is anything with
    `execute(sql, params)` returning a cursor (sqlite_utils.Database, psycopg.Connection)."""

    MARK: str  # the placeholder: "?" or "%s"
    _reading: Callable[..., AbstractContextManager[Any]]  # (owners=None): a connection to read, owners admitted
    _writing: Callable[..., AbstractContextManager[Any]]  # (owners=None): one write transaction, owners admitted
    _among: Callable[[str, Sequence[Any]], tuple[str, list[Any]]]  # (column, values): "column is one of them"
    _inserted_id: Callable[[Any, str, list[Any]], int]  # (conn, INSERT, args): the id of the row it inserted
    _execute_many: Callable[[Any, str, list[tuple]], None]  # (conn, statement, rows): one statement per row
    memo: Callable[[tuple, Callable[[], Any]], Any]  # (key, read): a read remembered between writes, or made now

    def _fetch_one(self, sql: str, args: list[Any], owners: Iterable[int] | None = None) -> tuple | None:
        """The first row of one read statement, with `owners` admitted."""
        with self._reading(owners) as conn:
            return conn.execute(sql, args).fetchone()

    def _bump_generation(self, conn: Any, owner_id: int) -> int:
        """Mark the owner's partition changed; returns the new generation (for index patches)."""
        return conn.execute(f"UPDATE identities SET generation = generation + 1 WHERE id = {self.MARK} "
                            "RETURNING generation", [int(owner_id)]).fetchone()[0]
