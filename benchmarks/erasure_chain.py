"""What deleting a note costs when its evolution is taken back down the chain, against the first step alone.

    python -m benchmarks.erasure_chain [--notes 2000] [--out benchmarks/results/erasure_chain.json]

One owner's partition of `--notes` notes, each added with an LLM that evolves every time (it strengthens the new
note's tags and rewrites its 5 neighbours' contexts): the worst case, in which almost every later note read text
derived from an early one. For a note early, in the middle and late in the partition it times, on a copy of the
same store each: the first step only (MemoryAgent.undo_evolution: what the note's own evolution wrote) and the
whole chain (MemoryAgent.take_back), with the notes each undoes. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, write_result
from biomem import BioMemory, Probe
from biomem.notes.llm import Evolution, OfflineLLM
from biomem.notes.textenc import TextEncoder

MODALITY = "face-bench"  # a precomputed probe: this measures the notes, not a camera
WORDS = ["garden", "bike", "river", "dog", "kitchen", "work", "train", "music", "book", "coffee"]


class Evolver(OfflineLLM):
    """The offline analysis, and an evolution every time: strengthened tags, every neighbour's context rewritten."""

    def evolve(self, draft, neighbours):
        return Evolution(should_evolve=True, actions=["strengthen", "update_neighbor"],
                         suggested_connections=[n.id for n, _ in neighbours], tags_to_update=[*draft.tags, "linked"],
                         new_context_neighborhood=[f"{n.context[:60]} + {draft.content[:20]}" for n, _ in neighbours],
                         new_tags_neighborhood=[list(n.tags) for n, _ in neighbours])


def open_memory(path: Path, text: TextEncoder) -> BioMemory:
    mem = BioMemory(path, encoder=MODALITY, text_model=text, llm=Evolver(text), limits="off")
    mem.set_threshold(0.5, MODALITY)
    return mem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=RESULTS / "erasure_chain.json")
    args = parser.parse_args()
    text = TextEncoder()
    person = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder) / "base.db"
        mem = open_memory(base, text)
        owner = mem.enroll("ana", [Probe(person / np.linalg.norm(person), MODALITY)]).id
        texts = [f"Note {i}: {WORDS[i % 10]} and {WORDS[(i * 7) % 10]} on day {i}" for i in range(args.notes)]
        started = time.perf_counter()
        mem.add_many(texts, identity=owner)
        ingest = time.perf_counter() - started
        ids = [n.id for n in mem.store.all_notes(owner)]
        mem.close()
        for position in (10, args.notes // 2, args.notes - 10):
            row = {"position": position}
            for how in ("first_step", "chain"):
                copy = Path(folder) / f"{how}-{position}.db"
                shutil.copy(base, copy)
                mem = open_memory(copy, text)
                started = time.perf_counter()
                undone = mem.agent.undo_evolution(owner, [ids[position]]) if how == "first_step" \
                    else mem.agent.take_back(owner, ids[position])
                row[how] = {"seconds": time.perf_counter() - started, "notes": len(undone)}
                mem.close()
            row["ratio"] = row["chain"]["seconds"] / max(row["first_step"]["seconds"], 1e-9)
            rows.append(row)
    print(f"{args.notes} notes of one owner, ingested in {ingest:.0f} s; every add evolves 5 neighbours\n")
    print("| note position | first step: s (notes restored) | chain: s (notes whose evolution is undone) | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        first, chain = row["first_step"], row["chain"]
        print(f"| {row['position']} | {first['seconds']:.3f} ({first['notes']}) | {chain['seconds']:.3f} "
              f"({chain['notes']}) | {row['ratio']:.1f}x |")
    write_result(args.out, {"notes": args.notes, "ingest_seconds": ingest, "rows": rows})


if __name__ == "__main__":
    main()
