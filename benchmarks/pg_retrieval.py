"""PostgreSQL search at scale: per-owner HNSW graphs against one graph over every owner and the exact scan.

    python -m benchmarks.pg_retrieval            # 100k and 1M notes
    python -m benchmarks.pg_retrieval --quick    # smoke run, a few minutes

Each rung (NOTES:OWNERS:LARGE, e.g. 100000:1000:2x20000+2x5000) gives the LARGE partitions their sizes and
spreads the other notes evenly over the other owners (about 50 each). Notes are text-like: unit vectors
from a Gaussian with the mean and covariance of real all-MiniLM-L6-v2 embeddings of the LoCoMo turns
(uniformly random 384-d vectors, `--vectors uniform`, are the one distribution where no graph beats a scan);
queries are real LoCoMo question embeddings, 80% to a large owner, 20% to a small one. A rung:

1. loads the notes by binary COPY (`bulk_load`, no index), then times adds (one note, one transaction);
2. builds one HNSW index over every note (`VECTOR_INDEX`, what search walked before per-owner graphs) and
   times `exact` (the scan) and `global` (that graph, with the statements of that version: the count,
   the owner as a parameter, ef_search 1000, iterative scan) interleaved, one query at a time;
3. drops it, builds the per-owner graphs through the store's own code (`DatabaseSearch.index_partitions`:
   CREATE INDEX CONCURRENTLY, one partial index per partition of at least the smallest LARGE size) and
   times `exact` against `owner` at several ef_search, interleaved;
4. optionally, on the rungs of --partitioned: the same graphs as list partitions by owner (a table per
   large owner, a default partition for the rest), built and searched as the tables' owner beside the
   partial indexes, and what moving an owner out of the default partition costs; and --many-graphs N empty
   partial indexes more, to see what each costs a write and a plan.

Recall@10 is against the exact top 10 computed in numpy. Timings are `DatabaseSearch.search` (one
transaction: admit the owner, read their graph's state, walk or scan), not the gate. JSON:
benchmarks/results/pg_retrieval.json.

The server, the bulk load and the two-process test retrieval.py shares with this benchmark are in
benchmarks/pg_server.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from benchmarks.common import LOCOMO, RESULTS, command, log, percentiles, write_result
from benchmarks.corpus import BIO_DIM, MODALITY, TEXT_DIM, K
from benchmarks.machine import machine_info
from benchmarks.pg_server import Server, bulk_load, index_build_settings
from biomem.stores.pg import PostgresStore
from biomem.stores.pg.graphs import EF_CONSTRUCTION, M, index_name
from biomem.stores.pg.search import EF_NOTES, EF_SEARCH, DatabaseSearch, graph_ef
from biomem.stores.pg.store import VECTOR_INDEX
from biomem.stores.records import now_iso

# ---- per-owner graphs against one graph and the exact scan --------------------------------------

LADDER = "100000:1000:2x20000+2x5000,1000000:10000:2x100000+4x50000+4x20000+4x5000"
QUICK_LADDER = "20000:100:2x5000"
EF_SEARCHES = (100, 200, 400, 800)  # fixed candidate lists timed beside DatabaseSearch's own (ef_for)
LARGE_SHARE = 0.8  # of the queries, to a large owner (the rest to a small one)
TARGET_OWNER_RECALL = 0.95  # target: per-owner HNSW recall@10 against exact


class TextLike:
    """Vectors shaped like all-MiniLM-L6-v2's: notes from a Gaussian with the mean and covariance of the
    embedded LoCoMo turns (a participation ratio of about 66 dimensions of 384, where uniform vectors have
    384), queries the embedded LoCoMo questions themselves. The embeddings are cached in `cache`."""

    def __init__(self, cache: Path) -> None:
        if cache.exists():
            saved = np.load(cache)
            turns, self.questions = saved["turns"], saved["questions"]
        else:
            from biomem.notes.textenc import TextEncoder

            data = json.loads(LOCOMO.read_text())
            texts = [f"{t['speaker']}: {t['text']}" for c in data for key, session in c["conversation"].items()
                     if key.startswith("session_") and isinstance(session, list) for t in session]
            questions = [q["question"] for c in data for q in c["qa"]]
            log(f"embedding {len(texts):,} LoCoMo turns and {len(questions):,} questions (cached in {cache})")
            encoder = TextEncoder()
            turns, self.questions = encoder.encode(texts), encoder.encode(questions)
            np.savez(cache, turns=turns, questions=self.questions)
        self.mean = turns.mean(axis=0)
        self.root = np.linalg.cholesky(np.cov(turns.T) + 1e-6 * np.eye(turns.shape[1]))
        spectrum = np.linalg.eigvalsh(np.cov(turns.T))
        self.participation = float(spectrum.sum() ** 2 / (spectrum ** 2).sum())
        self.turns = len(turns)

    def notes(self, rng: np.random.Generator, n: int) -> np.ndarray:
        out = np.empty((n, TEXT_DIM), dtype=np.float32)
        for start in range(0, n, 100_000):
            rows = min(100_000, n - start)
            x = self.mean + rng.standard_normal((rows, TEXT_DIM)) @ self.root.T
            out[start:start + rows] = x / np.linalg.norm(x, axis=1, keepdims=True)
        return out

    def queries(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.questions[rng.choice(len(self.questions), n, replace=n > len(self.questions))].astype(np.float32)


class Uniform:
    """Uniformly random unit vectors (retrieval.py's notes and queries): the worst case for any graph."""

    participation = float(TEXT_DIM)

    def notes(self, rng: np.random.Generator, n: int) -> np.ndarray:
        out = rng.standard_normal((n, TEXT_DIM), dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    queries = notes


class SkewedNotes:
    """`n_notes` over `n_owners`: the `large` partitions first, the rest spread evenly over the other owners;
    what bulk_load takes (templates, embeddings, counts, notes_for, owner_slice)."""

    def __init__(self, n_notes: int, n_owners: int, large: list[int], vectors: Any, seed: int) -> None:
        rng = np.random.default_rng(seed)
        small, rest = n_owners - len(large), n_notes - sum(large)
        if small <= 0 or rest < small:
            raise SystemExit(f"{n_notes}:{n_owners} leaves no notes for the small owners beside {large}")
        self.counts = np.array(large + [rest // small + (i < rest % small) for i in range(small)], dtype=np.int64)
        self.n_notes, self.n_ids, self.large = n_notes, n_owners, len(large)
        self.starts = np.r_[0, np.cumsum(self.counts)[:-1]]
        templates = rng.standard_normal((n_owners, BIO_DIM), dtype=np.float32)
        self.templates = templates / np.linalg.norm(templates, axis=1, keepdims=True)
        self.embeddings = vectors.notes(rng, n_notes)
        start = datetime(2023, 1, 1)
        self.stamps = [(start + timedelta(minutes=k)).isoformat() for k in range(int(self.counts.max()))]

    def notes_for(self, j: int) -> list[dict[str, Any]]:
        return [{"content": f"Synthetic memory {k} of person {j}: benchmark filler text.",
                 "timestamp": self.stamps[k], "keywords": ["synthetic", "benchmark", "memory"],
                 "tags": ["test", "filler", "note"], "context": "A synthetic note for the retrieval benchmark."}
                for k in range(int(self.counts[j]))]

    def owner_slice(self, j: int) -> slice:
        return slice(int(self.starts[j]), int(self.starts[j] + self.counts[j]))

    def exact_top(self, j: int, query: np.ndarray, k: int) -> list[int]:
        """Note ids (row + 1, as bulk_load gives them) of the owner's exact top k, ties oldest first."""
        rows = self.owner_slice(j)
        top = np.argsort(-(self.embeddings[rows] @ query), kind="stable")[:k]
        return (top + rows.start + 1).tolist()

    def size_class(self, j: int) -> str:
        return f"{int(self.counts[j]):,}" if j < self.large else "small"


class GlobalGraph(DatabaseSearch):
    """Search as it was before per-owner graphs: every search counts the owner's notes, and a partition of at
    least `threshold` walks the one HNSW index over every note (VECTOR_INDEX) with the owner as a parameter,
    an ef_search of 1000, iterative scan in strict order up to every note, no sort; no exact fallback."""

    APPROXIMATE = """
SELECT id, score FROM (
    SELECT id, timestamp, -(embedding <#> %s) AS score FROM notes
    WHERE owner_id = %s ORDER BY embedding <#> %s LIMIT %s) found
ORDER BY score DESC, timestamp, id
"""

    def __init__(self, store: PostgresStore, threshold: int) -> None:
        super().__init__(store.connections)
        self.threshold = threshold

    def _query(self, conn: psycopg.Connection, owner_id: int, query: np.ndarray, k: int,
               within: Any = None) -> tuple[str, list, bool]:
        owner, vector = int(owner_id), np.asarray(query, dtype=np.float32)
        self.connections.admit(conn, [owner])
        if self._count(conn, owner) < self.threshold:
            return *self._exact(owner, vector, k, within), False
        total = int(conn.execute("SELECT value FROM meta WHERE key = 'note_total'").fetchone()[0])
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', "
                     "'strict_order', true), set_config('hnsw.max_scan_tuples', %s, true), "
                     "set_config('enable_sort', 'off', true)", [str(min(max(1000, k), 1000)), str(max(total, 20_000))])
        return self.APPROXIMATE, [vector, owner, vector, int(k)], False


def query_plan(data: SkewedNotes, vectors: Any, n: int, seed: int) -> list[tuple[int, np.ndarray]]:
    """(owner index, query vector) pairs: LARGE_SHARE of them cycling over the large owners, the rest to
    random small owners."""
    rng = np.random.default_rng(seed + 1)
    queries = vectors.queries(rng, n)
    owners = [i % data.large if rng.random() < LARGE_SHARE else int(rng.integers(data.large, data.n_ids))
              for i in range(n)]
    return list(zip(owners, queries))


def interleaved(modes: dict[str, DatabaseSearch], plan: list[tuple[int, np.ndarray]], owner_ids: np.ndarray,
                data: SkewedNotes, truth: list[list[int]]) -> dict[str, dict[str, Any]]:
    """Every query through every mode, one at a time in rotating order; latency and recall@10 per mode and
    partition size."""
    names = list(modes)
    for j, q in plan[:5]:  # warm-up: connections, plans, pages
        for name in names:
            modes[name].search(int(owner_ids[j]), q, K)
    samples: dict[str, dict[str, list[tuple[float, float, int]]]] = {name: {} for name in names}
    for i, (j, q) in enumerate(plan):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.perf_counter_ns()
            hits = modes[name].search(int(owner_ids[j]), q, K)
            ms = (time.perf_counter_ns() - t0) / 1e6
            recall = len({h for h, _ in hits} & set(truth[i])) / K
            samples[name].setdefault(data.size_class(j), []).append((ms, recall, len(hits)))
    out: dict[str, dict[str, Any]] = {}
    for name, by_class in samples.items():
        out[name] = {}
        for size, rows in sorted(by_class.items(), key=lambda kv: _size_order(kv[0])):
            ms, recalls, found = zip(*rows)
            out[name][size] = {**percentiles(list(ms)), "recall_at_10": float(np.mean(recalls)),
                               "recall_min": float(np.min(recalls)), "short_answers": int(sum(f < K for f in found))}
    return out


def _size_order(size: str) -> tuple[bool, int]:
    """Large partitions first, the largest first, then the small ones."""
    return size == "small", 0 if size == "small" else -int(size.replace(",", ""))


def plan_index(search: DatabaseSearch, owner: int, q: np.ndarray) -> str | None:
    """The index the search's plan walks for this owner, None for a scan."""
    found = re.search(r"Index Scan using (notes_hnsw\w*)", search.explain(owner, q, K))
    return found.group(1) if found else None


def timed_adds(store: PostgresStore, data: SkewedNotes, owner_ids: np.ndarray, vectors: Any, n: int,
               seed: int) -> dict[str, Any]:
    """One note added (insert_notes: the note, its history row, the generation) to a random small owner and
    to a large one, n times each, then deleted again: what every index on notes costs a write."""
    rng = np.random.default_rng(seed + 2)
    out = {}
    for label, pick in (("small", lambda: int(rng.integers(data.large, data.n_ids))),
                        ("large", lambda: int(rng.integers(0, data.large)))):
        times, added = [], []
        for vector in vectors.notes(rng, n):
            owner = int(owner_ids[pick()])
            note = {"content": "A note added during the benchmark.", "timestamp": now_iso(), "keywords": [],
                    "tags": [], "context": ""}
            t0 = time.perf_counter_ns()
            (note_id,), _ = store.insert_notes(owner, [note], vector[None, :])
            times.append((time.perf_counter_ns() - t0) / 1e6)
            added.append((owner, note_id))
        for owner, note_id in added:
            store.delete_note(owner, note_id)
        out[label] = percentiles(times)
    return out


def graph_sizes_mb(url: str) -> dict[str, float]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i JOIN pg_class c "
                            "ON c.oid = i.indexrelid WHERE i.indrelid = 'biomem.notes'::regclass "
                            "AND c.relname LIKE 'notes_hnsw%'").fetchall()
    return {name: size / 1e6 for name, size in rows}


def partitioned(url: str, data: SkewedNotes, owner_ids: np.ndarray, plan: list[tuple[int, np.ndarray]],
                truth: list[list[int]], ef: int) -> dict[str, Any]:
    """The alternative to partial indexes: notes list-partitioned by owner, a partition (and its HNSW index)
    per large owner but the last, the rest in a default partition, as the tables' owner (no row-level
    security on either side). Times the copy, each partition's graph build, moving the last large owner out
    of the default partition (copy, delete, ATTACH: which holds an ACCESS EXCLUSIVE lock on the default
    partition, every small owner's notes, while it checks them), then large owners' searches against the same
    statement on the partial indexes."""
    out: dict[str, Any] = {}
    large = [int(o) for o in owner_ids[:data.large]]
    stay, mover = large[:-1], large[-1]
    with psycopg.connect(url, autocommit=True) as conn:
        from pgvector.psycopg import register_vector
        register_vector(conn)
        conn.execute("SET search_path = biomem, public")
        conn.execute("DROP TABLE IF EXISTS listed")
        conn.execute(f"CREATE TABLE listed (id bigint NOT NULL, owner_id bigint NOT NULL, timestamp text NOT NULL, "
                     f"embedding vector({TEXT_DIM}) NOT NULL, PRIMARY KEY (owner_id, id)) PARTITION BY LIST (owner_id)")
        conn.execute("CREATE TABLE listed_rest PARTITION OF listed DEFAULT")
        for owner in stay:
            conn.execute(f"CREATE TABLE listed_{owner} PARTITION OF listed FOR VALUES IN ({owner})")
        t0 = time.perf_counter()
        conn.execute("INSERT INTO listed SELECT id, owner_id, timestamp, embedding FROM notes")
        conn.execute("VACUUM ANALYZE listed")
        out["copy_s"] = time.perf_counter() - t0
        conn.execute("SET maintenance_work_mem = '1GB'")
        out["graph_build_s"] = {}
        for owner in stay:
            t0 = time.perf_counter()
            conn.execute(f"CREATE INDEX ON listed_{owner} USING hnsw (embedding vector_ip_ops) "
                         f"WITH (m = {M}, ef_construction = {EF_CONSTRUCTION})")
            out["graph_build_s"][str(owner)] = time.perf_counter() - t0
        steps = {}
        t0 = time.perf_counter()
        conn.execute(f"CREATE TABLE listed_{mover} (LIKE listed INCLUDING ALL)")
        conn.execute(f"INSERT INTO listed_{mover} SELECT * FROM listed_rest WHERE owner_id = {mover}")
        steps["copy_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        conn.execute(f"DELETE FROM listed_rest WHERE owner_id = {mover}")
        steps["delete_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        conn.execute(f"ALTER TABLE listed ATTACH PARTITION listed_{mover} FOR VALUES IN ({mover})")
        steps["attach_s (default partition locked)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        conn.execute(f"CREATE INDEX ON listed_{mover} USING hnsw (embedding vector_ip_ops) "
                     f"WITH (m = {M}, ef_construction = {EF_CONSTRUCTION})")
        steps["graph_build_s"] = time.perf_counter() - t0
        out["move_one_owner"] = {"owner_notes": int(data.counts[data.large - 1]), **steps}
        out["default_partition_rows"] = conn.execute("SELECT count(*) FROM listed_rest").fetchone()[0]

        conn.execute(f"SET hnsw.ef_search = {ef}")
        conn.execute("SET hnsw.iterative_scan = strict_order")
        conn.execute("SET enable_sort = off")
        top = "SELECT id FROM {table} WHERE owner_id = {{o}} ORDER BY embedding <#> %s LIMIT 10"
        statements = {"list_partitions": top.format(table="listed"), "partial_indexes": top.format(table="notes")}
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in statements}
        plans = {name: "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql.format(o=large[0]), [plan[0][1]]))
                 for name, sql in statements.items()}
        for i, (j, q) in enumerate(plan):
            if j >= data.large:
                continue
            for name in list(statements)[i % 2:] + list(statements)[:i % 2]:
                t0 = time.perf_counter_ns()
                ids = [r[0] for r in conn.execute(statements[name].format(o=int(owner_ids[j])), [q])]
                samples[name].append(((time.perf_counter_ns() - t0) / 1e6, len(set(ids) & set(truth[i])) / K))
        out["search_large_owners"] = {name: {**percentiles([ms for ms, _ in rows]),
                                             "recall_at_10": float(np.mean([r for _, r in rows]))}
                                      for name, rows in samples.items()}
        out["plans_use"] = {name: re.findall(r"Index Scan using (\w+)", text) for name, text in plans.items()}
        out["ef_search"] = ef
        conn.execute("DROP TABLE listed")
    return out


def many_graphs(url: str, store: PostgresStore, data: SkewedNotes, owner_ids: np.ndarray, vectors: Any,
                plan: list[tuple[int, np.ndarray]], n: int, adds: int, seed: int) -> dict[str, Any]:
    """What each partial index costs everyone: `n` more (empty: owners that do not exist) beside the real
    ones, then adds and small owners' exact searches again, with the planning time of the latter."""
    exact = DatabaseSearch(store.connections)
    small = [(j, q) for j, q in plan if j >= data.large][:100]

    def measure() -> dict[str, Any]:
        times, planning = [], []
        for j, q in small:
            t0 = time.perf_counter_ns()
            exact.search(int(owner_ids[j]), q, K)
            times.append((time.perf_counter_ns() - t0) / 1e6)
        with store.transaction([int(owner_ids[small[0][0]])]) as conn:
            sql, args = exact._exact(int(owner_ids[small[0][0]]), small[0][1], K, None)
            for _ in range(20):
                text = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, SUMMARY) " + sql, args))
                planning.append(float(re.search(r"Planning Time: ([\d.]+) ms", text).group(1)))
        return {"adds": timed_adds(store, data, owner_ids, vectors, adds, seed),
                "small_owner_search": percentiles(times), "planning_ms_p50": float(np.median(planning))}

    before = measure()
    t0 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(n):
            conn.execute(f"CREATE INDEX extra_hnsw_{i} ON biomem.notes USING hnsw (embedding vector_ip_ops) "
                         f"WHERE owner_id = {-(i + 1)}")
    created_s = time.perf_counter() - t0
    after = measure()
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(n):
            conn.execute(f"DROP INDEX biomem.extra_hnsw_{i}")
    return {"extra_graphs": n, "create_s": created_s, "before": before, "after": after}


def run_rung(server: Server, n_notes: int, n_owners: int, large: list[int], *, vectors: Any, queries: int,
             seed: int, adds: int, skip_global: bool, partition: bool, extra_graphs: int) -> dict[str, Any]:
    name = f"graphs_{n_notes}_{n_owners}"
    log(f"rung {n_notes:,} notes / {n_owners:,} owners, large partitions {large}: drawing the notes")
    data = SkewedNotes(n_notes, n_owners, large, vectors, seed)
    plan = query_plan(data, vectors, queries, seed)
    truth = [data.exact_top(j, q, K) for j, q in plan]
    url = server.database(name)
    load = bulk_load(url, data, dim=TEXT_DIM, modality=MODALITY, global_graph=False)
    owner_ids = load["owner_ids"]
    log(f"  loaded in {load['build_s']:.1f} s (identities {load['identities_s']:.1f} s, COPY {load['copy_s']:.1f} s, "
        f"VACUUM ANALYZE {load['vacuum_analyze_s']:.1f} s)")
    store = PostgresStore(url)
    threshold = min(large)
    result: dict[str, Any] = {
        "notes": n_notes, "owners": n_owners, "large_partitions": large, "small_partition_notes":
            int(np.median(data.counts[data.large:])), "queries": queries, "large_share": LARGE_SHARE,
        "hnsw_threshold": threshold, "load_average_1m_start": os.getloadavg()[0],
        "load": {k: v for k, v in load.items() if k not in ("owner_ids", "note_ids")}, "adds": {}}
    result["adds"]["no_graph"] = timed_adds(store, data, owner_ids, vectors, adds, seed)
    exact = DatabaseSearch(store.connections)

    if not skip_global:
        t0 = time.perf_counter()
        with store.owner_connection() as conn:
            for setting, value in index_build_settings(n_notes).items():
                conn.execute(f"SET {setting} = '{value}'")
            conn.execute(VECTOR_INDEX)
        result["global_graph_build_s"] = time.perf_counter() - t0
        result["global_graph_mb"] = graph_sizes_mb(url).get("notes_hnsw", 0.0)
        log(f"  one graph over every note built in {result['global_graph_build_s']:.1f} s "
            f"({result['global_graph_mb']:.0f} MB)")
        result["adds"]["global_graph"] = timed_adds(store, data, owner_ids, vectors, adds, seed)
        both = {"exact": exact, "global": GlobalGraph(store, threshold)}
        result["plans_global_phase"] = {mode: plan_index(search, int(owner_ids[0]), plan[0][1])
                                        for mode, search in both.items()}
        if result["plans_global_phase"]["global"] != "notes_hnsw":
            raise RuntimeError(f"the global mode does not walk the global graph: {result['plans_global_phase']}")
        result["global_phase"] = interleaved(both, plan, owner_ids, data, truth)
        with store.owner_connection() as conn:
            conn.execute("DROP INDEX notes_hnsw")

    modes: dict[str, DatabaseSearch] = {"exact": exact,
                                        "owner": DatabaseSearch(store.connections, hnsw_threshold=threshold)}
    for ef in EF_SEARCHES:
        modes[f"owner_ef{ef}"] = DatabaseSearch(store.connections, hnsw_threshold=threshold, ef_search=ef)
    builder = modes["owner"]
    t0 = time.perf_counter()
    settled = builder.index_partitions()
    result["owner_graphs_build_s"] = time.perf_counter() - t0
    result["owner_graphs_built"] = {str(o): {"notes": int(data.counts[list(owner_ids).index(o)]), "build_s": s,
                                             "ef_search": builder.ef_for(int(data.counts[list(owner_ids).index(o)]), K)}
                                    for o, s in builder.graphs.built.items()}
    sizes = graph_sizes_mb(url)
    result["owner_graphs_mb"] = sum(sizes.values())
    if sorted(settled) != sorted(int(o) for o in owner_ids[:data.large]) or set(settled.values()) != {"built"}:
        raise RuntimeError(f"expected a graph per large owner, got {settled}")
    log(f"  {len(settled)} per-owner graphs built in {result['owner_graphs_build_s']:.1f} s "
        f"({result['owner_graphs_mb']:.0f} MB)")
    result["adds"]["owner_graphs"] = timed_adds(store, data, owner_ids, vectors, adds, seed)
    result["plans_owner_phase"] = {mode: plan_index(search, int(owner_ids[0]), plan[0][1])
                                   for mode, search in modes.items()}
    result["plans_owner_phase"]["small owner, owner"] = plan_index(modes["owner"], int(owner_ids[data.large]),
                                                                   plan[0][1])
    if any(used != index_name(owner_ids[0]) for mode, used in result["plans_owner_phase"].items()
           if mode.startswith("owner")):
        raise RuntimeError(f"a per-owner mode does not walk the owner's graph: {result['plans_owner_phase']}")
    result["owner_phase"] = interleaved(modes, plan, owner_ids, data, truth)
    if partition:
        log("  list partitions by owner, for comparison")
        result["list_partitioning"] = partitioned(url, data, owner_ids, plan, truth, 200)
    if extra_graphs:
        log(f"  {extra_graphs} more (empty) partial indexes: what each costs a write and a plan")
        result["many_graphs"] = many_graphs(url, store, data, owner_ids, vectors, plan, extra_graphs, adds, seed)
    result["database_mb"] = server.database_mb(name)
    store.close()
    server.drop(name)
    return result


def ms(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def seconds(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def fmt(entry: dict[str, Any] | None, recall: bool = False) -> str:
    if entry is None:
        return "–"
    text = f"{ms(entry['p50_ms'])} / {ms(entry['p95_ms'])} ms"
    return f"{text} ({entry['recall_at_10']:.3f})" if recall else text


def report(results: dict[str, Any]) -> str:
    """The two tables of docs/speed-postgresql.md: search per partition size, then loads, builds and adds."""
    lines = ["| notes / owners | partition | scan, beside the one graph | one graph over every note (recall@10) "
             "| scan, beside the own graphs | own graph, default ef_search (recall@10) "
             "| own graph recall@10 at ef_search " + " / ".join(str(ef) for ef in EF_SEARCHES) + " |",
             "|---|---|---|---|---|---|---|"]
    for r in results["rungs"]:
        owner_phase, global_phase = r["owner_phase"], r.get("global_phase", {})
        for size in owner_phase["exact"]:
            own = owner_phase["owner"][size]
            if size == "small":
                label, walked, fixed = f"~{r['small_partition_notes']} (no graph)", f"{fmt(own)} (scan)", "–"
            else:
                label = size
                walked = f"ef {graph_ef(int(size.replace(',', '')), K)}: {fmt(own, True)}"
                fixed = " / ".join(f"{owner_phase[f'owner_ef{ef}'][size]['recall_at_10']:.3f}" for ef in EF_SEARCHES)
            scan, one = global_phase.get("exact", {}).get(size), global_phase.get("global", {}).get(size)
            lines.append(f"| {r['notes']:,} / {r['owners']:,} | {label} | {fmt(scan)} | {fmt(one, True)} "
                         f"| {fmt(owner_phase['exact'][size])} | {walked} | {fixed} |")
    lines += ["", "| notes / owners | load: identities, COPY, VACUUM ANALYZE | one graph over every note: build, size "
              "| own graphs: build, size | add p50, small / large owner: no graph, one graph, own graphs |",
              "|---|---|---|---|---|"]
    for r in results["rungs"]:
        load, adds = r["load"], r["adds"]
        cells = [f"{ms(adds[state]['small']['p50_ms'])} / {ms(adds[state]['large']['p50_ms'])}"
                 if state in adds else "–" for state in ("no_graph", "global_graph", "owner_graphs")]
        builds: dict[int, list[float]] = {}
        for built in r["owner_graphs_built"].values():
            builds.setdefault(built["notes"], []).append(built["build_s"])
        each = "; ".join(f"{n:,}: {seconds(min(b))}–{seconds(max(b))} s"
                         for n, b in sorted(builds.items(), reverse=True))
        one = (f"{r['global_graph_build_s']:,.0f} s, {r['global_graph_mb']:,.0f} MB" if "global_graph_build_s" in r
               else "–")
        lines.append(f"| {r['notes']:,} / {r['owners']:,} | {load['build_s']:.0f} s ({load['identities_s']:.1f}, "
                     f"{load['copy_s']:.1f}, {load['vacuum_analyze_s']:.1f}) | {one} "
                     f"| {r['owner_graphs_build_s']:,.0f} s, {r['owner_graphs_mb']:,.0f} MB ({each}) "
                     f"| {', '.join(cells)} ms |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", default=LADDER, help="rungs NOTES:OWNERS:LARGE, LARGE as 2x20000+2x5000")
    parser.add_argument("--quick", action="store_true", help=f"the ladder {QUICK_LADDER}, 60 queries")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--adds", type=int, default=50, help="adds timed per owner kind and index state")
    parser.add_argument("--vectors", choices=("text", "uniform"), default="text")
    parser.add_argument("--skip-global", action="store_true", help="do not build nor time the global graph")
    parser.add_argument("--partitioned", default="100000", help="rungs (by notes) that also try list partitions")
    parser.add_argument("--many-graphs", type=int, default=200, help="extra empty partial indexes on the first rung")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", default=tempfile.gettempdir())
    parser.add_argument("--out", default=str(RESULTS / "pg_retrieval.json"))
    parser.add_argument("--report", metavar="JSON", help="print the tables of a finished run and stop")
    args = parser.parse_args(argv)
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return 0

    ladder = QUICK_LADDER if args.quick else args.ladder
    queries = 60 if args.quick else args.queries
    vectors = TextLike(Path(args.workdir) / "biomem-locomo-minilm.npz") if args.vectors == "text" else Uniform()
    partitioned_at = {int(n) for n in args.partitioned.split(",") if n}
    server = Server(Path(tempfile.mkdtemp(prefix="biomem-bench-pg-", dir=args.workdir)))
    results: dict[str, Any] = {"machine": machine_info("psycopg", "pgvector"), "postgres": server.version,
                               "server_settings": server.settings, "command": command("pg_retrieval", argv),
                               "vectors": args.vectors, "participation_ratio": vectors.participation,
                               "graph": {"m": M, "ef_construction": EF_CONSTRUCTION, "ef_search": EF_SEARCH,
                                         "ef_notes": EF_NOTES},
                               "ef_searches": list(EF_SEARCHES),
                               "rungs": []}
    try:
        for i, rung in enumerate(ladder.split(",")):
            notes, owners, large = rung.split(":")
            sizes = [int(size) for part in large.split("+") for count, size in [part.split("x")]
                     for _ in range(int(count))]
            results["rungs"].append(run_rung(server, int(notes), int(owners), sizes, vectors=vectors,
                                             queries=queries, seed=args.seed + i, adds=args.adds,
                                             skip_global=args.skip_global,
                                             partition=int(notes) in partitioned_at and not args.quick,
                                             extra_graphs=args.many_graphs if i == 0 and not args.quick else 0))
            results["pgvector"] = results["rungs"][-1]["load"]["pgvector"]
            write_result(args.out, results)  # after every rung: a long run keeps its rungs
    finally:
        server.close()
    results["targets"] = [{"rung": f"{r['notes']}:{r['owners']}", "partition": size,
                           "recall_at_10_owner": r["owner_phase"]["owner"][size]["recall_at_10"],
                           "exact_recall": r["owner_phase"]["exact"][size]["recall_at_10"],
                           "met": r["owner_phase"]["owner"][size]["recall_at_10"] >= TARGET_OWNER_RECALL
                           and r["owner_phase"]["exact"][size]["recall_at_10"] == 1.0}
                          for r in results["rungs"] for size in r["owner_phase"]["exact"]]
    write_result(args.out, results)
    print(report(results))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
