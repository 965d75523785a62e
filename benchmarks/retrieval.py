"""Retrieval and ingest benchmark of the Bio-Memory engine.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/retrieval.py --quick     # < 1 minute
    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/retrieval.py             # full ladder, 1M notes

Part 1, gated search. For each rung (N notes over U identities) a synthetic store is built on
disk through the engine's own Store (add_identity + insert_notes, one big transaction, no LLM,
no text encoder): random unit-norm 384-d note embeddings, one random unit-norm 128-d
"face-dlib" template per identity. `BioMemory.search(query_vector, probe=Probe(...), k=10)` is
then timed end to end (gate over all templates, partition search, fetch of the 10 notes
from SQLite) with probes that are noisy copies of an identity's template, in two engine
configurations: exact partitions (numpy) and the hnswlib path forced (hnsw_threshold=1).
The paper-faithful baseline runs in the same loop, interleaved: every note carries its own
biometric embedding b_i (N x 128), the probe is compared with all N of them, the pool is
the notes with cos >= tau, and the pool is scanned exactly for the top-10 by text cosine
(N x 384 in memory). Recall@10 of every path is measured against an exact brute-force
top-10 within the owner's notes.

Part 2, offline ingest. Real LoCoMo turns are ingested with `BioMemory.add_many` (offline
LLM) on a fresh store, and in the same run the text encoder alone encodes the very strings
the engine embedded (`biomem.notes.agent.embedding_text` of the stored notes) and the raw turns,
with the engine's batch size, paired chunk by chunk in rotating order; the median of the
rounds is kept.

With `--store postgresql` (ingest skipped unless --ingest) every rung is also built in an embedded
PostgreSQL 18 + pgvector (benchmarks/pg_retrieval.py: identities through the store's add_identity,
notes and their history rows by binary COPY, one HNSW build, VACUUM ANALYZE) and searched in the
same interleaved loop in the same two configurations (pg_exact, pg_hnsw: pgvector HNSW over all
notes filtered by owner, iterative scan), with each build step timed and the PostgreSQL / SQLite
ratios; then two engine processes share the largest rung's database, each searching while the
other adds through BioMemory.add. JSON: benchmarks/results/retrieval_postgresql.json.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/retrieval.py --store postgresql \
        --ladder 10000:100,100000:1000,1000000:10000      # ~22 min, 14 of them the 1M HNSW build

Part 3, households and filters (default 1M notes / 10,000 people, quick 20,000 / 200; --households,
--skip-households). Two stores with the same people and the same number of notes are built through the
engine's Store (add_identity, add_group, insert_notes with author, metadata and hidden_from): ungrouped (every
note a person's, 100 each at 1M) and grouped (households of 4, 20% of the notes theirs, each written by a
member, 5% of those hidden from one other member; 80 notes per person and 80 per household at 1M). Every note
has the metadata {"bucket": 0..99}, so {"metadata.bucket": {"lt": t}} is a filter of t% selectivity. Each query
runs `BioMemory.search(vector, probe=Probe(...), k=10, filters=...)` on both stores without a filter and with
filters of 1%, 10% and 50%, interleaved in rotating order; recall@10 is against the exact top-10 (numpy) of the
notes that person may read (own + household's, less hidden) that pass the filter. Then each part of a search
is timed on its own (gate, reach, search_as, and the store statements groups and filters add). With --store
postgresql the household rungs also run on PostgreSQL (--households-pg, default 100,000 / 1,000: built row by
row through the store's own calls, then VACUUM ANALYZE).

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/retrieval.py --skip-search --skip-ingest \
        --households 1000000:10000 --out benchmarks/results/retrieval_households.json

Prints markdown tables (with targets and pass/fail) and writes every number and the
machine's description to benchmarks/results/retrieval.json (or --out).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
try:  # the engine on PYTHONPATH if there is one (e.g. a patched copy), else this checkout's
    import biomem  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT))

from machine import machine_info  # noqa: E402  (benchmarks/machine.py)

import modalities  # noqa: E402
from biomem import BioMemory, Probe  # noqa: E402
from biomem.notes.agent import MemoryAgent, embedding_text  # noqa: E402
from biomem.notes.textenc import TextEncoder  # noqa: E402
from biomem.stores.sqlite import Store  # noqa: E402

MODALITY = "face-dlib"
TEXT_DIM = 384
BIO_DIM = 128
K = 10
FULL_LADDER = "10000:100,100000:1000,1000000:10000,200000:10"
QUICK_LADDER = "10000:100,20000:1000"
LOCOMO = Path(os.environ.get("LOCOMO_JSON", ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"))

TARGET_P50_MS = 3.0
TARGET_SPEEDUP = 30.0
TARGET_RECALL = 1.0
TARGET_INGEST_RATIO = 1.25
TARGET_PG_RATIO = 5.0
TARGET_HOUSEHOLD_RATIO = 1.5  # grouped and filtered p50 / ungrouped p50, same run

FULL_HOUSEHOLDS = "1000000:10000"  # NOTES:PEOPLE of the household rungs
QUICK_HOUSEHOLDS = "20000:200"
PG_HOUSEHOLDS = "100000:1000"  # PostgreSQL's household rungs are built row by row through the store
HOUSEHOLD_SIZE = 4
GROUP_FRACTION = 0.2  # of the notes, owned by households
HIDDEN_FRACTION = 0.05  # of the households' notes, hidden from one member
BUCKETS = 100  # metadata "bucket" uniform in 0..99
SELECTIVITIES = (1, 10, 50)  # filters {"metadata.bucket": {"lt": t}}: t% of the notes


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- small helpers ----------------------------------------------------------------------------

def rss_mb() -> float:
    """Resident set size of this process now, MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    rows = rng.standard_normal((n, dim), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def noisy_copy(rng: np.random.Generator, template: np.ndarray, cosine: float) -> np.ndarray:
    """A unit vector at exactly `cosine` from `template`: a second capture of the same person."""
    noise = rng.standard_normal(template.shape[0]).astype(np.float32)
    noise -= (noise @ template) * template
    noise /= np.linalg.norm(noise)
    return (cosine * template + np.sqrt(1.0 - cosine ** 2) * noise).astype(np.float32)


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    a = np.asarray(samples_ms, dtype=np.float64)
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)),
            "mean_ms": float(a.mean()), "min_ms": float(a.min()), "max_ms": float(a.max()), "n": int(a.size)}


def dir_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6 if path.exists() else 0.0


def machine_info_here() -> dict[str, Any]:
    """The machine, plus what moves this benchmark's numbers: SQLite, torch and its threads."""
    import torch

    return {**machine_info("hnswlib", "sentence-transformers", "sqlite-utils"), "sqlite": sqlite3.sqlite_version,
            "torch": torch.__version__, "torch_threads": torch.get_num_threads()}


# ---- part 1: gated search ---------------------------------------------------------------------



def profiled(mem: Any, query_vecs: np.ndarray, probes: np.ndarray, **search: Any) -> str:
    """cProfile's 25 costliest functions (own time) over one gated search per query."""
    prof = cProfile.Profile()
    prof.enable()
    for vector, probe in zip(query_vecs, probes):
        mem.search(vector, probe=Probe(probe, MODALITY), k=K, **search)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
    return buf.getvalue()

class Batched:
    """One store transaction per `every` notes (the store's own calls join it as nested transactions): a bulk
    load without a commit per call, and without one transaction the size of the store."""

    def __init__(self, store: Any, every: int = 100_000) -> None:
        self.store, self.every, self.count = store, every, 0

    def __enter__(self) -> Batched:
        self.tx = self.store.transaction()
        self.tx.__enter__()
        return self

    def added(self, notes: int) -> None:
        """Count `notes` more; commit and begin the next transaction past `every`."""
        self.count += notes
        if self.count >= self.every:
            self.tx.__exit__(None, None, None)
            self.tx = self.store.transaction()
            self.tx.__enter__()
            self.count = 0

    def __exit__(self, *exc: Any) -> None:
        self.tx.__exit__(*exc)

class SyntheticStore:
    """A store of `n_notes` random notes spread evenly over `n_ids` identities, plus the
    in-memory copies the baseline and the brute-force reference need."""

    def __init__(self, path: Path, n_notes: int, n_ids: int, seed: int) -> None:
        self.path = path
        self.n_notes, self.n_ids = n_notes, n_ids
        rng = np.random.default_rng(seed)
        counts = np.full(n_ids, n_notes // n_ids, dtype=np.int64)
        counts[: n_notes % n_ids] += 1
        self.starts = np.r_[0, np.cumsum(counts)[:-1]]
        self.counts = counts
        self.templates = unit_rows(rng, n_ids, BIO_DIM)
        self.embeddings = np.empty((n_notes, TEXT_DIM), dtype=np.float32)  # e_i, rows by owner
        self.note_ids = np.empty(n_notes, dtype=np.int64)
        self.owner_ids = np.empty(n_ids, dtype=np.int64)

        t0 = time.perf_counter()
        start = datetime(2023, 1, 1)
        self.stamps = [(start + timedelta(minutes=k)).isoformat() for k in range(int(counts.max()))]
        store = Store(path)
        with Batched(store) as batch:
            for j in range(n_ids):
                s, c = int(self.starts[j]), int(counts[j])
                vectors = unit_rows(rng, c, TEXT_DIM)
                self.embeddings[s:s + c] = vectors
                identity = store.add_identity(f"person-{j:05d}", MODALITY, self.templates[j:j + 1])
                self.owner_ids[j] = identity.id
                ids, _ = store.insert_notes(identity.id, self.notes_for(j), vectors)
                self.note_ids[s:s + c] = ids
                batch.added(c)
        store.close()
        self.build_s = time.perf_counter() - t0
        # b_i of the paper: the owner's template copied onto every note (N x 128)
        self.note_biometrics = np.repeat(self.templates, counts, axis=0)

    def notes_for(self, j: int) -> list[dict[str, Any]]:
        """The note fields of identity j's notes, oldest first (what insert_notes is given)."""
        return [{"content": f"Synthetic memory {k} of person {j}: benchmark filler text.",
                 "timestamp": self.stamps[k],
                 "keywords": ["synthetic", "benchmark", "memory"],
                 "tags": ["test", "filler", "note"],
                 "context": "A synthetic note for the retrieval benchmark."}
                for k in range(int(self.counts[j]))]

    def owner_slice(self, j: int) -> slice:
        return slice(int(self.starts[j]), int(self.starts[j] + self.counts[j]))

    def exact_top(self, j: int, query: np.ndarray, k: int, note_ids: np.ndarray | None = None) -> set[int]:
        """Brute-force top-k note ids within owner j's notes (ids of this store, or `note_ids`: another
        store's ids of the same rows)."""
        sl = self.owner_slice(j)
        scores = self.embeddings[sl] @ query
        top = np.argsort(-scores, kind="stable")[:k]
        return set((self.note_ids if note_ids is None else note_ids)[sl][top].tolist())

    def baseline_search(self, probe: np.ndarray, query: np.ndarray, tau: float, k: int) -> list[int]:
        """Paper-faithful: N biometric cosines, pool = cos >= tau, exact top-k in the pool."""
        bio = self.note_biometrics @ probe
        pool = np.flatnonzero(bio >= tau)  # row order = time order within each owner
        if pool.size == 0:
            return []
        scores = self.embeddings[pool] @ query
        kk = min(k, pool.size)
        top = np.argpartition(-scores, kk - 1)[:kk] if kk < pool.size else np.arange(pool.size)
        top = top[np.argsort(-scores[top], kind="stable")]
        return self.note_ids[pool[top]].tolist()


def run_rung(n_notes: int, n_ids: int, *, encoder: TextEncoder, queries: int, seed: int,
             workdir: Path, keep: bool, profile: bool, hnsw_ef: int | None,
             pg: Any = None, concurrency_adds: int = 0) -> dict[str, Any]:
    """One rung: SQLite (exact, hnsw) against the paper baseline, plus PostgreSQL (pg_exact, pg_hnsw)
    on the same notes when `pg` (a pg_retrieval.Server) is given; with `concurrency_adds`, then two
    engine processes on the PostgreSQL database, each searching while the other adds."""
    rung_dir = Path(tempfile.mkdtemp(prefix=f"biomem-bench-{n_notes}-{n_ids}-", dir=workdir))
    db = rung_dir / "bench.db"
    per_owner = n_notes // n_ids
    log(f"rung {n_notes:,} notes / {n_ids:,} identities ({per_owner:,} per owner): building in {rung_dir}")
    rss0 = rss_mb()
    load_start = os.getloadavg()[0]
    data = SyntheticStore(db, n_notes, n_ids, seed)
    rss_built = rss_mb()
    log(f"  built in {data.build_s:.1f} s ({n_notes / data.build_s:,.0f} notes/s), DB {dir_mb(db):,.0f} MB")
    pg_load: dict[str, Any] = {}
    if pg is not None:
        from pg_retrieval import bulk_load
        pg_db = f"bench_{n_notes}_{n_ids}"
        pg_url = pg.database(pg_db)
        pg_load = bulk_load(pg_url, data, dim=TEXT_DIM, modality=MODALITY)
        log(f"  PostgreSQL built in {pg_load['build_s']:.1f} s: identities {pg_load['identities_s']:.1f} s, "
            f"COPY {pg_load['copy_s']:.1f} s, HNSW index {pg_load['hnsw_index_s']:.1f} s, "
            f"VACUUM ANALYZE {pg_load['vacuum_analyze_s']:.1f} s; {pg.database_mb(pg_db):,.0f} MB")

    rng = np.random.default_rng(seed + 1)
    owners = rng.integers(0, n_ids, size=queries)
    query_vecs = unit_rows(rng, queries, TEXT_DIM)
    probe_cos = rng.uniform(0.97, 0.995, size=queries)  # genuine captures score >= 0.97 (DESIGN)
    probes = np.stack([noisy_copy(rng, data.templates[j], c) for j, c in zip(owners, probe_cos)])
    truth = {"sqlite": [data.exact_top(int(j), q, K) for j, q in zip(owners, query_vecs)]}

    modes = {"exact": max(20_000, per_owner + 1), "hnsw": 1}
    where: dict[str, Any] = {"exact": db, "hnsw": db}
    store_of = {"exact": "sqlite", "hnsw": "sqlite"}
    owner_ids = {"sqlite": data.owner_ids}
    if pg is not None:  # the same two configurations on PostgreSQL
        modes.update(pg_exact=modes["exact"], pg_hnsw=1)
        where.update(pg_exact=pg_url, pg_hnsw=pg_url)
        store_of.update(pg_exact="postgresql", pg_hnsw="postgresql")
        owner_ids["postgresql"] = pg_load["owner_ids"]
        truth["postgresql"] = [data.exact_top(int(j), q, K, pg_load["note_ids"]) for j, q in zip(owners, query_vecs)]
    mems: dict[str, BioMemory] = {}
    out_modes: dict[str, Any] = {}
    rss_before_open = rss_mark = rss_mb()
    for mode, threshold in modes.items():
        mems[mode] = BioMemory(where[mode], text_model=encoder, llm="offline", hnsw_threshold=threshold)
        if hnsw_ef is not None:
            mems[mode].partitions.ef_search = hnsw_ef
    log(f"  opened the engine {len(mems)} times: RSS +{rss_mb() - rss_mark:.0f} MB")
    rss_mark = rss_mb()
    tau = mems["exact"].threshold(MODALITY)
    gated_total = {m: n_notes - data.counts for m in modes}  # expected gated_out per owner

    # warm-up: one search per distinct queried owner (loads its partition: the cold cost)
    for mode, mem in mems.items():
        cold = []
        for j in dict.fromkeys(owners.tolist()):
            probe = noisy_copy(rng, data.templates[j], 0.98)
            q = unit_rows(rng, 1, TEXT_DIM)[0]
            t0 = time.perf_counter_ns()
            mem.search(q, probe=Probe(probe, MODALITY), k=K)
            cold.append((time.perf_counter_ns() - t0) / 1e6)
        rss_now = rss_mb()
        out_modes[mode] = {"hnsw_threshold": modes[mode], "cold_first_search": percentiles(cold),
                           "owners_loaded": len(cold), "rss_delta_mb": rss_now - rss_mark}
        rss_mark = rss_now
        log(f"  {mode}: warmed {len(cold)} owners, cold p50 {np.median(cold):.2f} ms, "
            f"RSS +{out_modes[mode]['rss_delta_mb']:.0f} MB")
    rss_warm = rss_mb()
    for _ in range(20):  # baseline warm-up (page in the N x 128 and N x 384 matrices)
        data.baseline_search(probes[0], query_vecs[0], tau, K)

    # timed loop, interleaved in rotating order to cancel drift
    names = [*modes, "baseline"]
    times: dict[str, list[float]] = {n: [] for n in names}
    recall: dict[str, list[float]] = {n: [] for n in names}
    gate_ok = {m: 0 for m in modes}
    gated_out_ok = {m: 0 for m in modes}
    gc.collect()
    for i in range(queries):
        j = int(owners[i])
        q, p = query_vecs[i], probes[i]
        turn = i % len(names)
        for name in names[turn:] + names[:turn]:
            if name == "baseline":
                t0 = time.perf_counter_ns()
                ids = data.baseline_search(p, q, tau, K)
                times[name].append((time.perf_counter_ns() - t0) / 1e6)
            else:
                t0 = time.perf_counter_ns()
                result = mems[name].search(q, probe=Probe(p, MODALITY), k=K)
                times[name].append((time.perf_counter_ns() - t0) / 1e6)
                ids = [n.id for n, _ in result.notes]
                gate_ok[name] += result.gate.identity == int(owner_ids[store_of[name]][j])
                gated_out_ok[name] += result.gated_out == int(gated_total[name][j])
            recall[name].append(len(truth[store_of.get(name, "sqlite")][i] & set(ids)) / K)

    # the same exact searches back to back: caches stay warm (no 2 GB baseline scan between them)
    for mode in ("exact", "pg_exact") if pg is not None else ("exact",):
        warm = []
        for i in range(queries):
            t0 = time.perf_counter_ns()
            mems[mode].search(query_vecs[i], probe=Probe(probes[i], MODALITY), k=K)
            warm.append((time.perf_counter_ns() - t0) / 1e6)
        out_modes[f"{mode}_back_to_back"] = percentiles(warm)

    for name in names:
        entry = out_modes.setdefault(name, {})
        entry.update(percentiles(times[name]))
        entry["recall_at_10"] = float(np.mean(recall[name]))
        entry["recall_at_10_min"] = float(np.min(recall[name]))
        if name in modes:
            entry["gate_correct"] = gate_ok[name] / queries
            entry["gated_out_correct"] = gated_out_ok[name] / queries
    out_modes["hnsw"]["ef_search"] = mems["hnsw"].partitions.ef_search
    if pg is not None:
        out_modes["pg_hnsw"]["ef_search"] = mems["pg_hnsw"].partitions.ef_search
        out_modes["pg_hnsw"]["plan"] = mems["pg_hnsw"].partitions.explain(
            int(owner_ids["postgresql"][int(owners[0])]), query_vecs[0], K)
        out_modes["pg_exact"]["plan"] = mems["pg_exact"].partitions.explain(
            int(owner_ids["postgresql"][int(owners[0])]), query_vecs[0], K)
    out_modes["baseline"]["tau"] = tau
    out_modes["baseline"]["matrix_mb"] = (data.embeddings.nbytes + data.note_biometrics.nbytes) / 1e6

    profiles = {}
    for mode in ("exact", "hnsw") if profile else ():
        profiles[mode] = profiled(mems[mode], query_vecs[:queries], probes[:queries])
        print(f"\n### cProfile, {mode} gated search, {n_notes:,} notes / {n_ids:,} identities, "
              f"{queries} searches\n\n```\n{profiles[mode]}```\n", flush=True)

    for mem in mems.values():
        mem.close()
    index_mb = dir_mb(db.with_name(db.name + ".index"))
    result = {
        "load_average_1m": {"start": load_start, "end": os.getloadavg()[0]},
        "notes": n_notes, "identities": n_ids, "notes_per_owner": per_owner, "queries": queries,
        "build_s": data.build_s, "build_notes_per_s": n_notes / data.build_s,
        "db_mb": dir_mb(db), "hnsw_index_mb": index_mb,
        "rss_mb": {"before_build": rss0, "after_build": rss_built, "before_open": rss_before_open,
                   "after_warmup": rss_warm, "engine_delta": rss_warm - rss_before_open,
                   "peak": peak_rss_mb()},
        "modes": out_modes,
        "speedup_exact": out_modes["baseline"]["p50_ms"] / out_modes["exact"]["p50_ms"],
        "speedup_hnsw": out_modes["baseline"]["p50_ms"] / out_modes["hnsw"]["p50_ms"],
    }
    if profiles:
        result["profiles"] = profiles
    if pg is not None:
        result["postgresql"] = postgres_summary(out_modes, pg_load, pg.database_mb(pg_db), data.build_s)
        log(f"  PostgreSQL exact p50 {out_modes['pg_exact']['p50_ms']:.3f} ms "
            f"({result['postgresql']['ratio']['exact_p50']:.2f}x SQLite), hnsw p50 "
            f"{out_modes['pg_hnsw']['p50_ms']:.3f} ms, recall exact {out_modes['pg_exact']['recall_at_10']:.3f} "
            f"/ hnsw {out_modes['pg_hnsw']['recall_at_10']:.3f}")
        if concurrency_adds:
            from pg_retrieval import concurrency
            log(f"  concurrency: two engine processes on {pg_db}, {concurrency_adds} adds each")
            result["postgresql"]["concurrency"] = concurrency(
                pg_url, text_model=encoder.name, hnsw_threshold=modes["pg_exact"],
                owners=owner_ids["postgresql"], templates=data.templates, modality=MODALITY,
                adds=concurrency_adds, seed=seed + 7)
            c = result["postgresql"]["concurrency"]
            log(f"  concurrency: search p50/p95 {fmt_ms(c['search_while_other_adds'])} ms while the other adds "
                f"(quiet {fmt_ms(c['search_quiet'])}), {c['adds_per_s']:.1f} adds/s, all visible "
                f"{c['all_adds_visible_to_other']}, wrong-owner notes {c['wrong_owner_notes']}")
    log(f"  exact p50 {out_modes['exact']['p50_ms']:.3f} ms, hnsw p50 {out_modes['hnsw']['p50_ms']:.3f} ms, "
        f"baseline p50 {out_modes['baseline']['p50_ms']:.3f} ms, speed-up {result['speedup_exact']:.1f}x")
    del data, mems
    gc.collect()
    if keep:
        log(f"  kept {rung_dir}")
    else:
        shutil.rmtree(rung_dir, ignore_errors=True)
        if pg is not None:
            pg.drop(pg_db)
    return result


def postgres_summary(modes: dict[str, Any], load: dict[str, Any], db_mb: float,
                     sqlite_build_s: float) -> dict[str, Any]:
    """The PostgreSQL numbers of a rung and their ratios to SQLite's (PostgreSQL / SQLite)."""
    return {
        "build": {k: v for k, v in load.items() if k not in ("owner_ids", "note_ids")}, "db_mb": db_mb,
        "ratio": {"exact_p50": modes["pg_exact"]["p50_ms"] / modes["exact"]["p50_ms"],
                  "exact_p95": modes["pg_exact"]["p95_ms"] / modes["exact"]["p95_ms"],
                  "exact_back_to_back_p50": modes["pg_exact_back_to_back"]["p50_ms"]
                  / modes["exact_back_to_back"]["p50_ms"],
                  "hnsw_p50": modes["pg_hnsw"]["p50_ms"] / modes["hnsw"]["p50_ms"],
                  "hnsw_p95": modes["pg_hnsw"]["p95_ms"] / modes["hnsw"]["p95_ms"],
                  "build_s": load["build_s"] / sqlite_build_s,
                  "build_without_index_s": load["build_without_index_s"] / sqlite_build_s},
    }


# ---- part 2: offline ingest -------------------------------------------------------------------

def locomo_turns(conversations: int, limit: int | None) -> tuple[list[str], list[str]]:
    """(texts, session date strings) of the first `conversations` LoCoMo conversations."""
    data = json.loads(LOCOMO.read_text())
    texts, stamps = [], []
    for sample in data[:conversations]:
        conv = sample["conversation"]
        sessions = sorted(int(k.split("_")[1]) for k in conv
                           if k.startswith("session_") and k.count("_") == 1 and isinstance(conv[k], list))
        for s in sessions:
            for turn in conv[f"session_{s}"]:
                texts.append(f"{turn['speaker']}: {turn['text']}")
                stamps.append(conv[f"session_{s}_date_time"])
    if limit is not None:
        if limit > len(texts):
            raise SystemExit(f"--ingest-notes {limit} exceeds the {len(texts)} turns of "
                             f"{conversations} conversation(s); raise --ingest-conversations")
        texts, stamps = texts[:limit], stamps[:limit]
    return texts, stamps


def run_ingest(encoder: TextEncoder, *, conversations: int, limit: int | None, rounds: int,
               workdir: Path, seed: int) -> dict[str, Any]:
    """Engine ingest against the bare encoder, paired chunk by chunk.

    The engine's `add_many` embeds 256 notes per encoder call; each such chunk is timed
    through the engine, then (in rotating order) the bare encoder over the strings the
    engine embedded for that chunk and over the chunk's raw turns. Pairing at a few
    seconds' distance keeps a shared machine's load swings out of the ratios.
    """
    texts, stamps = locomo_turns(conversations, limit)
    n = len(texts)
    batch = MemoryAgent.embed.__defaults__[0]  # the engine's encode batch size
    chunk = BioMemory.add_many.__kwdefaults__["batch_size"]  # add_many's texts per ingest call
    spans = [(a, min(a + chunk, n)) for a in range(0, n, chunk)]
    load_start = os.getloadavg()[0]
    log(f"ingest: {n} LoCoMo turns in {len(spans)} chunk(s), {rounds} round(s), encode batch {batch}")
    rng = np.random.default_rng(seed)

    def fresh_store() -> tuple[Path, BioMemory, int]:
        folder = Path(tempfile.mkdtemp(prefix="biomem-ingest-", dir=workdir))
        mem = BioMemory(folder / "ingest.db", text_model=encoder, llm="offline")
        owner = mem.store.add_identity("conversation", MODALITY, unit_rows(rng, 1, BIO_DIM)).id
        return folder, mem, owner

    # untimed pass (also the warm-up): the strings the engine embeds. The offline LLM is
    # deterministic, so every timed round embeds exactly these strings.
    folder, mem, owner = fresh_store()
    ids = mem.add_many(texts, identity=owner, timestamps=stamps)
    by_id = {note.id: note for note in mem.store.all_notes(owner)}
    embedded = [embedding_text(x.content, x.context, x.keywords, x.tags) for x in (by_id[i] for i in ids)]
    stored_ids, matrix, _ = mem.store.note_vectors(owner)
    row = {int(i): r for r, i in enumerate(stored_ids)}
    again = np.concatenate([encoder.encode(embedded[a:b], batch_size=batch) for a, b in spans])
    consistency = float(np.min(np.sum(matrix[[row[i] for i in ids]] * again, axis=1)))
    mem.close()
    shutil.rmtree(folder, ignore_errors=True)

    paths = ["engine", "bare_embedded", "bare_raw"]
    totals: dict[str, list[float]] = {p: [] for p in paths}
    for r in range(rounds):
        folder, mem, owner = fresh_store()
        spent = dict.fromkeys(paths, 0.0)
        for c, (a, b) in enumerate(spans):
            turn = (r + c) % len(paths)
            for path in paths[turn:] + paths[:turn]:
                t0 = time.perf_counter()
                if path == "engine":
                    mem.add_many(texts[a:b], identity=owner, timestamps=stamps[a:b])
                elif path == "bare_embedded":
                    encoder.encode(embedded[a:b], batch_size=batch)
                else:
                    encoder.encode(texts[a:b], batch_size=batch)
                spent[path] += time.perf_counter() - t0
        mem.close()
        shutil.rmtree(folder, ignore_errors=True)
        for path in paths:
            totals[path].append(spent[path])
        log(f"  round {r + 1}: " + ", ".join(f"{p} {spent[p]:.1f} s" for p in paths))
    med = {p: statistics.median(v) for p, v in totals.items()}
    per_round = [e / b for e, b in zip(totals["engine"], totals["bare_embedded"])]
    return {
        "load_average_1m": {"start": load_start, "end": os.getloadavg()[0]},
        "notes": n, "conversations": conversations, "rounds": rounds, "encode_batch_size": batch,
        "add_many_chunk": chunk, "seconds": totals, "median_s": med,
        "notes_per_s": {p: n / v for p, v in med.items()},
        "ratio_engine_vs_bare_embedded": statistics.median(per_round),
        "ratio_engine_vs_bare_embedded_per_round": per_round,
        "ratio_engine_vs_bare_raw": statistics.median(
            e / b for e, b in zip(totals["engine"], totals["bare_raw"])),
        "mean_chars": {"raw": float(np.mean([len(t) for t in texts])),
                       "embedded": float(np.mean([len(t) for t in embedded]))},
        "min_cosine_stored_vs_bare": consistency,
    }


# ---- part 3: households and filters -----------------------------------------------------------

def spread(total: int, parts: int) -> np.ndarray:
    """`total` items over `parts` owners as evenly as possible (the first ones get one more)."""
    counts = np.full(parts, total // parts if parts else 0, dtype=np.int64)
    counts[: total - int(counts.sum())] += 1
    return counts


class HouseholdStore:
    """One layout of a household rung: `n_notes` random notes of `n_people` people, each enrolled with the same
    template in both layouts (seeded by `seed`). Ungrouped: every note belongs to a person, spread evenly.
    Grouped: people 0-3 are household 0, 4-7 household 1, ... (a group of `size` members each); the
    households own `group_fraction` of the notes, spread evenly, each written by a random member and, with
    probability `hidden_fraction`, hidden from one other member; the people own the rest. Every note has the
    metadata {"bucket": b}, b uniform in 0..BUCKETS-1, so {"metadata.bucket": {"lt": t}} selects t% of any set
    of notes. Built through the engine's Store (add_identity, add_group, insert_notes with author, metadata and
    hidden_from: the rows BioMemory.add writes), one transaction per ~100k notes; the arrays the exact
    reference needs are kept in memory."""

    def __init__(self, location: Path | str, n_notes: int, n_people: int, *, grouped: bool, size: int,
                 group_fraction: float, hidden_fraction: float, seed: int) -> None:
        """`location`: an SQLite file, or a PostgreSQL URL (an empty database: the store's schema, no HNSW index,
        the exact scan PostgreSQL runs by default; VACUUM ANALYZE after the load)."""
        self.location, self.grouped = location, grouped
        self.n_notes, self.n_people = n_notes, n_people
        self.templates = unit_rows(np.random.default_rng(seed), n_people, BIO_DIM)  # the same people in both
        rng = np.random.default_rng(seed + (11 if grouped else 12))
        self.n_groups = n_people // size if grouped else 0
        group_notes = round(n_notes * group_fraction) if grouped else 0
        counts = np.r_[spread(n_notes - group_notes, n_people), spread(group_notes, self.n_groups)]
        self.counts, self.starts = counts, np.r_[0, np.cumsum(counts)[:-1]]
        self.household = np.full(n_people, -1, dtype=np.int64)  # person -> household index, -1 for none
        self.household[: self.n_groups * size] = np.arange(self.n_groups * size) // size
        self.embeddings = np.empty((n_notes, TEXT_DIM), dtype=np.float32)
        self.note_ids = np.empty(n_notes, dtype=np.int64)
        self.buckets = rng.integers(0, BUCKETS, size=n_notes)
        self.hidden = np.full(n_notes, -1, dtype=np.int64)  # person index a note is hidden from, -1 for none
        self.authors = np.full(n_notes, -1, dtype=np.int64)  # person index that wrote a group note
        self.person_ids = np.empty(n_people, dtype=np.int64)
        self.group_ids = np.empty(self.n_groups, dtype=np.int64)

        t0 = time.perf_counter()
        start = datetime(2023, 1, 1)
        stamps = [(start + timedelta(minutes=k)).isoformat() for k in range(int(counts.max()))]
        postgres = isinstance(location, str)
        if postgres:
            from biomem.stores.pg import PostgresStore
            store: Any = PostgresStore(location)
            store.ensure_vector_index(TEXT_DIM, hnsw=False)  # types the column; exact scans, no graph
        else:
            store = Store(location)
        with Batched(store) as batch:
            for j in range(n_people):
                self.person_ids[j] = store.add_identity(f"person-{j:05d}", MODALITY, self.templates[j:j + 1]).id
            for h in range(self.n_groups):
                members = self.person_ids[h * size:(h + 1) * size]
                self.group_ids[h] = store.add_group(f"household-{h:05d}", [int(m) for m in members]).id
            for o in range(len(counts)):
                s, c = int(self.starts[o]), int(counts[o])
                vectors = unit_rows(rng, c, TEXT_DIM)
                self.embeddings[s:s + c] = vectors
                group = o >= n_people
                notes = []
                for k in range(c):
                    note = {"content": f"Synthetic memory {k} of {'household' if group else 'person'} "
                                       f"{o - n_people if group else o}: benchmark filler text.",
                            "timestamp": stamps[k], "keywords": ["synthetic", "benchmark", "memory"],
                            "tags": ["test", "filler", "note"],
                            "context": "A synthetic note for the retrieval benchmark.",
                            "metadata": {"bucket": int(self.buckets[s + k])}}
                    if group:
                        h = o - n_people
                        author, *others = rng.permutation(size)
                        self.authors[s + k] = h * size + author
                        note["author"] = int(self.person_ids[h * size + author])
                        if rng.random() < hidden_fraction:
                            self.hidden[s + k] = h * size + others[0]
                            note["hidden_from"] = [int(self.person_ids[h * size + others[0]])]
                    notes.append(note)
                owner = int(self.group_ids[o - n_people]) if group else int(self.person_ids[o])
                ids, _ = store.insert_notes(owner, notes, vectors)
                self.note_ids[s:s + c] = ids
                batch.added(c)
        store.close()
        if postgres:
            import psycopg
            with psycopg.connect(location, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")  # what autovacuum would do next
        self.build_s = time.perf_counter() - t0

    def owner_rows(self, o: int) -> np.ndarray:
        return np.arange(int(self.starts[o]), int(self.starts[o] + self.counts[o]))

    def readable(self, j: int) -> np.ndarray:
        """Rows person j may read: their own notes and their household's, less those hidden from them."""
        rows = self.owner_rows(j)
        h = int(self.household[j])
        if h >= 0:
            shared = self.owner_rows(self.n_people + h)
            rows = np.r_[rows, shared[self.hidden[shared] != j]]
        return rows

    def readable_ids(self, j: int) -> set[int]:
        return set(self.note_ids[self.readable(j)].tolist())

    def exact_top(self, j: int, query: np.ndarray, k: int, below: int | None) -> tuple[list[int], int]:
        """Brute-force top-k note ids (best first) among the notes person j may read whose bucket is below
        `below` (None: every one), and how many such notes there are."""
        rows = self.readable(j)
        if below is not None:
            rows = rows[self.buckets[rows] < below]
        scores = self.embeddings[rows] @ query
        top = np.argsort(-scores, kind="stable")[:k]
        return self.note_ids[rows[top]].tolist(), int(rows.size)


def household_filter(below: int | None) -> dict[str, Any] | None:
    return None if below is None else {"metadata.bucket": {"lt": below}}


def run_household_rung(n_notes: int, n_people: int, *, encoder: TextEncoder, queries: int, seed: int,
                       workdir: Path, keep: bool, profile: bool, size: int, group_fraction: float,
                       hidden_fraction: float, pg: Any = None) -> dict[str, Any]:
    """Household and filter rungs: the ungrouped store and the grouped one (same people, same number of notes),
    searched in one interleaved loop without and with filters of 1%, 10% and 50% selectivity; recall@10
    against the exact top-10 of the notes each person may read that pass the filter. On SQLite, or on
    PostgreSQL when `pg` (a pg_retrieval.Server) is given."""
    backend = "sqlite" if pg is None else "postgresql"
    rung_dir = Path(tempfile.mkdtemp(prefix=f"biomem-bench-households-{n_notes}-{n_people}-", dir=workdir))
    load_start = os.getloadavg()[0]
    log(f"households rung on {backend}: {n_notes:,} notes, {n_people:,} people, households of {size}, "
        f"{group_fraction:.0%} of the notes in groups: building in {rung_dir if pg is None else 'PostgreSQL'}")
    location: dict[str, Path | str] = {}
    size_mb: dict[str, Any] = {}
    for layout in ("ungrouped", "grouped"):
        if pg is None:
            location[layout] = rung_dir / f"{layout}.db"
            size_mb[layout] = lambda layout=layout: dir_mb(rung_dir / f"{layout}.db")
        else:
            location[layout] = pg.database(f"bench_households_{layout}_{n_notes}_{n_people}")
            size_mb[layout] = lambda layout=layout: pg.database_mb(f"bench_households_{layout}_{n_notes}_{n_people}")
    data: dict[str, HouseholdStore] = {}
    for layout in ("ungrouped", "grouped"):
        data[layout] = HouseholdStore(location[layout], n_notes, n_people, grouped=layout == "grouped",
                                      size=size, group_fraction=group_fraction, hidden_fraction=hidden_fraction,
                                      seed=seed)
        log(f"  {layout}: built in {data[layout].build_s:.1f} s ({n_notes / data[layout].build_s:,.0f} notes/s), "
            f"DB {size_mb[layout]():,.0f} MB")
    grouped = data["grouped"]

    rng = np.random.default_rng(seed + 5)
    people = rng.integers(0, n_people, size=queries)
    query_vecs = unit_rows(rng, queries, TEXT_DIM)
    probe_cos = rng.uniform(0.97, 0.995, size=queries)
    probes = np.stack([noisy_copy(rng, grouped.templates[j], c) for j, c in zip(people, probe_cos)])
    filters = {"": None, **{f"_f{s}": s for s in SELECTIVITIES}}  # suffix -> bucket threshold (= percent)
    names = [f"{layout}{suffix}" for layout in ("ungrouped", "grouped") for suffix in filters]
    layout_of = {name: name.split("_")[0] for name in names}
    below_of = {name: filters[name[len(layout_of[name]):]] for name in names}
    largest = max(int(d.counts.max()) for d in data.values())
    mems = {layout: BioMemory(location[layout], text_model=encoder, llm="offline",
                              hnsw_threshold=max(20_000, largest + 1) if pg is None else None) for layout in data}
    truth = {name: [data[layout_of[name]].exact_top(int(j), q, K, below_of[name]) for j, q in zip(people, query_vecs)]
             for name in names}
    readable = {layout: {int(j): d.readable_ids(int(j)) for j in set(people.tolist())} for layout, d in data.items()}

    cold: dict[str, list[float]] = {layout: [] for layout in mems}
    for layout, mem in mems.items():  # one search per distinct person: loads their partitions (and groups')
        for j in dict.fromkeys(people.tolist()):
            t0 = time.perf_counter_ns()
            mem.search(unit_rows(rng, 1, TEXT_DIM)[0], probe=Probe(noisy_copy(rng, grouped.templates[j], 0.98),
                                                                    MODALITY), k=K)
            cold[layout].append((time.perf_counter_ns() - t0) / 1e6)
        log(f"  {layout}: warmed {len(cold[layout])} people, cold p50 {np.median(cold[layout]):.2f} ms")

    times: dict[str, list[float]] = {n: [] for n in names}
    recall: dict[str, list[float]] = {n: [] for n in names}
    counts_ok = {n: 0 for n in names}
    order_ok = {n: 0 for n in names}
    gate_ok = {n: 0 for n in names}
    wrong = {n: 0 for n in names}
    matched: dict[str, list[int]] = {n: [] for n in names}
    gc.collect()
    for i in range(queries):
        j = int(people[i])
        q, p = query_vecs[i], probes[i]
        turn = i % len(names)
        for name in names[turn:] + names[:turn]:
            layout = layout_of[name]
            mem = mems[layout]
            where = household_filter(below_of[name])
            t0 = time.perf_counter_ns()
            result = mem.search(q, probe=Probe(p, MODALITY), k=K, filters=where)
            times[name].append((time.perf_counter_ns() - t0) / 1e6)
            ids = [n.id for n, _ in result.notes]
            top, n_match = truth[name][i]
            matched[name].append(n_match)
            recall[name].append(len(set(top) & set(ids)) / len(top) if top else float(not ids))
            counts_ok[name] += len(ids) == min(K, n_match)
            order_ok[name] += ids == top
            gate_ok[name] += result.gate.identity == int(data[layout].person_ids[j])
            wrong[name] += sum(x not in readable[layout][j] for x in ids)
            if below_of[name] is not None:
                wrong[name] += sum(n.metadata.get("bucket", BUCKETS) >= below_of[name] for n, _ in result.notes)

    modes: dict[str, Any] = {}
    for name in names:
        modes[name] = {**percentiles(times[name]), "recall_at_10": float(np.mean(recall[name])),
                       "recall_at_10_min": float(np.min(recall[name])), "k_when_k_match": counts_ok[name] / queries,
                       "same_order_as_exact": order_ok[name] / queries, "gate_correct": gate_ok[name] / queries,
                       "notes_not_readable_or_not_matching": wrong[name],
                       "filter": household_filter(below_of[name]),
                       "selectivity": None if below_of[name] is None else below_of[name] / BUCKETS,
                       "matching_notes_mean": float(np.mean(matched[name]))}
    base = modes["ungrouped"]["p50_ms"]
    for name in names:
        modes[name]["ratio_p50_vs_ungrouped"] = modes[name]["p50_ms"] / base
        modes[name]["ratio_p95_vs_ungrouped"] = modes[name]["p95_ms"] / modes["ungrouped"]["p95_ms"]

    breakdown = household_breakdown(mems, data, names, layout_of, below_of, people, query_vecs, probes)
    profiles = {}
    for name in ("grouped", "grouped_f10") if profile else ():
        profiles[name] = profiled(mems[layout_of[name]], query_vecs[:queries], probes[:queries],
                                  filters=household_filter(below_of[name]))
        print(f"\n### cProfile, {name}, {n_notes:,} notes / {n_people:,} people, {queries} searches\n\n"
              f"```\n{profiles[name]}```\n", flush=True)
    for mem in mems.values():
        mem.close()
    own = int(grouped.counts[:n_people].mean())
    shared = int(grouped.counts[n_people:].mean()) if grouped.n_groups else 0
    result = {
        "load_average_1m": {"start": load_start, "end": os.getloadavg()[0]}, "store": backend,
        "notes": n_notes, "people": n_people, "household_size": size, "households": grouped.n_groups,
        "group_fraction": group_fraction, "hidden_fraction": hidden_fraction, "queries": queries,
        "group_notes": int(grouped.counts[n_people:].sum()),
        "hidden_notes": int((grouped.hidden >= 0).sum()),
        "notes_per_owner": {"ungrouped_person": int(data["ungrouped"].counts.mean()), "grouped_person": own,
                            "household": shared},
        "readable_per_person_mean": {layout: float(np.mean([len(d.readable(int(j))) for j in people]))
                                     for layout, d in data.items()},
        "build_s": {layout: d.build_s for layout, d in data.items()},
        "db_mb": {layout: size_mb[layout]() for layout in data},
        "cold_first_search": {layout: percentiles(v) for layout, v in cold.items()},
        "modes": modes, "breakdown": breakdown, "peak_rss_mb": peak_rss_mb(),
    }
    if profiles:
        result["profiles"] = profiles
    log("  " + ", ".join(f"{name} p50 {modes[name]['p50_ms']:.3f} ms ({modes[name]['ratio_p50_vs_ungrouped']:.2f}x) "
                         f"recall {modes[name]['recall_at_10']:.3f}" for name in names))
    del data, mems
    gc.collect()
    if keep:
        log(f"  kept {rung_dir}")
    else:
        shutil.rmtree(rung_dir, ignore_errors=True)
        for layout in location if pg is not None else ():
            pg.drop(f"bench_households_{layout}_{n_notes}_{n_people}")
    return result


def household_breakdown(mems: dict[str, BioMemory], data: dict[str, HouseholdStore], names: list[str],
                        layout_of: dict[str, str], below_of: dict[str, int | None], people: np.ndarray,
                        query_vecs: np.ndarray, probes: np.ndarray) -> dict[str, Any]:
    """Where a search's time goes, each part timed on its own over the same queries, back to back: the gate
    (identify), the reach (group ids + hidden_notes), search_as (reach, rank in each partition, filter, fetch),
    and the store statements a grouped or filtered search adds, one by one."""
    from biomem.stores.filters import parse_filters

    def timed(call: Any) -> dict[str, float]:
        samples = []
        for i in range(len(people)):
            t0 = time.perf_counter_ns()
            call(i)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
        return percentiles(samples)

    out: dict[str, Any] = {}
    gates = {layout: [mem.identify(Probe(p, MODALITY)) for p in probes] for layout, mem in mems.items()}
    for layout, mem in mems.items():
        out[f"{layout}_identify"] = timed(lambda i: mem.identify(Probe(probes[i], MODALITY)))
        out[f"{layout}_reach"] = timed(lambda i: mem.reach(gates[layout][i].admitted))
    for name in names:
        mem, where = mems[layout_of[name]], household_filter(below_of[name])
        out[f"{name}_search_as"] = timed(lambda i: mem.search_as(gates[layout_of[name]][i], query_vecs[i], k=K,
                                                                 filters=where))
    mem, d = mems["grouped"], data["grouped"]
    store = mem.store
    person = [int(d.person_ids[int(j)]) for j in people]
    group = [int(d.group_ids[d.household[int(j)]]) if d.household[int(j)] >= 0 else None for j in people]
    out["sql_groups_of"] = timed(lambda i: store.groups_of(person[i]))
    out["sql_hidden_notes"] = timed(lambda i: store.hidden_notes([person[i]], [g for g in [group[i]] if g]))
    out["sql_generation"] = timed(lambda i: store.generation(person[i]))
    out["sql_note_total"] = timed(lambda i: store.note_total())
    out["partition_size_own"] = timed(lambda i: mem.partitions.size(person[i]))
    for below in SELECTIVITIES:
        tree = parse_filters(household_filter(below))
        out[f"sql_note_ids_where_f{below}_own"] = timed(lambda i: store.note_ids_where(person[i], tree))
        out[f"sql_note_ids_where_f{below}_group"] = timed(lambda i: store.note_ids_where(group[i], tree)
                                                           if group[i] else None)
    out["get_notes_10_own"] = timed(lambda i: store.get_notes(person[i], d.note_ids[d.owner_rows(int(people[i]))][:K]))
    out["get_notes_5_own_and_5_group"] = timed(lambda i: (
        store.get_notes(person[i], d.note_ids[d.owner_rows(int(people[i]))][:K // 2]),
        store.get_notes(group[i], d.note_ids[d.owner_rows(d.n_people + int(d.household[int(people[i])]))][:K // 2])
        if group[i] else None))
    # one partition's rank, without and with what a grouped or filtered search adds to it
    from biomem.stores.base import Within
    from biomem.stores.blas import one_thread

    excluded = [frozenset(mem.reach([person[i]])[1]) for i in range(len(people))]
    tree = parse_filters(household_filter(10))
    out["rank_own_partition"] = timed(lambda i: mem.partitions.search(person[i], query_vecs[i], K))
    out["rank_group_partition"] = timed(lambda i: mem.partitions.search(group[i], query_vecs[i], K)
                                        if group[i] else None)
    out["rank_group_partition_less_hidden"] = timed(
        lambda i: mem.partitions.search(group[i], query_vecs[i], K, Within(excluded=excluded[i]))
        if group[i] else None)
    out["rank_own_partition_f10"] = timed(lambda i: mem.partitions.search(person[i], query_vecs[i], K,
                                                                          Within(where=tree)))
    def blas_limit(i: int) -> None:
        with one_thread():
            pass

    out["one_thread_blas_limit"] = timed(blas_limit)
    if isinstance(store, Store):  # what the filter's statement costs, by its parts (SQLite)
        from biomem.stores.filters import compile_filter

        expression, values = compile_filter(tree, "sqlite")
        db = store.db
        both = [[person[i], group[i] or person[i]] for i in range(len(people))]

        def sql(statement: str, extra: list[Any]) -> Any:
            return lambda i: db.execute(statement, [*both[i], *extra]).fetchall()

        out["sql_f10_one_statement_own_and_group"] = timed(sql(
            f"SELECT id FROM notes WHERE owner_id IN (?, ?) AND ({expression})", values))
        out["sql_f10_json_extract_own_and_group"] = timed(sql(
            "SELECT id FROM notes WHERE owner_id IN (?, ?) AND json_extract(metadata, '$.bucket') < ?", [10]))
        out["sql_metadata_column_own_and_group"] = timed(sql(
            "SELECT id, metadata FROM notes WHERE owner_id IN (?, ?)", []))
        out["sql_ids_own_and_group"] = timed(sql("SELECT id FROM notes WHERE owner_id IN (?, ?)", []))
        out["sql_group_ids_only"] = timed(lambda i: db.execute(
            "SELECT group_id FROM members WHERE identity_id = ?", [person[i]]).fetchall())
    return out


# ---- report -----------------------------------------------------------------------------------

def fmt_ms(entry: dict[str, Any]) -> str:
    return f"{entry['p50_ms']:.3f} / {entry['p95_ms']:.3f}"


def report(results: dict[str, Any]) -> str:
    lines = ["## Gated search (k=10), latency p50 / p95 in ms", "",
             ("| notes | identities | notes/owner | build s (notes/s) | DB MB | gated exact | gated hnsw "
              "| baseline (paper) | speed-up exact / hnsw | gated exact back-to-back "
              "| recall@10 exact / hnsw / baseline "
              "| cold first search exact / hnsw | engine RSS +MB exact / hnsw | load |"),
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results["retrieval"]:
        m = r["modes"]
        lines.append(
            f"| {r['notes']:,} | {r['identities']:,} | {r['notes_per_owner']:,} "
            f"| {r['build_s']:.1f} ({r['build_notes_per_s']:,.0f}) | {r['db_mb']:,.0f} "
            f"| {fmt_ms(m['exact'])} | {fmt_ms(m['hnsw'])} | {fmt_ms(m['baseline'])} "
            f"| {r['speedup_exact']:.3g}x / {r['speedup_hnsw']:.3g}x "
            f"| {fmt_ms(m['exact_back_to_back']) if 'exact_back_to_back' in m else 'n/a'} "
            f"| {m['exact']['recall_at_10']:.3f} / {m['hnsw']['recall_at_10']:.3f} / "
            f"{m['baseline']['recall_at_10']:.3f} "
            f"| {m['exact']['cold_first_search']['p50_ms']:.2f} / {m['hnsw']['cold_first_search']['p50_ms']:.2f} "
            f"| {m['exact']['rss_delta_mb']:.0f} / {m['hnsw']['rss_delta_mb']:.0f} "
            f"| {r['load_average_1m']['start']:.1f} |")
    pg_rungs = [r for r in results["retrieval"] if "postgresql" in r]
    if pg_rungs:
        lines += ["", "## PostgreSQL + pgvector against SQLite, same notes, same run "
                      "(p50 / p95 ms; ratio PostgreSQL / SQLite)",
                  "", ("| notes / identities | gated exact SQLite | gated exact PostgreSQL | ratio p50 / p95 "
                       "| back-to-back p50 SQLite / PostgreSQL (ratio) | recall@10 exact SQLite / PostgreSQL "
                       "| gated hnsw SQLite | gated hnsw PostgreSQL | recall@10 hnsw SQLite / PostgreSQL "
                       "| build s SQLite / PostgreSQL (ratio) "
                       "| PostgreSQL build: identities / COPY / HNSW index / VACUUM ANALYZE s "
                       "| DB MB SQLite / PostgreSQL |"),
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in pg_rungs:
            m, pgr = r["modes"], r["postgresql"]
            b, ratio = pgr["build"], pgr["ratio"]
            lines.append(
                f"| {r['notes']:,} / {r['identities']:,} | {fmt_ms(m['exact'])} | {fmt_ms(m['pg_exact'])} "
                f"| {ratio['exact_p50']:.2f}x / {ratio['exact_p95']:.2f}x "
                f"| {m['exact_back_to_back']['p50_ms']:.3f} / {m['pg_exact_back_to_back']['p50_ms']:.3f} "
                f"({ratio['exact_back_to_back_p50']:.2f}x) "
                f"| {m['exact']['recall_at_10']:.3f} / {m['pg_exact']['recall_at_10']:.3f} "
                f"| {fmt_ms(m['hnsw'])} | {fmt_ms(m['pg_hnsw'])} "
                f"| {m['hnsw']['recall_at_10']:.3f} / {m['pg_hnsw']['recall_at_10']:.3f} "
                f"| {r['build_s']:.1f} / {b['build_s']:.1f} ({ratio['build_s']:.2f}x) "
                f"| {b['identities_s']:.1f} / {b['copy_s']:.1f} / {b['hnsw_index_s']:.1f} "
                f"/ {b['vacuum_analyze_s']:.1f} "
                f"| {r['db_mb']:,.0f} / {pgr['db_mb']:,.0f} |")
        for r in pg_rungs:
            c = r["postgresql"].get("concurrency")
            if c:
                lines += ["", f"## Two engine processes on one PostgreSQL database ({r['notes']:,} notes / "
                          f"{r['identities']:,} identities), each searching while the other adds", "",
                          "| search p50 / p95 ms, alone | search p50 / p95 ms, other process adding | searches "
                          "| adds/s (BioMemory.add, offline LLM) "
                          "| adds visible to the other process (by id / by search) "
                          "| wrong-owner notes | wrong gate |", "|---:|---:|---:|---:|---:|---:|---:|",
                          f"| {fmt_ms(c['search_quiet'])} | {fmt_ms(c['search_while_other_adds'])} "
                          f"| {c['search_while_other_adds']['n']} | {c['adds_per_s']:.1f} "
                          f"| {sum(x['seen_by_id'] for x in c['checks'].values())} / "
                          f"{sum(x['seen_by_search'] for x in c['checks'].values())} of {2 * c['adds_per_process']} "
                          f"| {c['wrong_owner_notes']} | {c['wrong_gate']} |"]
    for h in results.get("households") or []:
        lines += ["", (f"## Households and filters, {h.get('store', 'sqlite')}, {h['notes']:,} notes / "
                       f"{h['people']:,} people "
                       f"({h['households']:,} households of {h['household_size']}, {h['group_notes']:,} notes in "
                       f"groups, {h['hidden_notes']:,} of them hidden from one member; load "
                       f"{h['load_average_1m']['start']:.1f})"), "",
                  ("| search | notes the person may read (mean) | filter | notes matching (mean) | p50 / p95 ms "
                   "| p50 / ungrouped p50 | recall@10 (min) | K back when K match | same order as exact "
                   "| gate right | wrong notes |"),
                  "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, m in h["modes"].items():
            layout = name.split("_")[0]
            selectivity = "none" if m["selectivity"] is None else f"bucket < {round(100 * m['selectivity'])} " \
                f"({m['selectivity']:.0%})"
            lines.append(f"| {name} | {h['readable_per_person_mean'][layout]:.0f} | {selectivity} "
                         f"| {m['matching_notes_mean']:.1f} | {fmt_ms(m)} | {m['ratio_p50_vs_ungrouped']:.2f}x "
                         f"| {m['recall_at_10']:.3f} ({m['recall_at_10_min']:.2f}) | {m['k_when_k_match']:.3f} "
                         f"| {m['same_order_as_exact']:.3f} | {m['gate_correct']:.3f} "
                         f"| {m['notes_not_readable_or_not_matching']} |")
        b = h["breakdown"]
        lines += ["", "Where the time goes (each part timed alone over the same queries, back to back; p50 / p95 ms):",
                  "", "| part | p50 / p95 ms |", "|---|---:|"]
        lines += [f"| {part} | {fmt_ms(v)} |" for part, v in b.items()]
        lines += ["", f"Build: ungrouped {h['build_s']['ungrouped']:.1f} s, grouped {h['build_s']['grouped']:.1f} s; "
                      f"DB {h['db_mb']['ungrouped']:,.0f} / {h['db_mb']['grouped']:,.0f} MB; cold first search p50 "
                      f"{h['cold_first_search']['ungrouped']['p50_ms']:.2f} / "
                      f"{h['cold_first_search']['grouped']['p50_ms']:.2f} ms."]
    ing = results.get("ingest")
    if ing:
        nps = ing["notes_per_s"]
        ratios = {"engine": 1.0, "bare_embedded": ing["ratio_engine_vs_bare_embedded"],
                  "bare_raw": ing["ratio_engine_vs_bare_raw"]}
        title = (f"## Offline ingest, {ing['notes']} LoCoMo turns (median of {ing['rounds']} round(s), "
                 f"load {ing['load_average_1m']['start']:.1f})")
        lines += ["", title, "",
                  "| path | seconds | notes/s | engine / this |", "|---|---:|---:|---:|"]
        for key, label in (("engine", "BioMemory.add_many (offline LLM)"),
                           ("bare_embedded", "TextEncoder.encode of the strings the engine embeds"),
                           ("bare_raw", "TextEncoder.encode of the raw turns")):
            lines.append(f"| {label} | {ing['median_s'][key]:.2f} | {nps[key]:.1f} | {ratios[key]:.3f} |")
    lines += ["", "## Targets", "", "| target | measured | pass |", "|---|---|:---:|"]
    for t in results["targets"]:
        verdict = "n/a (ladder below 1M)" if t["pass"] is None else "PASS" if t["pass"] else "FAIL"
        lines.append(f"| {t['target']} | {t['measured']} | {verdict} |")
    return "\n".join(lines)


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    rungs = results["retrieval"]
    if rungs:
        top = max(rungs, key=lambda r: (r["notes"], r["identities"]))
        scale = f"{top['notes']:,} notes / {top['identities']:,} ids"
        at_scale = top["notes"] >= 1_000_000  # both targets are stated at 1M notes
        p50 = top["modes"]["exact"]["p50_ms"]
        out.append({"target": f"gated p50 <= {TARGET_P50_MS:g} ms at 1M notes",
                    "measured": f"{p50:.3f} ms at {scale}",
                    "pass": p50 <= TARGET_P50_MS if at_scale else None})
        out.append({"target": f"gated >= {TARGET_SPEEDUP:g}x faster than the paper baseline (p50) at 1M",
                    "measured": f"{top['speedup_exact']:.1f}x at {scale}",
                    "pass": top["speedup_exact"] >= TARGET_SPEEDUP if at_scale else None})
        worst = min(r["modes"]["exact"]["recall_at_10"] for r in rungs)
        out.append({"target": "recall@10 = 1.0, exact partitions (every rung)", "measured": f"{worst:.3f}",
                    "pass": worst >= TARGET_RECALL})
        worst_h = min(rungs, key=lambda r: r["modes"]["hnsw"]["recall_at_10"])
        out.append({"target": "recall@10 = 1.0, hnsw forced (every rung)",
                    "measured": f"{worst_h['modes']['hnsw']['recall_at_10']:.4f} (worst: "
                                f"{worst_h['notes_per_owner']:,} notes/owner)",
                    "pass": worst_h["modes"]["hnsw"]["recall_at_10"] >= TARGET_RECALL})
        gate = min(min(v["gate_correct"] for v in r["modes"].values() if "gate_correct" in v) for r in rungs)
        out.append({"target": "gate admits the probe's owner (every query)", "measured": f"{gate:.3f}",
                    "pass": gate == 1.0})
    pg_rungs = [r for r in rungs if "postgresql" in r]
    if pg_rungs:
        top = max(pg_rungs, key=lambda r: (r["notes"], r["identities"]))
        at_scale = top["notes"] >= 1_000_000
        ratio = top["postgresql"]["ratio"]["exact_p50"]
        out.append({"target": f"PostgreSQL gated p50 within {TARGET_PG_RATIO:g}x of SQLite's at 1M notes",
                    "measured": f"{ratio:.2f}x ({top['modes']['pg_exact']['p50_ms']:.3f} vs "
                                f"{top['modes']['exact']['p50_ms']:.3f} ms) at {top['notes']:,} notes / "
                                f"{top['identities']:,} ids",
                    "pass": ratio <= TARGET_PG_RATIO if at_scale else None})
        worst = min(r["modes"]["pg_exact"]["recall_at_10"] for r in pg_rungs)
        out.append({"target": "PostgreSQL recall@10 = 1.0, exact partitions (every rung)", "measured": f"{worst:.3f}",
                    "pass": worst >= TARGET_RECALL})
        for r in pg_rungs:
            c = r["postgresql"].get("concurrency")
            if c:
                out.append({"target": "two processes: every add visible to the other, no other owner's note",
                            "measured": f"visible {c['all_adds_visible_to_other']}, found by search "
                                        f"{c['all_adds_found_by_other_search']}, wrong-owner notes "
                                        f"{c['wrong_owner_notes']}, wrong gate {c['wrong_gate']}",
                            "pass": c["all_adds_visible_to_other"] and c["wrong_owner_notes"] == 0
                            and c["wrong_gate"] == 0})
    households = results.get("households") or []
    for backend in dict.fromkeys(h.get("store", "sqlite") for h in households):
        top = max((h for h in households if h.get("store", "sqlite") == backend),
                  key=lambda h: (h["notes"], h["people"]))
        at_scale = top["notes"] >= 1_000_000
        scale = f"{top['notes']:,} notes / {top['people']:,} people"
        for name, m in top["modes"].items():
            if name == "ungrouped":
                continue
            out.append({"target": f"{backend}: {name} p50 within {TARGET_HOUSEHOLD_RATIO:g}x of the ungrouped p50 "
                                  "at 1M notes",
                        "measured": f"{m['ratio_p50_vs_ungrouped']:.2f}x ({m['p50_ms']:.3f} vs "
                                    f"{top['modes']['ungrouped']['p50_ms']:.3f} ms) at {scale}",
                        "pass": m["ratio_p50_vs_ungrouped"] <= TARGET_HOUSEHOLD_RATIO if at_scale else None})
    if households:
        worst = min((m["recall_at_10"], name) for h in households for name, m in h["modes"].items())
        out.append({"target": "households and filters: recall@10 = 1.0 (every mode, every rung)",
                    "measured": f"{worst[0]:.3f} (worst: {worst[1]})", "pass": worst[0] >= TARGET_RECALL})
        wrong = sum(m["notes_not_readable_or_not_matching"] for h in households for m in h["modes"].values())
        short = min(m["k_when_k_match"] for h in households for m in h["modes"].values())
        out.append({"target": "households and filters: no note the person may not read or the filter excludes; "
                              "K back when K match",
                    "measured": f"{wrong} wrong notes; K when K match in {short:.3f} of searches",
                    "pass": wrong == 0 and short == 1.0})
    ing = results.get("ingest")
    if ing:
        ratio = ing["ratio_engine_vs_bare_embedded"]
        out.append({"target": f"ingest engine / bare encode of embedded texts <= {TARGET_INGEST_RATIO}",
                    "measured": f"{ratio:.3f} ({ing['notes_per_s']['engine']:.1f} vs "
                                f"{ing['notes_per_s']['bare_embedded']:.1f} notes/s)",
                    "pass": ratio <= TARGET_INGEST_RATIO})
    return out


def parse_ladder(spec: str) -> list[tuple[int, int]]:
    rungs = []
    for part in spec.split(","):
        notes, _, ids = part.strip().partition(":")
        n, u = int(float(notes)), int(float(ids))
        if n < u or u < 1:
            raise SystemExit(f"bad rung {part!r}: NOTES:IDENTITIES with NOTES >= IDENTITIES >= 1")
        rungs.append((n, u))
    return rungs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help=f"small ladder ({QUICK_LADDER}), 100 queries, 128 ingest notes: < 1 minute")
    ap.add_argument("--ladder", help=f"comma list of NOTES:IDENTITIES (default {FULL_LADDER})")
    ap.add_argument("--queries", type=int, help="timed searches per rung (default 200, quick 100)")
    ap.add_argument("--ingest-conversations", type=int, default=2, help="LoCoMo conversations to ingest")
    ap.add_argument("--ingest-notes", type=int, help="ingest only the first N turns (quick: 128)")
    ap.add_argument("--ingest-rounds", type=int, help="timed ingest rounds (default 3)")
    ap.add_argument("--skip-search", action="store_true", help="run only the ingest part")
    ap.add_argument("--skip-ingest", action="store_true", help="run only the search part")
    ap.add_argument("--hnsw-ef", type=int, default=None,
                    help="ef_search of the hnsw partitions (default: the engine's)")
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="limit numpy's BLAS threads for the whole run (threadpoolctl); default: untouched")
    ap.add_argument("--profile", action="store_true", help="cProfile the gated searches (exact and hnsw) of each rung")
    ap.add_argument("--text-model", default=None, help="text encoder (default all-MiniLM-L6-v2)")
    ap.add_argument("--workdir", type=Path, default=None, help="where temporary stores go (default: $TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the synthetic stores")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite",
                    help="postgresql: also build every rung in an embedded PostgreSQL 18 + pgvector and search "
                         "it in the same run, then two engine processes on the largest rung's database "
                         "(JSON: results/retrieval_postgresql.json; the ingest part is skipped unless --ingest)")
    ap.add_argument("--ingest", action="store_true", help="with --store postgresql: run the ingest part too")
    ap.add_argument("--concurrency-adds", type=int, default=100,
                    help="adds per process in the two-process PostgreSQL part (0: skip it)")
    ap.add_argument("--households", default=None,
                    help=f"household and filter rungs, comma list of NOTES:PEOPLE (default {FULL_HOUSEHOLDS}, "
                         f"quick {QUICK_HOUSEHOLDS})")
    ap.add_argument("--households-pg", default=None,
                    help="with --store postgresql: household rungs on PostgreSQL too, NOTES:PEOPLE list "
                         "(default 100000:1000: built through the store's own calls, row by row)")
    ap.add_argument("--skip-households", action="store_true", help="skip the household and filter rungs")
    ap.add_argument("--household-size", type=int, default=HOUSEHOLD_SIZE, help="members per household (4)")
    ap.add_argument("--group-fraction", type=float, default=GROUP_FRACTION,
                    help="fraction of the notes owned by households (0.2)")
    ap.add_argument("--hidden-fraction", type=float, default=HIDDEN_FRACTION,
                    help="fraction of the households' notes hidden from one member (0.05)")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON path (default results/retrieval.json, or results/retrieval_postgresql.json)")
    args = ap.parse_args(argv)
    postgres = args.store == "postgresql"
    if args.out is None:
        args.out = ROOT / "benchmarks" / "results" / ("retrieval_postgresql.json" if postgres else "retrieval.json")
    if postgres and not args.ingest:
        args.skip_ingest = True

    ladder = parse_ladder(args.ladder or (QUICK_LADDER if args.quick else FULL_LADDER))
    household_ladder = [] if args.skip_households else \
        parse_ladder(args.households or (QUICK_HOUSEHOLDS if args.quick else FULL_HOUSEHOLDS))
    household_pg = [] if args.skip_households or not postgres else \
        parse_ladder(args.households_pg or (QUICK_HOUSEHOLDS if args.quick else PG_HOUSEHOLDS))
    if any(u < args.household_size for _, u in household_ladder + household_pg) or not 0 <= args.group_fraction < 1 \
            or not 0 <= args.hidden_fraction <= 1:
        raise SystemExit("households: PEOPLE >= --household-size, 0 <= --group-fraction < 1, "
                         "0 <= --hidden-fraction <= 1")
    queries = args.queries or (100 if args.quick else 200)
    ingest_limit = args.ingest_notes if args.ingest_notes is not None else (128 if args.quick else None)
    rounds = args.ingest_rounds or 3
    workdir = args.workdir or Path(tempfile.gettempdir())
    workdir.mkdir(parents=True, exist_ok=True)

    if args.blas_threads is not None:
        from threadpoolctl import threadpool_limits
        threadpool_limits(limits=args.blas_threads, user_api="blas")  # process-wide, kept
    t_start = time.perf_counter()
    t0 = time.perf_counter()
    modalities.info(MODALITY)  # import the encoder's module now, not inside the first search
    encoder = TextEncoder(args.text_model)
    load_s = time.perf_counter() - t0
    log(f"text encoder {encoder.name} loaded in {load_s:.1f} s")
    results: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine_info_here(),
        "engine": str(Path(sys.modules["biomem"].__file__).parent),
        "config": {"k": K, "queries": queries, "ladder": ladder, "text_model": encoder.name,
                   "text_dim": TEXT_DIM, "bio_dim": BIO_DIM, "modality": MODALITY, "seed": args.seed,
                   "quick": args.quick, "text_encoder_load_s": load_s, "blas_threads": args.blas_threads,
                   "households": {"ladder": household_ladder, "ladder_postgresql": household_pg,
                                  "household_size": args.household_size,
                                  "group_fraction": args.group_fraction, "hidden_fraction": args.hidden_fraction,
                                  "selectivities_percent": list(SELECTIVITIES), "buckets": BUCKETS}},
        "retrieval": [], "households": [], "ingest": None,
    }
    server = None
    if postgres and (not args.skip_search or household_pg):
        from pg_retrieval import Server
        server = Server(Path(tempfile.mkdtemp(prefix="biomem-bench-pg-", dir=workdir)))
        results["config"]["store"] = "postgresql"
        results["config"]["postgresql"] = {"version": server.version, "server_settings": server.settings}
        log(f"PostgreSQL started in {server.folder}: {server.version.split(' on ')[0]}, {server.settings}")
    top_rung = max(ladder)
    try:
        if not args.skip_search:
            for n_notes, n_ids in ladder:
                results["retrieval"].append(run_rung(
                    n_notes, n_ids, encoder=encoder, queries=queries, seed=args.seed, workdir=workdir,
                    keep=args.keep, profile=args.profile, hnsw_ef=args.hnsw_ef, pg=server,
                    concurrency_adds=args.concurrency_adds if (n_notes, n_ids) == top_rung else 0))
                if server is not None and "pgvector" not in results["config"]["postgresql"]:
                    build = results["retrieval"][-1]["postgresql"]["build"]
                    results["config"]["postgresql"]["pgvector"] = build.get("pgvector")
        for backend_server, rungs in ((None, household_ladder), (server, household_pg)):
            for n_notes, n_people in rungs:
                results["households"].append(run_household_rung(
                    n_notes, n_people, encoder=encoder, queries=queries, seed=args.seed, workdir=workdir,
                    keep=args.keep, profile=args.profile, size=args.household_size,
                    group_fraction=args.group_fraction, hidden_fraction=args.hidden_fraction, pg=backend_server))
    finally:
        if server is not None:
            server.close()
    if not args.skip_ingest:
        results["ingest"] = run_ingest(encoder, conversations=args.ingest_conversations, limit=ingest_limit,
                                       rounds=rounds, workdir=workdir, seed=args.seed)
    results["targets"] = targets(results)
    results["wall_s"] = time.perf_counter() - t_start
    table = report(results)
    print(table)
    print(f"\nwall time {results['wall_s']:.0f} s; JSON: {args.out}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=2, default=float))
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
