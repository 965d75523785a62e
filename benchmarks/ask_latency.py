"""Where the time of one `ask` goes: probe encode, query encode, gate + rank, answer, per face encoder.

    python -m benchmarks.ask_latency                     # face-dlib vs face-arcface-s, offline LLM
    python -m benchmarks.ask_latency --smollm2 12        # + face-arcface-s with SmolLM2 answering (12 asks)

Each encoder gets its own store of the demo people (biomem.engine.demo.build_demo: three people with
their memories, the stranger never enrolled). Every ask is an owner's or the stranger's
question with a fresh augmented capture as the probe, sent as JPEG bytes (what a kiosk's camera
hands over), timed stage by stage in the order the engine runs them:

- probe encode: the face encoder on the JPEG (decode, detection, alignment, embedding);
- query encode: all-MiniLM-L6-v2 on the question, right after the probe encode;
- gate + rank: `BioMemory.search` with the precomputed probe and query vector (gate over the
  templates, the owner's partition ranked, notes read from SQLite, the disclosure view);
- answer: the LLM's `answer` on the admitted notes, given the query vector as `ask` gives it;
- end to end: `BioMemory.ask(next question, probe=image)` on another capture, which does it all
  (another question, so that llama.cpp cannot reuse the prompt the answer stage just evaluated).

Four baselines of face-arcface-s, each undoing one choice of the engine, run beside it:
`onnxruntime defaults` (a spinning thread pool, which slows the text encoder that runs next),
`detector at 640` (every probe letterboxed into SCRFD's 640x640, insightface's default, rather
than detected at its own size), `question before the probe` (the question embedded first, then
the probe encoded, instead of the two at once on two threads) and `no sentence cache` (the offline
answerer embeds every retrieved sentence again on every ask).

Prints a markdown table (p50 / p95 ms per stage, and each row's end-to-end p50 as a ratio of
face-dlib's) and writes JSON (default benchmarks/results/ask_latency.json). `--smollm2 N` adds a
row of N asks on face-arcface-s answered by SmolLM2-135M through llama.cpp's server (started
on 127.0.0.1 by biomem.notes.llamacpp.serve_gguf, stopped at the end); the notes are built offline.
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from PIL import Image

import modalities
from benchmarks.common import RESULTS, arguments, write_result
from benchmarks.machine import machine_info
from biomem import BioMemory, Probe
from biomem.engine.demo import DEMO_PEOPLE, STRANGER, build_demo, demo_capture
from biomem.engine.query import Query
from biomem.engine.retrieval import Retrieval
from biomem.errors import MultipleFacesError, NoFaceError, PoorCaptureError
from biomem.notes.llamacpp import model_name, serve_gguf
from biomem.notes.llm import LLM, OfflineLLM, OpenAIChat, smollm2_gguf
from biomem.notes.textenc import TextEncoder
from modalities import arcface

# a throw-away folder for the stores' template key (biomem.settings reads it when a store opens)
os.environ.setdefault("XDG_CONFIG_HOME", tempfile.mkdtemp(prefix="biomem-bench-config-"))

QUESTIONS = ["What is my bank card PIN?", "When is my next appointment?", "What am I learning?",
             "What does my pet need?", "Where am I travelling?"]
STAGES = ("probe_encode", "query_encode", "gate_rank", "answer", "end_to_end")


def jpeg(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def captures(asks: int) -> list[tuple[int, bytes, bytes]]:
    """(person, probe JPEG, end-to-end JPEG) per ask: the three owners and the stranger in turn."""
    people = [*range(len(DEMO_PEOPLE)), STRANGER]
    return [(people[n % len(people)], jpeg(demo_capture(people[n % len(people)], 10 + 2 * n)),
             jpeg(demo_capture(people[n % len(people)], 11 + 2 * n))) for n in range(asks)]


def embedded_first(retrieval: Retrieval, asked: Query) -> Future:
    """Retrieval.embedding undone: the query embedded on the caller's thread, before the probe is read."""
    done: Future = Future()
    done.set_result(retrieval.vectors(asked))
    return done


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = call()
    return value, 1000 * (time.perf_counter() - started)


def run(row: str, encoder_name: str, text: TextEncoder, llm: str | LLM, asks: int, workdir: Path,
        sentence_cache: bool = True) -> dict[str, Any]:
    """One store on `encoder_name`; every stage timed on every ask."""
    loaded, load_ms = timed(lambda: modalities.create(encoder_name))
    times: dict[str, list[float]] = {stage: [] for stage in STAGES}
    refused = admitted = 0
    path = workdir / f"{row}.db".replace(" ", "_").replace(",", "")
    with BioMemory(path, encoder=loaded, text_model=text, llm="offline", limits="off") as mem:
        build_demo(mem)  # notes built offline whatever answers
    with BioMemory(path, encoder=loaded, text_model=text, llm=llm, limits="off") as mem:
        if not sentence_cache:
            mem.llm.cache_size = 0
        question = QUESTIONS[0]
        mem.ask(question, probe=jpeg(demo_capture(0, 9)))  # warm-up: partitions loaded, caches filled
        for n, (_person, image, other) in enumerate(captures(asks)):
            question = QUESTIONS[n % len(QUESTIONS)]
            try:
                vector, t_probe = timed(lambda: loaded.encode(image))
            except (NoFaceError, MultipleFacesError):
                refused += 1
                continue
            query, t_query = timed(lambda: text.encode_one(question))
            result, t_gate = timed(lambda: mem.search(query, probe=Probe(vector, encoder_name)))
            _, t_answer = timed(lambda: mem.llm.answer(question, [note for note, _ in result.notes], False, query))
            try:
                # another question: an LLM server must not reuse the prompt it has just evaluated
                _, t_all = timed(lambda: mem.ask(QUESTIONS[(n + 1) % len(QUESTIONS)], probe=other))
            except (NoFaceError, MultipleFacesError, PoorCaptureError):  # ask holds a probe to the quality bar
                refused += 1
                continue
            admitted += result.gate.identity is not None
            for stage, ms in zip(STAGES, (t_probe, t_query, t_gate, t_answer, t_all)):
                times[stage].append(ms)
    return {"row": row, "encoder": encoder_name, "llm": mem.llm.name, "load_ms": load_ms, "asks": asks,
            "timed": len(times["end_to_end"]), "refused_captures": refused, "admitted": admitted,
            **{f"{stage}_ms": {"p50": float(np.median(v)), "p95": float(np.percentile(v, 95)),
                               "mean": float(np.mean(v))}
               for stage, v in times.items() if v}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--asks", type=int, default=60, help="asks per row (owners and the stranger in turn)")
    parser.add_argument("--smollm2", type=int, default=0, metavar="N",
                        help="also N asks answered by SmolLM2 through a local llama.cpp server")
    parser.add_argument("--out", type=Path, default=RESULTS / "ask_latency.json")
    args = parser.parse_args()

    text = TextEncoder()
    rows = []
    with tempfile.TemporaryDirectory(prefix="biomem-ask-latency-") as tmp:
        for row, name in (("face-dlib", "face-dlib"), ("face-arcface-s", "face-arcface-s")):
            rows.append(run(row, name, text, "offline", args.asks, Path(tmp)))
            print(f"done {row}", flush=True)
        baselines = {"onnxruntime defaults": mock.patch.object(arcface, "_session_options", lambda threads: None),
                     "detector at 640": mock.patch.object(arcface, "detector_input", lambda shape: arcface.DET_SIZE),
                     "question before the probe": mock.patch.object(Retrieval, "embedding", embedded_first)}
        for name, undone in baselines.items():
            with undone:
                rows.append(run(f"face-arcface-s, {name}", "face-arcface-s", text, "offline", args.asks, Path(tmp)))
            print(f"done {name}", flush=True)
        rows.append(run("face-arcface-s, no sentence cache", "face-arcface-s", text, "offline", args.asks, Path(tmp),
                        sentence_cache=False))
        print("done no sentence cache", flush=True)
        if args.smollm2:
            gguf = smollm2_gguf()
            with serve_gguf(gguf) as base_url:
                llm = OpenAIChat(model_name(gguf), OfflineLLM(text), base_url=base_url)
                rows.append(run("face-arcface-s, SmolLM2 answers", "face-arcface-s", text, llm, args.smollm2,
                                Path(tmp)))
            print("done SmolLM2", flush=True)

    base = rows[0]["end_to_end_ms"]["p50"]
    print(f"\n{args.asks} asks per row ({args.smollm2} with SmolLM2); p50 / p95 ms\n")
    print("| encoder | probe encode | query encode | gate + rank | answer | end to end | vs face-dlib |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        cells = " | ".join(f"{r[f'{s}_ms']['p50']:.1f} / {r[f'{s}_ms']['p95']:.1f}" for s in STAGES)
        print(f"| {r['row']} | {cells} | {r['end_to_end_ms']['p50'] / base:.2f}× |")
    out = write_result(args.out, {"machine": machine_info("onnxruntime", "dlib-bin", "torch", "llama_cpp_python"),
                                  "args": arguments(args), "rows": rows})
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
