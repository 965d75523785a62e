"""Per-owner HNSW graphs in PostgreSQL: one partial pgvector index for each large partition.

An owner whose partition holds at least `threshold` notes gets its own graph,

    CREATE INDEX CONCURRENTLY notes_hnsw_<owner> ON biomem.notes USING hnsw (embedding vector_ip_ops)
        WITH (m = 16, ef_construction = 128) WHERE owner_id = <owner>

so a search walks that owner's notes only, however large the table grows; everyone else's notes are
not in the graph (one graph over every note, filtered by owner, visited them all: see
biomem.stores.pg.search). The graph goes when its owner is forgotten, when the partition falls under
KEEP_FROM notes (half the floor: far under any threshold, so a partition at the threshold is not rebuilt
on every add and delete, and the same for every process whatever threshold it was opened with: one opened
to scan only never drops the graphs of the others), or when a build was interrupted (an invalid index);
the one global graph of earlier versions (`notes_hnsw`) goes too, as the per-owner graphs replace it.

Building and dropping are DDL: they need the tables' owner, so they run on the URL's own user
(PostgresStore.owner_connection), never as the row-level-security role, and only in a process whose URL
user owns `biomem.notes` (a replica logging in as the engine's role only uses the graphs others built).
Each is CONCURRENTLY, outside any transaction, so readers and writers are never blocked by a build; a
session advisory lock lets one process at a time settle graphs (PostgreSQL would serialise two concurrent
builds on one table anyway), and every decision is taken again under it from the partition's count and
the index's state in the catalog, so processes that race do the work once. The owner id in the statement
is an int this module produced, never caller text.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import psycopg

if TYPE_CHECKING:
    from .connections import Connections

log = logging.getLogger(__name__)

HNSW_THRESHOLD = 10_000  # PostgreSQL's default: where a graph was 4x faster than the scan (benchmarks/pg_retrieval.py)
GRAPH_FLOOR = 1_000  # a partition smaller than this is always scanned (store.search_index raises thresholds to it)
KEEP_FROM = GRAPH_FLOOR // 2  # a graph stays while its partition has at least this many notes
PREFIX = "notes_hnsw_"
LEGACY_GLOBAL = "notes_hnsw"  # the one graph over every owner that earlier versions built
M, EF_CONSTRUCTION = 16, 128  # pgvector's m; ef_construction twice its default (recall, benchmarks/pg_retrieval.py)
_LOCK_KEY = "hashtext('biomem owner graphs')"
_POLL_S = 0.5  # how often a session waiting for the graphs' lock tries again


def index_name(owner_id: int) -> str:
    """The name of an owner's graph (the owner id as an int: never caller text)."""
    return f"{PREFIX}{int(owner_id)}"


def graph_statement(owner_id: int, *, m: int = M, ef_construction: int = EF_CONSTRUCTION) -> str:
    """CREATE INDEX CONCURRENTLY of one owner's graph: a partial HNSW index on the owner's rows."""
    owner = int(owner_id)
    return (f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {index_name(owner)} ON biomem.notes USING hnsw "
            f"(embedding vector_ip_ops) WITH (m = {int(m)}, ef_construction = {int(ef_construction)}) "
            f"WHERE owner_id = {owner}")


# The graph's state (NULL: no index, false: an interrupted build, true: a graph to search) and the partition's
# size, counted up to %(keep)s rows when there is a graph (enough to tell whether it stays) and up to %(cap)s when
# there is none (enough to tell whether one is due): a bounded read, however large the partition.
STATE = """
SELECT valid, (SELECT count(*) FROM (SELECT FROM biomem.notes WHERE owner_id = %(owner)s
                                     LIMIT CASE WHEN valid THEN %(keep)s ELSE %(cap)s END) capped)
FROM (SELECT (SELECT indisvalid FROM pg_index WHERE indexrelid = (SELECT to_regclass(%(name)s))) AS valid) graph
"""


class OwnerGraphs:
    """The per-owner graphs of one store at one threshold: what to build or drop, now or in the background."""

    def __init__(self, connections: Connections, threshold: int, *, m: int = M,
                 ef_construction: int = EF_CONSTRUCTION) -> None:
        self.connections = connections
        self.threshold = int(threshold)
        self.keep_from = min(KEEP_FROM, self.threshold)
        self.m, self.ef_construction = int(m), int(ef_construction)
        self._queue: dict[int, None] = {}  # owners to settle, in order, once each
        self._cv = threading.Condition()
        self._worker: threading.Thread | None = None
        self._busy: psycopg.Connection | None = None  # the connection of a running build, to cancel it
        self._stopped = False
        self.built: dict[int, float] = {}  # owner -> seconds its last graph took, built by this process

    @property
    def may_build(self) -> bool:
        """Whether this process's URL user owns the notes table (DDL is the owner's)."""
        return self.connections.owns_notes and not self._stopped

    def needs(self, valid: bool | None, count: int) -> bool:
        """Whether a partition of `count` notes whose graph is `valid` (None: none) needs a build or a drop."""
        if valid is None:
            return count >= self.threshold
        return not valid or count < self.keep_from

    # ---- triggers from the engine's writes (cheap reads; the work goes to the background) ----
    def check(self, owner_id: int, *, grew: bool) -> None:
        """After an add (`grew`) or a delete in the owner's partition: settle it in the background if it
        crossed a bound (an add can only call for a build, a delete for a drop)."""
        if not self.may_build:
            return
        if self.connections.in_transaction:  # inside a caller's transaction: the
            self.schedule([owner_id])  # admitted owners are theirs; the worker reads the state itself
            return
        with self.connections.transaction([owner_id]) as conn:
            valid, count = conn.execute(STATE, self._state_args(owner_id, keep=0 if grew else self.keep_from,
                                                                cap=self.threshold if grew else 0)).fetchone()
        if not (grew and valid) and self.needs(valid, count):
            self.schedule([owner_id])

    def _state_args(self, owner_id: int, *, keep: int, cap: int) -> dict[str, object]:
        return {"name": f"biomem.{index_name(owner_id)}", "owner": int(owner_id), "keep": keep, "cap": cap}

    def forgotten(self, owner_id: int) -> None:
        """The owner's notes are gone (forget) or changed: drop their graph now if no build holds the lock,
        else as soon as it is released. Nothing to do when they had none."""
        with self.connections.reading() as conn:
            exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                                  [f"biomem.{index_name(owner_id)}"]).fetchone()[0]
        if not exists or not self.may_build:
            return
        if not self.connections.in_transaction:
            with self._locked(wait=False) as conn:
                if conn is not None:
                    self._settle(conn, int(owner_id))
                    return
        self.schedule([owner_id])

    # ---- settling ----
    def settle_all(self, *, wait: bool = True) -> dict[int, str]:
        """Build the graph of every partition of at least `threshold` notes that has none; drop those of
        partitions under KEEP_FROM notes (forgotten owners' among them), interrupted builds and the legacy
        global graph. Returns owner -> "built" / "dropped" / "kept" / "none". With wait=False it does not
        wait for another process that is settling graphs: the work goes to the background instead ({})."""
        if not self.may_build:
            return {}
        if self.connections.in_transaction:  # a build waits for every open transaction
            wait = False
        with self._locked(wait=wait) as conn:
            if conn is None:
                self.schedule(self._candidates())
                return {}
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", [f"biomem.{LEGACY_GLOBAL}"]).fetchone()[0]:
                log.info("dropping the global HNSW index %s: per-owner graphs replace it", LEGACY_GLOBAL)
                conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS biomem.{LEGACY_GLOBAL}")
            return {owner: self._settle(conn, owner) for owner in self._candidates(conn)}

    def _candidates(self, conn: psycopg.Connection | None = None) -> list[int]:
        """Owners with enough notes for a graph, and owners with a graph (valid or not)."""
        query = (f"SELECT owner_id FROM biomem.notes GROUP BY owner_id HAVING count(*) >= %s UNION "
                 f"SELECT substr(c.relname, {len(PREFIX) + 1})::bigint FROM pg_index i JOIN pg_class c ON "
                 f"c.oid = i.indexrelid WHERE i.indrelid = 'biomem.notes'::regclass AND c.relname ~ '^{PREFIX}[0-9]+$' "
                 f"ORDER BY 1")
        if conn is not None:
            return [int(r[0]) for r in conn.execute(query, [self.threshold])]
        with self.connections.owner_connection() as own:
            return [int(r[0]) for r in own.execute(query, [self.threshold])]

    def _settle(self, conn: psycopg.Connection, owner: int) -> str:
        """Bring one owner's graph in line with their partition; the caller holds the lock."""
        name = index_name(owner)
        valid, count = conn.execute(STATE, self._state_args(owner, keep=self.keep_from, cap=self.threshold)).fetchone()
        if valid is not None and not self.needs(valid, count):
            return "kept"
        if valid is not None:  # an interrupted build, or a partition that shrank or went
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS biomem.{name}")
            log.info("dropped the HNSW graph of owner %d (%d notes%s)", owner, count,
                     "" if valid else ", an interrupted build")
        if count < self.threshold:
            return "dropped" if valid is not None else "none"
        started = time.perf_counter()
        notes = int(conn.execute("SELECT count(*) FROM biomem.notes WHERE owner_id = %s", [owner]).fetchone()[0])
        # the whole graph in memory (about 2 KB a 384-d note; 4 KB allowed), at most 1 GB
        conn.execute(f"SET maintenance_work_mem = '{min(1024, max(64, -(-notes * 4 // 1024)))}MB'")
        self._busy = conn
        try:
            conn.execute(graph_statement(owner, m=self.m, ef_construction=self.ef_construction))
        finally:
            self._busy = None
        self.built[owner] = time.perf_counter() - started
        log.info("built the HNSW graph of owner %d (%d notes) in %.1f s", owner, notes, self.built[owner])
        return "built"

    @contextmanager
    def _locked(self, *, wait: bool) -> Iterator[psycopg.Connection | None]:
        """An autocommit connection as the tables' owner holding the graphs' advisory lock (None when
        wait=False and another session holds it). Waiting polls: a session blocked in pg_advisory_lock
        is a transaction that the holder's CREATE INDEX CONCURRENTLY would wait for (a deadlock)."""
        with self.connections.autocommit() as conn:
            while not conn.execute(f"SELECT pg_try_advisory_lock({_LOCK_KEY})").fetchone()[0]:
                if not wait or self._stopped:
                    yield None
                    return
                time.sleep(_POLL_S)
            try:
                yield conn
            finally:
                if not conn.closed and not conn.broken:
                    conn.execute(f"SELECT pg_advisory_unlock({_LOCK_KEY})")

    # ---- the background worker ----
    def schedule(self, owners: Iterable[int]) -> None:
        """Settle these owners' graphs on a background thread (started when needed, gone when idle)."""
        with self._cv:
            if self._stopped:
                return
            for owner in owners:
                self._queue[int(owner)] = None
            if self._queue and self._worker is None:
                self._worker = threading.Thread(target=self._run, name="biomem-owner-graphs", daemon=True)
                self._worker.start()

    def _run(self) -> None:
        while True:
            with self._cv:
                if self._stopped or not self._queue:
                    self._worker = None
                    self._cv.notify_all()
                    return
            try:
                with self._locked(wait=True) as conn:
                    while conn is not None:
                        with self._cv:
                            if self._stopped or not self._queue:
                                break
                            owner = next(iter(self._queue))
                            del self._queue[owner]
                        self._settle(conn, owner)
            except Exception as exc:  # a cancelled build (close), a dropped database: the next write to a
                if not self._stopped:  # partition, or the next open, settles again
                    log.warning("settling per-owner HNSW graphs failed, left for later: %s", exc)
                with self._cv:
                    self._queue.clear()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the background worker has nothing left to do; False if `timeout` s passed first."""
        with self._cv:
            return self._cv.wait_for(lambda: self._worker is None, timeout)

    def stop(self) -> None:
        """Stop the background work: queued owners are left, a running build is cancelled (its invalid
        index is dropped and rebuilt by the next settle, in any process)."""
        with self._cv:
            self._stopped = True
            self._queue.clear()
            busy, worker = self._busy, self._worker
        if busy is not None:
            try:
                busy.cancel_safe()
            except psycopg.Error:
                pass
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout=10)
