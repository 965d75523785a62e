"""The result tables of docs/, rendered from benchmarks/results/*.json.

A table in a docs page sits between two markers, the opening one naming the table:

    <!-- results:gate_screen -->
    | ... the table, written by this script ... |
    <!-- /results -->

    python -m benchmarks.report           # rewrite every marked table from the JSON
    python -m benchmarks.report --check   # exit 1 naming each table that differs from the JSON

Only the standard library: the JSON files are the data, this script the one place that formats them.
"""

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- results:([\w-]+) -->\n)(.*?)(<!-- /results -->)", re.S)


def num(x: float) -> str:
    """Three significant figures, thousands with a comma: 0.83, 2.70, 81.3, 614, 1,799."""
    if x >= 1000:
        return f"{round(x):,}"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 0.1:
        return f"{x:.2f}"
    return f"{x:.2g}"


def times(x: float) -> str:
    return f"{x:.1f}x" if x < 10 else f"{x:.0f}x"


def pct(x: float, digits: int = 0) -> str:
    return f"{100 * x:.{digits}f}%"


def p50_95(d: dict, unit: str = "") -> str:
    """A latency as 'p50 / p95', from {'p50_ms', 'p95_ms'} or {'p50', 'p95'}."""
    p50, p95 = (d["p50_ms"], d["p95_ms"]) if "p50_ms" in d else (d["p50"], d["p95"])
    return f"{num(p50)} / {num(p95)}{unit}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def load(results: Path, name: str) -> dict:
    return json.loads((results / f"{name}.json").read_text())


def people(notes: int, owners: int) -> str:
    return f"{notes:,} / {owners:,}"


# Search ------------------------------------------------------------------------------------------------------------


def retrieval_shape(results: Path) -> str:
    rows = []
    for rung in load(results, "retrieval_shape")["retrieval"]:
        modes = rung["modes"]
        rows.append([people(rung["notes"], rung["identities"]), f"{rung['templates']:,} × {rung['dim']}",
                     p50_95(modes["exact"], " ms"), f"{num(modes['exact_back_to_back']['p50_ms'])} ms",
                     f"{num(rung['gate_share']['interleaved']['identify_p50_ms'])} ms",
                     f"{num(modes['impostor']['p50_ms'])} ms", f"{num(modes['baseline']['p50_ms'])} ms",
                     times(rung["speedup_exact"]), f"{modes['exact']['recall_at_10']:.3f}",
                     f"{modes['exact']['gate_decision_exact']:.3f}"])
    return table(["notes / people", "templates", "gated search p50 / p95", "back to back p50",
                  "the gate's part (`identify`) p50", "a stranger's search p50", "paper baseline p50", "speed-up",
                  "recall@10", "decisions as the exact scan's"], rows)


def retrieval_postgresql_shape(results: Path) -> str:
    rows = []
    for rung in load(results, "retrieval_postgresql_shape")["retrieval"]:
        modes, ratio = rung["modes"], rung["postgresql"]["ratio"]
        rows.append([people(rung["notes"], rung["identities"]), f"{rung['templates']:,} × {rung['dim']}",
                     p50_95(modes["exact"], " ms"), p50_95(modes["pg_exact"], " ms"),
                     f"{times(ratio['exact_p50'])} ({times(ratio['exact_back_to_back_p50'])})",
                     f"{modes['exact']['recall_at_10']:.3f} / {modes['pg_exact']['recall_at_10']:.3f}"])
    return table(["notes / people", "templates", "SQLite p50 / p95", "PostgreSQL p50 / p95",
                  "ratio p50 (back to back)", "recall@10 SQLite / PostgreSQL"], rows)


def pg_retrieval(results: Path) -> str:
    data = load(results, "pg_retrieval")
    rows = []
    for rung in data["rungs"]:
        efs = {str(g["notes"]): g["ef_search"] for g in rung["owner_graphs_built"].values()}
        glob, own = rung["global_phase"], rung["owner_phase"]
        for size, exact in glob["exact"].items():
            owner = own["owner"][size]
            small = size == "small"
            graph = (f"{p50_95(owner, ' ms')} (scan)" if small else
                     f"ef {efs[size.replace(',', '')]}: {p50_95(owner, ' ms')} ({owner['recall_at_10']:.3f})")
            fixed = " / ".join(f"{own[f'owner_ef{ef}'][size]['recall_at_10']:.3f}" for ef in data["ef_searches"])
            rows.append([people(rung["notes"], rung["owners"]),
                         f"~{rung['small_partition_notes']} (no graph)" if small else size,
                         p50_95(exact, " ms"),
                         f"{p50_95(glob['global'][size], ' ms')} ({glob['global'][size]['recall_at_10']:.3f})",
                         p50_95(own["exact"][size], " ms"), graph, "–" if small else fixed])
    efs = " / ".join(str(ef) for ef in data["ef_searches"])
    return table(["notes / owners", "partition", "scan, beside the one graph",
                  "one graph over every note (recall@10)", "scan, beside the own graphs",
                  "own graph, default ef_search (recall@10)", f"own graph recall@10 at ef_search {efs}"], rows)


def pg_retrieval_builds(results: Path) -> str:
    rows = []
    for rung in load(results, "pg_retrieval")["rungs"]:
        load_ = rung["load"]
        builds = {}
        for graph in rung["owner_graphs_built"].values():
            builds.setdefault(graph["notes"], []).append(graph["build_s"])
        each = "; ".join(f"{notes:,}: {num(min(s))}–{num(max(s))} s" for notes, s in builds.items())
        adds = rung["adds"]
        rows.append([people(rung["notes"], rung["owners"]),
                     f"{num(load_['build_s'])} s ({num(load_['identities_s'])}, {num(load_['copy_s'])}, "
                     f"{num(load_['vacuum_analyze_s'])})",
                     f"{num(rung['global_graph_build_s'])} s, {num(rung['global_graph_mb'])} MB",
                     f"{num(rung['owner_graphs_build_s'])} s, {num(rung['owner_graphs_mb'])} MB ({each})",
                     ", ".join(f"{num(adds[kind]['small']['p50_ms'])} / {num(adds[kind]['large']['p50_ms'])}"
                               for kind in ("no_graph", "global_graph", "owner_graphs")) + " ms"])
    return table(["notes / owners", "load: identities, COPY, VACUUM ANALYZE", "one graph over every note: build, size",
                  "own graphs: build, size", "add p50, small / large owner: no graph, one graph, own graphs"], rows)


def household_search(mode: str, mode_data: dict) -> str:
    base = mode.split("_")[0]
    return f"{base}, {pct(mode_data['selectivity'])} filter" if mode_data["filter"] else base


def households(results: Path) -> str:
    rung = load(results, "retrieval_households")["households"][0]
    rows = [[household_search(mode, m), f"{m['matching_notes_mean']:.1f}", p50_95(m),
             f"{m['ratio_p50_vs_ungrouped']:.2f}x", f"{m['recall_at_10']:.3f}"] for mode, m in rung["modes"].items()]
    return table(["search", "notes matching (mean)", "p50 / p95 ms", "p50 / ungrouped p50", "recall@10"], rows)


def households_postgresql(results: Path) -> str:
    stores = {rung["store"]: rung["modes"] for rung in load(results, "retrieval_households_postgresql")["households"]}
    sqlite, postgresql = stores["sqlite"], stores["postgresql"]
    rows = [[household_search(mode, m), p50_95(m), f"{m['ratio_p50_vs_ungrouped']:.2f}x", p50_95(postgresql[mode]),
             f"{postgresql[mode]['ratio_p50_vs_ungrouped']:.2f}x",
             f"{m['recall_at_10']:.3f} / {postgresql[mode]['recall_at_10']:.3f}"] for mode, m in sqlite.items()]
    return table(["search", "SQLite p50 / p95 ms", "ratio", "PostgreSQL p50 / p95 ms", "ratio", "recall@10 both"], rows)


# The gate ----------------------------------------------------------------------------------------------------------


def gate_screen(results: Path) -> str:
    data = load(results, "gate_screen")
    rung = data["rungs"][0]
    rows = []
    for kind in ("genuine", "stranger"):
        lat, served = rung["latency_ms"][kind], rung["served_by_candidates"][kind]
        rows.append([kind, p50_95(lat["exact"], " ms"),
                     f"**{p50_95(lat['identify'], ' ms')}** ({num(rung['identify_back_to_back_p50_ms'][kind])} ms)",
                     p50_95(lat["before"], " ms"), p50_95(lat["blas"], " ms"), p50_95(lat["product"], " ms"),
                     f"{num(lat['graph']['p50'])} ms",
                     pct(served["screen"] / (served["screen"] + served["candidates"]))])
    shape = f"{rung['people']:,} × {rung['captures']} × {rung['dim']}"
    mismatches = rung["mismatches"]
    return table([shape, "exact scan (float32)", "`identify`: index, else screen (back to back p50)",
                  "index, else float32 scan", f"BLAS gemv ({rung['matrix_mb']} MB)", "`np.vecdot`",
                  "graph queries alone p50", "decided by the screen"], rows) + (
        f"\n\nMismatches with the exact scan: {mismatches['identify']} (index, else screen), "
        f"{mismatches['before']} (index, else float32 scan). Load average at the start "
        f"{data['machine']['load_average_1m']:.1f}; the int8 copy built in {rung['screen_build_s']} s, the index in "
        f"{rung['build_s']} s ({rung['index_mb']} MB); updated in place in {rung['update_after_enrolment_s']} s after "
        f"an enrolment, {rung['update_after_forgetting_s']} s after a forgetting.")


def gate_crossover(results: Path) -> str:
    rows = []
    for point in load(results, "gate_10000x5")["crossover"]:
        if point["templates"] < 4000:
            continue
        genuine, stranger = point["genuine"], point["stranger"]
        rows.append([f"{point['templates']:,} × {point['dim']}"] + [
            f"{num(genuine[f'{path}_p50_ms'])} / {num(stranger[f'{path}_p50_ms'])} ms"
            for path in ("exact", "screen", "identify")])
    return table(["templates × dim", "exact scan", "screen alone", "index, else screen"], rows)


def gate_ladder(results: Path) -> str:
    rows = []
    for rung in load(results, "gate")["rungs"]:
        shape = f"{rung['people']:,} × {rung['captures']} × {rung['dim']}"
        for kind in ("genuine", "stranger"):
            lat = rung["latency_ms"][kind]
            by_index = rung["served_by_candidates"][kind]["candidates"] / (rung["probes"] / 2)
            first = kind == "genuine"
            rows.append([f"{shape}, {kind}", f"{rung['probes'] // 2}", p50_95(lat["exact"], " ms"),
                         p50_95(lat["candidates"], " ms"), times(lat["exact"]["p50"] / lat["candidates"]["p50"]),
                         f"{num(lat['product']['p50'])} ms" + (f" ({rung['matrix_mb']} MB)" if first else ""),
                         pct(by_index), str(rung["mismatches"]["candidates"]) if first else "",
                         f"{num(rung['build_s'])} s, {num(rung['index_mb'])} MB" if first else ""])
    return table(["people × captures × dim", "probes", "exact scan", "`identify`'s path (float32)",
                  "exact / `identify`'s", "product alone (matrix)", "decided by the index", "mismatches",
                  "index build (1 thread), size"], rows)


def kiosk(results: Path) -> str:
    rows = [[f"{row['pace']} (every {row['gap_s']:g} s)", f"{row['asks']:,}", f"{row['refused']}", f"{row['admitted']}",
             f"{row['owner_asks']}", f"{row['owner_served']}", f"{row['owner_refused']}",
             ", ".join(row["guarded"]) or "nobody", f"{row['daily_budget']:,} ({row['enrolled']})",
             f"{row['expected_false_admissions_bound']:.3f}", f"{row['span_h']:.1f} h"]
            for row in load(results, "kiosk")["rows"]]
    return table(["at the kiosk", "stranger asks / guesses", "refused", "admitted", "owner asks", "owners served",
                  "owners refused", "guarded", "daily budget (N)", "expected false admissions a day, at most", "span"],
                 rows)


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def attacks(results: Path) -> str:
    rows = []
    for name, setting in (("attacks_limits", "defaults"), ("attacks", "demo"), ("attacks_arcface", "demo")):
        data = load(results, name)
        row = next(r for r in data["rows"] if r["setting"] == setting)
        best = "none" if row["best_score"] is None else f"{row['best_score']:.2f}"
        rows.append([f"`{data['encoder']}`", f"{row['disclosure']}, limits {row['limits']}",
                     f"{row['queries']:,} of {row['budget']:,}", f"{row['refused']:,}", best,
                     "yes" if row["admitted"] else "no", minutes(row["wall_s"]), row["stop"]])
    return table(["encoder", "setting", "queries spent", "refused", "best Ana score shown", "admitted", "wall time",
                  "stop"], rows)


def attacks_patient(results: Path) -> str:
    row = load(results, "attacks_patient")["rows"][0]
    return table(["answered", "refused (waited out)", "simulated days", "answered per day", "first refused",
                  "near-misses towards Ana", "Ana guarded", "admitted", "highest exact Ana cosine (unseen)",
                  "wall time"],
                 [[f"{row['answered']:,} of {row['budget']:,}", f"{row['refused']}", f"{row['days']:.1f}",
                   ", ".join(f"{n:,}" for n in row["answered_per_day"]),
                   f"after {row['first_refused_after_answered']:,} ({row['first_refused_after_h']:.1f} h)",
                   f"{row['near_misses_towards_target']}", f"{row['target_guard_set']} times",
                   "yes" if row["admitted"] else "no",
                   f"{row['highest_exact_target_cosine']:.4f} (τ {row['threshold']})", minutes(row["wall_s"])]])


def attacks_dictionary(results: Path) -> str:
    row = next(r for r in load(results, "attacks_limits")["rows"] if r["setting"] == "dictionary")
    return table(["distinct faces", "enrolled (N)", "daily budget", "first throttled", "guesses served per day",
                  "refused", "matched anyone"],
                 [[f"{row['distinct_faces']}", f"{row['enrolled']}", f"{row['daily_budget']:,}",
                   f"guess {row['first_refused_at_guess']:,} ({row['first_refused_after_h']:.1f} h)",
                   " / ".join(f"{n:,}" for n in row["served_per_day"]), f"{row['refused']}", f"{row['matched']}"]])


# Encoders, asking, the service -------------------------------------------------------------------------------------


def encoders(results: Path) -> str:
    rows = []
    for row in load(results, "encoders")["rows"]:
        if "skipped" in row:
            rows.append([row["encoder"], row["data"], "–", "–", "–", "–", "–", row["skipped"]])
            continue
        rows.append([row["encoder"], row["data"], f"{row['images']} ({row['refused']})",
                     f"{num(row['encode_ms_p50'])} / {num(row['encode_ms_p95'])} ms", pct(row["eer"], 2),
                     pct(row["fnmr_at_fmr"], 2), f"{pct(row['fmr_at_default'], 3)} / {pct(row['fnmr_at_default'], 2)} "
                     f"(τ {row['default_tau']:.2f})", f"{row['tau_intersection']:.4f}"])
    fmr = load(results, "encoders")["args"]["fmr"]
    return table(["encoder", "offline set", "images (refused)", "encode p50 / p95", "EER", f"FNMR @ FMR={fmr:g}",
                  "FMR / FNMR at the default τ", "τ at the densities' intersection"], rows)


def ask_latency(results: Path) -> str:
    rows = load(results, "ask_latency")["rows"]
    base = rows[0]["end_to_end_ms"]["p50"]
    return table(["encoder", "probe encode", "query encode", "gate + rank", "answer", "end to end",
                  f"vs {rows[0]['row']}"],
                 [[row["row"]] + [p50_95(row[stage]) for stage in
                                  ("probe_encode_ms", "query_encode_ms", "gate_rank_ms", "answer_ms", "end_to_end_ms")]
                  + [f"{row['end_to_end_ms']['p50'] / base:.2f}×"] for row in rows])


def service(results: Path) -> str:
    data = load(results, "service")
    rows = [[f"{level['clients']}", f"{num(level['p50_ms'])} ms", f"{num(level['p95_ms'])} ms",
             f"{num(level['p99_ms'])} ms", f"{level['throughput_rps']:.1f} req/s", f"{level['vs_encoder_bound']:.2f}×",
             f"{level['throughput_rps'] / data['probe_and_question_per_s']:.2f}×",
             f"{num(level['server_cpu_ms_per_request'])} ms", f"{num(level['generator_cpu_ms_per_request'])} ms",
             f"{level['ceiling_rps']:.1f} req/s ({level['ceiling_vs_encoder_bound']:.2f}×)", f"{level['errors']}",
             f"{level['wrong_owner_notes']}"] for level in data["levels"]]
    adds = data["adds"]
    return table(["clients", "p50", "p95", "p99", "throughput", "vs probe encoder", "vs probe + question",
                  "server CPU / req", "generator CPU / req", "ceiling (vs probe encoder)", "errors",
                  "wrong-owner notes"], rows) + (
        f"\n\nThe probe encoder alone: {data['encoder_bound_probes_per_s']:.1f} probes/s; probe and question "
        f"encodings: {data['probe_and_question_per_s']:.1f}/s. After SIGTERM, of {adds['acknowledged']} acknowledged "
        f"adds {adds['missing']} missing, {adds['duplicated']} duplicated, {adds['wrong_owner']} under another owner.")


def erasure_chain(results: Path) -> str:
    data = load(results, "erasure_chain")
    return table(["note deleted", "first step alone (notes restored)", "the chain (notes whose evolution is undone)",
                  "ratio"],
                 [[f"the {row['position']:,}th of {data['notes']:,}",
                   f"{row['first_step']['seconds']:.3f} s ({row['first_step']['notes']})",
                   f"{num(row['chain']['seconds'])} s ({row['chain']['notes']:,})", times(row["ratio"])]
                  for row in data["rows"]])


# Peers -------------------------------------------------------------------------------------------------------------

SYSTEMS = {"biomem-sqlite": "Bio-Memory, SQLite (from a probe, the gate included)",
           "biomem-postgresql": "Bio-Memory, PostgreSQL (the same)",
           "biomem-sqlite-session": "Bio-Memory after the gate (a session per person)",
           "pgvector": "pgvector", "lancedb": "LanceDB", "chroma": "Chroma", "qdrant": "Qdrant (local mode)",
           "mem0": "Mem0 (local Qdrant)"}


def peers(results: Path, name: str) -> str:
    rung = load(results, name)["rungs"][0]
    rows = []
    for system, s in rung["systems"].items():
        search = f"{p50_95(s['search'])} ({s['search']['n']})"
        loaded = (["the SQLite store", "", ""] if "store_of" in s else
                  [f"{num(s['load_notes_per_s'])} ({num(s['load_s'])})", num(s["disk_mb"]),
                   f"{round(s['load_peak_rss_mb']):,}"])
        rows.append([SYSTEMS[system], *loaded, search, p50_95(s["search_with_embedding"]),
                     f"{s['recall_at_10']:.3f}"])
    for system, stop in rung["stopped"].items():
        rows.append([SYSTEMS[system], f"stopped: {stop['loaded']:,} notes in its {stop['budget_s']:.0f} s "
                     f"({num(stop['loaded'] / stop['seconds'])} notes/s)", "", "", "not searched", "", ""])
    return table(["system", "load notes/s (s)", "disk MB", "load peak RSS +MB", "search p50 / p95 ms (n)",
                  "with embedding p50 / p95 ms", "recall@10"], rows)


def peers_safety(results: Path) -> str:
    calls = ["get", "update", "delete", "history", "search_other_user", "search_unknown_user", "search_no_user"]
    safety = load(results, "peers_100k")["rungs"][0]["safety"]
    return table(["system", "get", "update", "delete", "history", "search as another user",
                  "search as an unknown user", "search with no user"],
                 [[SYSTEMS[system]] + [outcome[call]["result"] for call in calls]
                  for system, outcome in safety.items()])


TABLES = {
    "retrieval_shape": retrieval_shape,
    "retrieval_postgresql_shape": retrieval_postgresql_shape,
    "pg_retrieval": pg_retrieval,
    "pg_retrieval_builds": pg_retrieval_builds,
    "households": households,
    "households_postgresql": households_postgresql,
    "gate_screen": gate_screen,
    "gate_crossover": gate_crossover,
    "gate_ladder": gate_ladder,
    "kiosk": kiosk,
    "attacks": attacks,
    "attacks_patient": attacks_patient,
    "attacks_dictionary": attacks_dictionary,
    "encoders": encoders,
    "ask_latency": ask_latency,
    "service": service,
    "erasure_chain": erasure_chain,
    "peers_1m": lambda results: peers(results, "peers_1m"),
    "peers_1m_pgvector": lambda results: peers(results, "peers_1m_pgvector"),
    "peers_100k": lambda results: peers(results, "peers_100k"),
    "peers_safety": peers_safety,
}


def rendered(page: str, results: Path) -> str:
    """The page with every marked table rendered from the JSON in `results`."""
    def render(block: re.Match) -> str:
        opening, name, _, closing = block.groups()
        if name not in TABLES:
            raise SystemExit(f"unknown table {name!r}: one of {', '.join(TABLES)}")
        return f"{opening}{TABLES[name](results)}\n{closing}"
    return BLOCK.sub(render, page)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs from the JSON")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (docs/ and benchmarks/results/)")
    args = parser.parse_args(argv)
    results = args.root / "benchmarks" / "results"
    drifted = []
    for path in sorted((args.root / "docs").glob("*.md")):
        page = path.read_text()
        new = rendered(page, results)
        if new == page:
            continue
        if args.check:
            pairs = zip(BLOCK.finditer(page), BLOCK.finditer(new))
            drifted += [f"{path.relative_to(args.root)}: {then.group(2)}" for then, now in pairs
                        if then.group(3) != now.group(3)]
        else:
            path.write_text(new)
            print(f"rendered {path.relative_to(args.root)}")
    if drifted:
        print("tables that differ from benchmarks/results/ (run python -m benchmarks.report):", *drifted, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
