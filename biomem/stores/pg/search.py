"""Semantic search inside PostgreSQL: one owner's notes ranked by pgvector, no local index.

Every partition is scanned exactly by default (the owner's rows through the btree on owner_id, then sorted
by inner product: the SQLite engine's exact top-K, ties oldest first). Given an `hnsw_threshold`, a
partition of at least that many notes gets an HNSW graph of its own, a partial pgvector index on the
owner's rows (biomem.stores.pg.graphs), and a search of that owner walks it: its cost follows the owner's
notes, not the table's. The one graph over every owner that came before visited everyone's notes to find
one owner's, and found 0.06 of the top 10 at 1M notes (benchmarks/pg_retrieval.py measures both).

The statement names the owner as a literal, an int produced here: PostgreSQL uses a partial index only
when it can prove the query's WHERE implies the index's, which a parameter in a generic plan never does.
The conditions of a search `within` a filter, hidden notes or an audience (biomem.stores.base.Within) are
in the same WHERE clause, so they apply before the top K, and pgvector's iterative scan keeps walking
(in strict order) until K rows pass them. Wherever the graph returns fewer than K (a filter it ran out of
budget for, a node it cannot reach), the search is run again as the exact scan; an audience smaller than
the threshold is scanned exactly from the start. Both run under row-level security for that owner alone,
so replicas share the database and hold nothing of their own to go stale.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg

from ..filter_sql import compile_filter
from .graphs import OwnerGraphs, index_name

if TYPE_CHECKING:
    from ..base import Within
    from .connections import Connections

EF_SEARCH = 200  # hnsw.ef_search of a walk through a graph of EF_NOTES notes (benchmarks/pg_retrieval.py)
EF_NOTES = 20_000  # ... and it grows with the square root of the graph's size, within [max(k, 40), 1000]

# Parameters, positional (a compiled filter's are): the query vector, the owner, those of {} (more
# conditions on the owner's rows), k.
_EXACT = """
WITH mine AS MATERIALIZED (
    SELECT id, timestamp, -(embedding <#> %s) AS score FROM notes WHERE owner_id = %s{})
SELECT id, score FROM mine ORDER BY score DESC, timestamp, id LIMIT %s
"""
# The owner (an int, formatted in: the partial index's predicate must be provable), then parameters: the
# query vector, those of {conditions}, the query vector again, k.
_GRAPH = """
SELECT id, score FROM (
    SELECT id, timestamp, -(embedding <#> %s) AS score FROM notes
    WHERE owner_id = {owner}{conditions} ORDER BY embedding <#> %s LIMIT %s) found
ORDER BY score DESC, timestamp, id
"""
# One round trip: admit the owner (row-level security, as PostgresStore.transaction does) and read the size of
# their graph if they have one (NULL otherwise): pg_class's estimate, from its build or the last vacuum. The
# lookup by oid costs tens of microseconds; pg_index's validity is left to the planner, which never walks an
# index still being built (the walk's statement then sorts the partition: the exact answer, by another plan).
_ADMIT_AND_GRAPH = """
SELECT set_config('biomem.admitted', %s, true), (SELECT reltuples FROM pg_class WHERE oid = (SELECT to_regclass(%s)))
"""
# The graph walk's settings, for this transaction: the candidate list, iterative scan in strict order
# until k rows pass the conditions, and no sort of the partition (the planner's choice without statistics)
_WALK = ("SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'strict_order', true), "
         "set_config('enable_sort', 'off', true)")


class DatabaseSearch:
    """biomem.stores.SearchIndex over a PostgresStore's connections: every search is one query in the database (two
    when a graph returned fewer than k notes).

    hnsw_threshold: partitions of at least this many notes get a graph of their own and walk it (None: never;
        a graph another process built for a smaller partition is not walked here either).
    ef_search: pgvector's candidate list while walking one; None (default): EF_SEARCH at EF_NOTES notes,
        growing with the square root of the graph's size, as recall@10 needs (benchmarks/pg_retrieval.py).
    """

    def __init__(self, connections: Connections, *, hnsw_threshold: int | None = None,
                 ef_search: int | None = None) -> None:
        self.connections = connections
        self.hnsw_threshold = hnsw_threshold
        self.ef_search = ef_search
        self.graphs = None if hnsw_threshold is None else OwnerGraphs(connections, hnsw_threshold)
        if self.graphs is not None:
            connections.on_close(self.graphs.stop)

    def search(self, owner_id: int, query: np.ndarray, k: int,
               within: Within | None = None) -> list[tuple[int, float]]:
        """Top-k (note id, cosine) among the owner's notes, best first, ties oldest first; with `within`,
        among the notes it allows only (K of them when K qualify)."""
        with self.connections.transaction() as conn:
            sql, args, graph = self._query(conn, owner_id, query, k, within)
            rows = conn.execute(sql, args).fetchall()
            if graph and len(rows) < k:  # the graph could not vouch for k: the exact scan can
                conn.execute("SELECT set_config('enable_sort', 'on', true)")
                sql, args = self._exact(owner_id, query, k, within)
                rows = conn.execute(sql, args).fetchall()
            return [(int(i), float(s)) for i, s in rows]

    def explain(self, owner_id: int, query: np.ndarray, k: int, within: Within | None = None) -> str:
        """The plan PostgreSQL runs for search(owner_id, query, k, within), as EXPLAIN prints it."""
        with self.connections.transaction() as conn:
            sql, args, _ = self._query(conn, owner_id, query, k, within)
            return "\n".join(row[0] for row in conn.execute("EXPLAIN " + sql, args))

    def _query(self, conn: psycopg.Connection, owner_id: int, query: np.ndarray, k: int,
               within: Within | None = None) -> tuple[str, list, bool]:
        """Admit the owner, then (statement, parameters, whether it walks the owner's graph): the graph
        when the owner has one of at least the threshold's size and `within` is no audience smaller than the
        threshold, with this transaction's walk settings; else the exact scan."""
        owner = int(owner_id)
        if self.graphs is None:
            self.connections.admit(conn, [owner])
            return *self._exact(owner, query, k, within), False
        size = conn.execute(_ADMIT_AND_GRAPH, [f"{{{owner}}}", f"biomem.{index_name(owner)}"]).fetchone()[1]
        if size is None or size < self.graphs.threshold or (within is not None and within.only is not None
                                                            and len(within.only) < self.graphs.threshold):
            return *self._exact(owner, query, k, within), False
        conn.execute(_WALK, [str(self.ef_for(size, k))])
        conditions, values = _conditions(within)
        vector = np.asarray(query, dtype=np.float32)
        return _GRAPH.format(owner=owner, conditions=conditions), [vector, *values, vector, int(k)], True

    def ef_for(self, size: float, k: int) -> int:
        """hnsw.ef_search of a walk for the top k through a graph of `size` notes (graph_ef)."""
        return graph_ef(size, k, self.ef_search)

    @staticmethod
    def _exact(owner_id: int, query: np.ndarray, k: int, within: Within | None) -> tuple[str, list]:
        conditions, values = _conditions(within)
        return _EXACT.format(conditions), [np.asarray(query, dtype=np.float32), int(owner_id), *values, int(k)]

    def size(self, owner_id: int) -> int:
        """Number of notes of one owner."""
        with self.connections.transaction([owner_id]) as conn:
            return self._count(conn, owner_id)

    @staticmethod
    def _count(conn: psycopg.Connection, owner_id: int) -> int:
        return conn.execute("SELECT count(*) FROM notes WHERE owner_id = %s", [int(owner_id)]).fetchone()[0]

    # The database is the index: an insert, update or delete was the index update. What is left is whether
    # a partition crossed the threshold (a graph to build, in the background) or went (a graph to drop).
    def added(self, owner_id: int, note_ids: list[int], vectors: np.ndarray, generation: int) -> None:
        """A partition that reached the threshold gets its graph, built in the background."""
        if self.graphs is not None:
            self.graphs.check(owner_id, grew=True)

    def updated(self, owner_id: int, note_id: int, vector: np.ndarray, generation: int) -> None:
        """Nothing to do: the update was the index update."""

    def deleted(self, owner_id: int, note_id: int, generation: int) -> None:
        """A partition that fell under half the threshold loses its graph, in the background."""
        if self.graphs is not None:
            self.graphs.check(owner_id, grew=False)

    def drop(self, owner_id: int) -> None:
        """The owner was forgotten (or their notes changed): their graph, if any, is dropped once no other
        process is building one (at once, usually). This process keeps nothing of anyone."""
        if self.graphs is not None:
            self.graphs.forgotten(owner_id)

    def index_partitions(self, *, wait: bool = True) -> dict[int, str]:
        """Build every graph that is due and drop every one that is not, now (graphs.OwnerGraphs.settle_all);
        the operator's command after a bulk load, and the first open's. {} without a threshold."""
        return {} if self.graphs is None else self.graphs.settle_all(wait=wait)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the graphs being built or dropped in the background are done."""
        return True if self.graphs is None else self.graphs.wait(timeout)

    def flush(self) -> None:
        """Nothing to write."""

    def cached_owners(self) -> list[int]:
        """Owners whose vectors this process holds: none."""
        return []


def graph_ef(size: float, k: int, ef_search: int | None = None) -> int:
    """hnsw.ef_search of a walk for the top k through a graph of `size` notes: `ef_search` if given, else
    EF_SEARCH * sqrt(size / EF_NOTES); at least k (and 40), at most pgvector's 1000."""
    ef = ef_search if ef_search is not None else EF_SEARCH * math.sqrt(max(size, 0) / EF_NOTES)
    return int(min(max(round(ef), int(k), 40), 1000))


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
