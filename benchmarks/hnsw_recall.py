"""hnswlib recall@10 on real all-MiniLM-L6-v2 vectors: LoCoMo turns as notes, its questions as queries.

    python -m benchmarks.hnsw_recall [--data ../shared/data/locomo/locomo10.json] [--queries 400]

retrieval.py measures hnsw on uniformly random vectors, the worst case for a graph index;
this measures it on the distribution the engine really indexes. All turns form one
partition; the reference is the exact top-10 by cosine. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import hnswlib
import numpy as np

from benchmarks.common import LOCOMO, RESULTS, write_result
from biomem.notes.agent import embedding_text
from biomem.notes.llm import OfflineLLM
from biomem.notes.textenc import TextEncoder

SETTINGS = ((16, 200, 128), (32, 400, 256))  # (M, ef_construction, ef_search); the last is the engine's


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=LOCOMO)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--out", type=Path, default=RESULTS / "hnsw_recall.json")
    args = parser.parse_args()

    data = json.loads(args.data.read_text())
    turns = [f"{t['speaker']}: {t['text']}" for c in data for key, session in c["conversation"].items()
             if key.startswith("session_") and isinstance(session, list) for t in session]
    questions = [q["question"] for c in data for q in c["qa"] if q["category"] in (1, 2, 4)][:args.queries]
    text = TextEncoder()
    llm = OfflineLLM(text)
    started = time.perf_counter()
    metas = [llm.analyze(t) for t in turns]
    notes = text.encode([embedding_text(t, m.context, m.keywords, m.tags) for t, m in zip(turns, metas)])
    queries = text.encode(questions)
    encode_s = time.perf_counter() - started
    exact = np.argsort(-(queries @ notes.T), axis=1)[:, :10]
    rows = []
    for m, ef_construction, ef in SETTINGS:
        index = hnswlib.Index(space="ip", dim=notes.shape[1])
        index.init_index(len(notes), ef_construction=ef_construction, M=m)
        t0 = time.perf_counter()
        index.add_items(notes, np.arange(len(notes)))
        build_s = time.perf_counter() - t0
        index.set_ef(ef)
        t0 = time.perf_counter()
        labels, _ = index.knn_query(queries, k=10)
        query_ms = 1000 * (time.perf_counter() - t0) / len(queries)
        recall = [len(set(a) & set(b)) / 10 for a, b in zip(labels, exact)]
        rows.append({"M": m, "ef_construction": ef_construction, "ef_search": ef, "notes": len(notes),
                     "queries": len(queries), "recall_at_10": float(np.mean(recall)),
                     "recall_min": float(np.min(recall)), "build_s": build_s, "query_ms": query_ms})
    print("| M | ef_construction | ef_search | notes | queries | recall@10 (min) | build s | ms/query |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['M']} | {r['ef_construction']} | {r['ef_search']} | {r['notes']} | {r['queries']} "
              f"| {r['recall_at_10']:.4f} ({r['recall_min']:.1f}) | {r['build_s']:.2f} | {r['query_ms']:.3f} |")
    out = write_result(args.out, {"encode_s": encode_s, "rows": rows})
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
