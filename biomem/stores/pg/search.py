"""Semantic search inside PostgreSQL: one owner's notes ranked by pgvector, no local index.

Every partition is scanned exactly by default (the owner's rows through the btree on owner_id,
then sorted by inner product: the SQLite engine's exact top-K, ties oldest first). Given an
`hnsw_threshold`, a partition of at least that many notes walks pgvector's HNSW index over all
notes with iterative scan, keeping only the owner's rows, and re-ranks what it found: one graph
for every owner, so it pays off only for an owner holding much of the table (at 20,000 notes of
200,000 it was slower than the scan and found 0.375 of the top 10; benchmarks/retrieval.py).
A search `within` a filter, hidden notes or an audience (biomem.stores.base.Within) is always the exact
scan, those conditions in its WHERE clause: the top-K of the notes they allow, K of them when K qualify.
Both run under row-level security for that owner alone, so replicas share the database and hold
nothing of their own to go stale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg

from ..filters import compile_filter

if TYPE_CHECKING:
    from ..base import Within
    from .store import PostgresStore

# Parameters, positional (a compiled filter's are): the query vector, the owner, those of {} (more
# conditions on the owner's rows), k.
_EXACT = """
WITH mine AS MATERIALIZED (
    SELECT id, timestamp, -(embedding <#> %s) AS score FROM notes WHERE owner_id = %s{})
SELECT id, score FROM mine ORDER BY score DESC, timestamp, id LIMIT %s
"""
# the query vector, the owner, the query vector again, k
_APPROXIMATE = """
SELECT id, score FROM (
    SELECT id, timestamp, -(embedding <#> %s) AS score FROM notes
    WHERE owner_id = %s ORDER BY embedding <#> %s LIMIT %s) found
ORDER BY score DESC, timestamp, id
"""


class DatabaseSearch:
    """biomem.stores.SearchIndex over a PostgresStore: every search is one query in the database."""

    def __init__(self, store: PostgresStore, *, hnsw_threshold: int | None = None, ef_search: int = 1000) -> None:
        self.store = store
        self.hnsw_threshold = hnsw_threshold
        self.ef_search = ef_search

    def search(self, owner_id: int, query: np.ndarray, k: int,
               within: Within | None = None) -> list[tuple[int, float]]:
        """Top-k (note id, cosine) among the owner's notes, best first, ties oldest first; with `within`,
        among the notes it allows only (always the exact scan)."""
        with self.store.transaction([owner_id]) as conn:
            sql, args = self._query(conn, owner_id, query, k, within)
            return [(int(i), float(s)) for i, s in conn.execute(sql, args)]

    def explain(self, owner_id: int, query: np.ndarray, k: int, within: Within | None = None) -> str:
        """The plan PostgreSQL runs for search(owner_id, query, k, within), as EXPLAIN prints it."""
        with self.store.transaction([owner_id]) as conn:
            sql, args = self._query(conn, owner_id, query, k, within)
            return "\n".join(row[0] for row in conn.execute("EXPLAIN " + sql, args))

    def _query(self, conn: psycopg.Connection, owner_id: int, query: np.ndarray, k: int,
               within: Within | None = None) -> tuple[str, list]:
        """The search statement for this owner's partition size, with its transaction's HNSW settings:
        the widest candidate list pgvector allows (the graph holds every owner's notes, the owner's are a
        fraction of what it visits), iterative scan until k of them are found, with no cap short of the
        whole graph, and no sort of the whole partition (which the planner prefers without statistics).
        A search `within` anything is exact: its conditions narrow the scan, and its recall stays 1.0."""
        vector, owner = np.asarray(query, dtype=np.float32), int(owner_id)
        conditions, values = _conditions(within)
        if conditions or self.hnsw_threshold is None or self._count(conn, owner_id) < self.hnsw_threshold:
            return _EXACT.format(conditions), [vector, owner, *values, int(k)]
        total = int(conn.execute("SELECT value FROM meta WHERE key = 'note_total'").fetchone()[0])
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', "
                     "'strict_order', true), set_config('hnsw.max_scan_tuples', %s, true), "
                     "set_config('enable_sort', 'off', true)", [str(min(max(self.ef_search, k), 1000)),
                                                                 str(max(total, 20_000))])
        return _APPROXIMATE, [vector, owner, vector, int(k)]

    def size(self, owner_id: int) -> int:
        """Number of notes of one owner."""
        with self.store.transaction([owner_id]) as conn:
            return self._count(conn, owner_id)

    @staticmethod
    def _count(conn: psycopg.Connection, owner_id: int) -> int:
        return conn.execute("SELECT count(*) FROM notes WHERE owner_id = %s", [int(owner_id)]).fetchone()[0]

    # The database is the index: the engine's writes need no patching, a forget no file wiping.
    def added(self, owner_id: int, note_ids: list[int], vectors: np.ndarray, generation: int) -> None:
        """Nothing to do: the insert was the index update."""

    def updated(self, owner_id: int, note_id: int, vector: np.ndarray, generation: int) -> None:
        """Nothing to do: the update was the index update."""

    def deleted(self, owner_id: int, note_id: int, generation: int) -> None:
        """Nothing to do: the delete was the index update."""

    def drop(self, owner_id: int) -> None:
        """Nothing to do: this process keeps nothing of anyone."""

    def flush(self) -> None:
        """Nothing to write."""

    def cached_owners(self) -> list[int]:
        """Owners whose vectors this process holds: none."""
        return []


def _conditions(within: Within | None) -> tuple[str, list[Any]]:
    """The SQL (" AND ...", empty when `within` allows every note) and %s parameters that keep an owner's rows
    to those `within` allows: matching its filter, none of `excluded`, and only `only` when it is given."""
    if within is None:
        return "", []
    sql, args = "", []
    if within.where is not None:
        expression, values = compile_filter(within.where, "postgres")
        sql, args = f" AND ({expression})", [*values]
    if within.excluded:
        sql += " AND NOT (id = ANY (%s))"
        args.append(sorted(int(i) for i in within.excluded))
    if within.only is not None:
        sql += " AND id = ANY (%s)"
        args.append(sorted(int(i) for i in within.only))
    return sql, args
