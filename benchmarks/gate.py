"""The gate as identities grow: the exact scan, the int8 screen and the candidate path, beside the bare scan.

    python -m benchmarks.gate                       # the ladder below, ~1-2 h on 2 shared cores
    python -m benchmarks.gate --ladder 10000:5:512 --probes 500 --skip-crossover   # minutes

Each rung PEOPLE:CAPTURES:DIM (default 10000:1:128, the shape earlier benchmarks measured, then 10000:1:512,
10000:5:512, 100000:1:512, 100000:5:512) enrols synthetic face-like templates (biomem.identity.candidates.
SyntheticFaces: people spread with a common direction and a low-rank part, captures clustered around each
person) and probes them through `Gate.decide` (biomem.identity.gate), interleaved in rotating order (with
--shuffle, a random order per probe: in rotating order each path always follows the same one, so `identify`
always runs after the exact scan's read of the whole matrix and "before" after `identify` on the same probe):

- "exact": no floor, the scan of every template (what fusion, enrolment checks and the demo disclosure use);
- "identify": with a floor (τ), what `identify` passes: the candidate path admits a strong match (the best
  identity τ + STRONG, 0.30, or more) and leaves everything else, every refusal among it, to the int8 screen
  (biomem.identity.screen), which decides as the exact scan; also timed alone, back to back over 200 probes of
  each kind, where the int8 copy stays in cache (the interleaved loop reads 100 MB or more between two calls);
- "before": what `identify` took before the screen: the candidate path, else the float32 scan;
- "blas": the bare BLAS product (`matrix @ probe`, gemv) over every template, the floor of a float32 scan;
- "graph": the candidate index's two hnswlib queries alone (the K and K_REST nearest templates, both asked with
  the probe): the floor of any decision the candidate path makes;
- "product": the scan's product alone (`cosines`, np.vecdot, one pass over the template matrix), which an exact
  refusal reads in float32 without the screen (a candidate index proves nothing about the templates it did not
  return, biomem.identity.candidates); the matrix's size over it is the memory bandwidth it gets.

Probes: half genuine (a fresh capture of an enrolled person), half strangers (a capture of someone not
enrolled); their scores are printed beside face-arcface-s's on the offline sample faces (calibrate_samples,
~25 s; --skip-calibration to leave it out). τ 0.4291, δ 0.18: face-arcface-s's calibrated values. Every decision
of "identify" and "before" is compared with the exact scan's of the same probe (admitted set, identity, ambiguous
flag, and every identity at or above the result's floor with its exact score, bit for bit): mismatches must be 0.
Per rung also: the int8 screen's build, the index build (--build-threads, default one: the gate's BUILD_THREADS;
the hnswlib index size), an incremental update after one enrolment and one forgetting, and the template matrix's
size.

--crossover (on by default; --skip-crossover) times the exact scan, the screen alone and identify's path (the
index, else the screen) on genuine probes and strangers over 1,000..40,000 templates × 128 and 512 dimensions:
where the path starts paying off (CANDIDATE_CELLS).
--restart times an SQLite store's templates() (every sealed template opened) at the 10000:5:512 enrolment, the
part of a restart the index build comes after.

Prints markdown tables and writes JSON (default benchmarks/results/gate.json) with the machine block.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS, command, log, write_result
from benchmarks.machine import machine_info
from biomem.identity import candidates
from biomem.identity.candidates import CandidateIndex, cosines
from biomem.identity.gate import DEFAULT_MARGINS, Gate, GateResult, Probe
from biomem.identity.synthetic import ArrayTemplates, SyntheticFaces

TAU = 0.4291  # face-arcface-s's calibrated τ (docs/gate-calibration.md)
DELTA = DEFAULT_MARGINS["face-arcface-s"]
BAND = 0.50 - TAU  # near 1.0 × (step-up τ 0.50 − τ)
MODALITY = "face-synthetic"
DEFAULT_LADDER = "10000:1:128,10000:1:512,10000:5:512,100000:1:512,100000:5:512"
PATHS = {"exact": None, "identify": TAU, "before": TAU}


def ms(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)) * 1e3, 3) if values else float("nan")


def differs(found: GateResult, exact: GateResult) -> bool:
    """Whether a decision differs from the exact scan's: decision, or any identity at or above its floor."""
    if (found.admitted, found.identity, found.ambiguous) != (exact.admitted, exact.identity, exact.ambiguous):
        return True
    listed = dict(zip(found.identity_ids.tolist(), found.best_scores.tolist()))
    above = exact.best_scores >= found.floor
    return any(listed.get(i) != s for i, s in zip(exact.identity_ids[above].tolist(),
                                                 exact.best_scores[above].tolist()))


def decide(gate: Gate, templates: Any, probe: Probe, name: str) -> GateResult:
    """One decision by `name`: "exact" (no floor), "identify" (Gate.decide with the floor τ), "before" (the path
    identify took before the screen: the candidate index for a strong match, else the float32 scan)."""
    if name != "before":
        return gate.decide(probe, TAU, "best", DELTA, PATHS[name])
    found = gate._candidates(probe, templates, TAU, "best", DELTA)
    return found or gate._result(probe, templates.owners, templates.best(probe.embedding), TAU, "best", DELTA)


def score_percentiles(scores: np.ndarray) -> list[float]:
    return [round(float(x), 3) for x in np.percentile(scores, [1, 5, 25, 50, 75, 95, 99])]


def rung(people: int, captures: int, dim: int, probes: int, seed: int, threads: int,
         shuffle: bool = False) -> dict[str, Any]:
    log(f"rung {people:,} x {captures} x {dim}: enrolling")
    faces = SyntheticFaces(dim=dim, seed=seed)
    ids, matrix, centres = faces.gallery(people, captures)
    store = ArrayTemplates(ids, matrix, MODALITY)
    gate = Gate(store, background=False)
    templates = gate._templates(MODALITY)
    started = time.perf_counter()
    _ = templates.screen  # what the background refresh makes first
    screen_build = time.perf_counter() - started
    log(f"screened in {screen_build:.2f} s; building the index over {len(ids):,} templates on {threads} thread(s)")
    started = time.perf_counter()
    index = CandidateIndex(templates, threads=threads)
    build = time.perf_counter() - started
    old = Gate(store, background=False)  # the path before the screen, over the same snapshot and its index
    for each in (gate, old):
        each._cache[MODALITY] = templates
        each.candidates._indexes[MODALITY] = index
    rng = np.random.default_rng(seed + 1)
    half = probes // 2
    kinds = {"genuine": faces.captures(centres[rng.integers(0, people, half)]),
             "stranger": faces.captures(faces.centres(probes - half))}
    # the scan's product alone: one pass over every template, what no refusal avoids; and the index's two hnswlib
    # queries alone (K and K_REST nearest, both asked with the probe here), what no candidate decision avoids
    order = [*PATHS, "product", "blas", "graph"]
    times: dict[str, dict[str, list[float]]] = {k: {p: [] for p in order} for k in kinds}
    mismatches = {p: 0 for p in PATHS if p != "exact"}
    scores = {k: [] for k in kinds}
    served = {k: {"screen": 0, "candidates": 0} for k in kinds}  # identify's by the screen, before's by the index
    for kind, batch in kinds.items():
        for i, vector in enumerate(batch):
            probe = Probe(vector, MODALITY)
            if i < 20:  # warm-up, untimed
                for name in PATHS:
                    decide(old if name == "before" else gate, templates, probe, name)
            decided: dict[str, GateResult] = {}
            turn = i % len(order)
            for name in rng.permutation(order) if shuffle else order[turn:] + order[:turn]:
                before = gate.paths["screen"], old.paths["candidates"]
                started = time.perf_counter()
                if name == "product":
                    cosines(templates.matrix, vector)
                elif name == "blas":
                    templates.matrix @ vector
                elif name == "graph":
                    index._hnsw.knn_query(vector, k=candidates.K, num_threads=1)
                    index._hnsw.knn_query(vector, k=candidates.K_REST, num_threads=1)
                else:
                    decided[name] = decide(old if name == "before" else gate, templates, probe, name)
                times[kind][name].append(time.perf_counter() - started)
                served[kind]["screen"] += gate.paths["screen"] - before[0]
                served[kind]["candidates"] += old.paths["candidates"] - before[1]
            exact = decided["exact"]
            scores[kind].append(float(exact.best_scores.max()))
            for name in mismatches:
                mismatches[name] += differs(decided[name], exact)
    back: dict[str, list[float]] = {kind: [] for kind in kinds}  # identify's path alone, its int8 copy in cache
    for kind, batch in kinds.items():
        for vector in batch[:200]:
            probe = Probe(vector, MODALITY)
            started = time.perf_counter()
            gate.decide(probe, TAU, "best", DELTA, TAU)
            back[kind].append(time.perf_counter() - started)
    log("incremental updates")
    store.enrol(people + 1, faces.captures(np.repeat(faces.centres(1), captures, axis=0)))
    started = time.perf_counter()
    updated = index.update(gate._templates(MODALITY))
    enrol = time.perf_counter() - started
    store.forget(1)
    started = time.perf_counter()
    updated &= index.update(gate._templates(MODALITY))
    forget = time.perf_counter() - started
    row: dict[str, Any] = {
        "people": people, "captures": captures, "dim": dim, "templates": len(ids), "probes": probes,
        "build_s": round(build, 2), "build_threads": threads, "screen_build_s": round(screen_build, 3),
        "index_mb": round(index._hnsw.index_file_size() / 2 ** 20, 1),
        "matrix_mb": round(matrix.nbytes / 2 ** 20, 1), "incremental": bool(updated),
        "update_after_enrolment_s": round(enrol, 3), "update_after_forgetting_s": round(forget, 3),
        "best_score_percentiles": {k: score_percentiles(np.array(v)) for k, v in scores.items()},
        "mismatches": mismatches, "served_by_candidates": served,
        "latency_ms": {k: {p: {"p50": ms(v, 50), "p95": ms(v, 95)} for p, v in t.items()} for k, t in times.items()},
        "identify_back_to_back_p50_ms": {k: ms(v[20:], 50) for k, v in back.items()},
        "paths": {"identify": dict(gate.paths), "before": dict(old.paths)},
    }
    log(f"rung done: build {build:.1f} s, mismatches {mismatches}")
    return row


def crossover(seed: int, probes: int) -> list[dict[str, Any]]:
    """The exact scan, the screen alone and identify's path above the switch (the index, else the screen), on
    genuine probes and strangers, from 1,000 to 40,000 templates: where the path starts paying off."""
    rows = []
    for dim in (128, 512):
        for n in (1_000, 2_000, 4_000, 8_000, 16_000, 40_000):
            faces = SyntheticFaces(dim=dim, seed=seed)
            ids, matrix, centres = faces.gallery(n, 1)
            gate = Gate(ArrayTemplates(ids, matrix, MODALITY), background=False)
            templates = gate._templates(MODALITY)
            _ = templates.screen
            gate.candidates._indexes[MODALITY] = CandidateIndex(templates, threads=2)
            kinds = {"genuine": faces.captures(centres[np.random.default_rng(seed).integers(0, n, probes)]),
                     "stranger": faces.captures(faces.centres(probes))}
            row: dict[str, Any] = {"templates": n, "dim": dim, "cells": n * dim}
            for kind, batch in kinds.items():
                spent: dict[str, list[float]] = {"exact": [], "screen": [], "identify": []}
                for i, vector in enumerate(batch):
                    probe = Probe(vector, MODALITY)
                    turn = i % len(spent)
                    for name in [*spent][turn:] + [*spent][:turn]:
                        started = time.perf_counter()
                        if name == "exact":
                            gate.decide(probe, TAU, "best", DELTA)
                        elif name == "screen":
                            gate._screened(probe, templates, TAU, "best", DELTA, TAU)
                        else:
                            gate._candidates(probe, templates, TAU, "best", DELTA) or \
                                gate._screened(probe, templates, TAU, "best", DELTA, TAU)
                        spent[name].append(time.perf_counter() - started)
                row[kind] = {f"{name}_p50_ms": ms(v[10:], 50) for name, v in spent.items()}
            rows.append(row)
            log(f"crossover {n:,} x {dim}: {row['genuine']} / {row['stranger']}")
    return rows


def restart(seed: int) -> dict[str, Any]:
    """An SQLite store's templates() at 10,000 people x 5 captures x 512: every sealed template opened."""
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="biomem-gate-config-")
    for name in ("BIOMEM_KEY", "BIOMEM_KEY_FILE"):
        os.environ.pop(name, None)
    from biomem.stores import open_store

    ids, matrix, _ = SyntheticFaces(dim=512, seed=seed).gallery(10_000, 5)
    with tempfile.TemporaryDirectory(prefix="biomem-gate-") as work:
        store = open_store(Path(work) / "gate.db")
        with store.transaction():
            for person in range(10_000):
                store.add_identity(f"person-{person:05d}", MODALITY, matrix[person * 5:(person + 1) * 5])
        started = time.perf_counter()
        loaded_ids, loaded = store.templates(MODALITY)
        seconds = time.perf_counter() - started
        store.close()
    assert len(loaded_ids) == len(ids)
    return {"templates": len(ids), "templates_s": round(seconds, 2),
            "per_template_us": round(seconds / len(ids) * 1e6, 1)}


def calibration_scores() -> dict[str, list[float]] | None:
    try:
        from biomem.identity.calibrate import calibrate_samples

        report = calibrate_samples("face-arcface-s")
    except Exception as error:  # no sample faces or weights offline: the synthetic scores stand alone
        log(f"calibration skipped: {error}")
        return None
    return {"genuine": score_percentiles(np.asarray(report.genuine_scores)),
            "impostor": score_percentiles(np.asarray(report.impostor_scores)),
            "impostor_mean_std": [round(float(np.mean(report.impostor_scores)), 4),
                                  round(float(np.std(report.impostor_scores)), 4)]}


def synthetic_scores(seed: int) -> dict[str, Any]:
    faces = SyntheticFaces(seed=seed)
    centres = faces.centres(2_000)
    a, b = faces.captures(centres), faces.captures(centres)
    impostor = (a[:1000] @ b[1000:].T).ravel()
    return {"genuine": score_percentiles(np.sum(a * b, axis=1)), "impostor": score_percentiles(impostor),
            "impostor_mean_std": [round(float(impostor.mean()), 4), round(float(impostor.std()), 4)]}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| people × captures × dim | probes | exact scan p50 / p95 | "
             "identify's path (index, else screen) p50 / p95, back to back | "
             "before (index, else scan) p50 / p95 | bare scan: BLAS / vecdot p50 (matrix) | "
             "graph queries p50 | by the screen / by the index before | mismatches (identify, before) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for kind in ("genuine", "stranger"):
            lat, half = r["latency_ms"][kind], r["probes"] // 2
            served = r["served_by_candidates"][kind]
            lines.append(
                f"| {r['people']:,} × {r['captures']} × {r['dim']}, {kind} | {half:,} | "
                f"{lat['exact']['p50']} / {lat['exact']['p95']} ms | "
                f"{lat['identify']['p50']} / {lat['identify']['p95']} ms, "
                f"{r['identify_back_to_back_p50_ms'][kind]} ms | "
                f"{lat['before']['p50']} / {lat['before']['p95']} ms | "
                f"{lat['blas']['p50']} / {lat['product']['p50']} ms ({r['matrix_mb']} MB) | {lat['graph']['p50']} ms | "
                f"{served['screen'] / half:.0%} / {served['candidates'] / half:.0%} | "
                f"{r['mismatches']['identify']}, {r['mismatches']['before']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ladder", default=DEFAULT_LADDER, help="PEOPLE:CAPTURES:DIM,... (default %(default)s)")
    ap.add_argument("--probes", type=int, default=2_000, help="probes per rung, half genuine (default %(default)s)")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--build-threads", type=int, default=candidates.BUILD_THREADS,
                    help="threads of each rung's index build, not timed with the probes (default %(default)s)")
    ap.add_argument("--shuffle", action="store_true", help="each probe's paths in a random order, not rotated")
    ap.add_argument("--skip-crossover", action="store_true")
    ap.add_argument("--skip-calibration", action="store_true")
    ap.add_argument("--restart", action="store_true", help="time an SQLite store's templates() at 10000:5:512")
    ap.add_argument("--out", type=Path, default=RESULTS / "gate.json")
    args = ap.parse_args(argv)
    started = time.time()
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine_info("hnswlib"),
        "command": command("gate", argv),
        "tau": TAU, "delta": DELTA, "band": round(BAND, 4),
        "index": {"M": candidates.M, "ef_construction": candidates.EF_CONSTRUCTION, "k": candidates.K,
                  "widen": candidates.WIDEN, "k_rest": candidates.K_REST, "ef_query": candidates.EF_QUERY,
                  "strong": candidates.STRONG, "candidate_cells": candidates.CANDIDATE_CELLS},
        "scores": {"synthetic": synthetic_scores(args.seed),
                   "face-arcface-s samples": None if args.skip_calibration else calibration_scores()},
    }
    results["rungs"] = [rung(*map(int, spec.split(":")), args.probes, args.seed, args.build_threads,
                             args.shuffle)
                        for spec in args.ladder.split(",") if spec]
    if not args.skip_crossover:
        results["crossover"] = crossover(args.seed, 200)
    if args.restart:
        results["restart"] = restart(args.seed)
    results["wall_s"] = round(time.time() - started)
    print(table(results["rungs"]))
    if "crossover" in results:
        print("\n| templates × dim | exact p50, genuine / stranger | screen p50 | identify's path p50 |\n"
              "|---|---|---|---|")
        for r in results["crossover"]:
            g, x = r["genuine"], r["stranger"]
            print(f"| {r['templates']:,} × {r['dim']} | " + " | ".join(
                f"{g[f'{name}_p50_ms']} / {x[f'{name}_p50_ms']} ms" for name in ("exact", "screen", "identify")) + " |")
    print(f"\nscores: {json.dumps(results['scores'])}")
    print(f"wall time {results['wall_s']} s; JSON: {args.out}")
    write_result(args.out, results, default=float)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
