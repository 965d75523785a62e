"""Semantic search inside PostgreSQL: one owner's notes ranked by pgvector, no local index.

Every partition is scanned exactly by default (the owner's rows through the btree on owner_id,
then sorted by inner product: the SQLite engine's exact top-K, ties oldest first). Given an
`hnsw_threshold`, a partition of at least that many notes walks pgvector's HNSW index over all
notes with iterative scan, keeping only the owner's rows, and re-ranks what it found: one graph
for every owner, so it pays off only for an owner holding much of the table (at 20,000 notes of
200,000 it was slower than the scan and found 0.375 of the top 10; benchmarks/retrieval.py).
Both run under row-level security for that owner alone, so replicas share the database and hold
nothing of their own to go stale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import psycopg

if TYPE_CHECKING:
    from .store import PostgresStore

_EXACT = """
WITH mine AS MATERIALIZED (
    SELECT id, timestamp, -(embedding <#> %(query)s) AS score FROM notes WHERE owner_id = %(owner)s)
SELECT id, score FROM mine ORDER BY score DESC, timestamp, id LIMIT %(k)s
"""
_APPROXIMATE = """
SELECT id, score FROM (
    SELECT id, timestamp, -(embedding <#> %(query)s) AS score FROM notes
    WHERE owner_id = %(owner)s ORDER BY embedding <#> %(query)s LIMIT %(k)s) found
ORDER BY score DESC, timestamp, id
"""


class DatabaseSearch:
    """biomem.stores.SearchIndex over a PostgresStore: every search is one query in the database."""

    def __init__(self, store: PostgresStore, *, hnsw_threshold: int | None = None, ef_search: int = 1000) -> None:
        self.store = store
        self.hnsw_threshold = hnsw_threshold
        self.ef_search = ef_search

    def search(self, owner_id: int, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Top-k (note id, cosine) among the owner's notes, best first, ties oldest first."""
        with self.store.transaction([owner_id]) as conn:
            sql, args = self._query(conn, owner_id, query, k)
            return [(int(i), float(s)) for i, s in conn.execute(sql, args)]

    def explain(self, owner_id: int, query: np.ndarray, k: int) -> str:
        """The plan PostgreSQL runs for search(owner_id, query, k), as EXPLAIN prints it."""
        with self.store.transaction([owner_id]) as conn:
            sql, args = self._query(conn, owner_id, query, k)
            return "\n".join(row[0] for row in conn.execute("EXPLAIN " + sql, args))

    def _query(self, conn: psycopg.Connection, owner_id: int, query: np.ndarray, k: int) -> tuple[str, dict]:
        """The search statement for this owner's partition size, with its transaction's HNSW settings:
        the widest candidate list pgvector allows (the graph holds every owner's notes, the owner's are a
        fraction of what it visits), iterative scan until k of them are found, with no cap short of the
        whole graph, and no sort of the whole partition (which the planner prefers without statistics)."""
        args = {"owner": int(owner_id), "query": np.asarray(query, dtype=np.float32), "k": int(k)}
        if self.hnsw_threshold is None or self._count(conn, owner_id) < self.hnsw_threshold:
            return _EXACT, args
        total = int(conn.execute("SELECT value FROM meta WHERE key = 'note_total'").fetchone()[0])
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', "
                     "'strict_order', true), set_config('hnsw.max_scan_tuples', %s, true), "
                     "set_config('enable_sort', 'off', true)", [str(min(max(self.ef_search, k), 1000)),
                                                                 str(max(total, 20_000))])
        return _APPROXIMATE, args

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
