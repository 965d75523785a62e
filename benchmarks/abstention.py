"""When should the offline answerer say "Not mentioned"? Its best sentence's cosine, on LoCoMo.

    python -m benchmarks.abstention [--data ../shared/data/locomo/locomo10.json] [-k 10] [--out FILE]

Every LoCoMo question is answered the way the offline answerer does under the owner's gate:
the top-k turns of its own conversation by cosine to the question (all-MiniLM-L6-v2 on the
paper protocol's note text; the engine also embeds each note's LLM-made metadata, so this is
close to, not equal to, its ranking), then the retrieved sentence closest to the question.
Categories 1-4 have an answer in the conversation; category 5 (adversarial) asks about
something that never happened to that speaker, so abstaining is right. For each threshold
the table gives the share of each kind that abstains and the answerable questions' mean
A-Mem F1 (an abstention scores 0). The demo's own questions are scored too: Ana's four real
questions against her notes, and the issue's "What is my gym locker code?", which she never
said anything about.

Prints a markdown table and writes JSON (default benchmarks/results/abstention.json).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.common import LOCOMO, RESULTS, arguments, write_result
from benchmarks.machine import machine_info
from biomem.engine.demo import DEMO_PEOPLE
from biomem.eval.locomo import load_locomo
from biomem.eval.metrics import ADVERSARIAL, TEMPORAL, amem_f1
from biomem.notes.llm import ABSTAIN_BELOW, OfflineLLM, spoken_date
from biomem.notes.textenc import TextEncoder
from biomem.stores.records import Note

THRESHOLDS = [round(float(t), 2) for t in np.arange(0.15, 0.61, 0.05)]
DEMO_QUESTIONS = [("What is my bank card PIN?", True), ("Am I allergic to anything?", True),
                  ("When are Lea's piano lessons?", True), ("Where did I park the car?", True),
                  ("What is my gym locker code?", False)]


def locomo_scores(data: Path, k: int, llm: OfflineLLM, text: TextEncoder) -> list[dict]:
    """Per question: category, best-sentence cosine and the F1 of the answer given without abstaining."""
    rows = []
    for conversation in load_locomo(data):
        notes = [Note(id=i, owner=1, content=t.note, timestamp=t.date) for i, t in enumerate(conversation.turns)]
        vectors = text.encode([n.content for n in notes])
        for question in conversation.questions:
            asked = text.encode_one(question.question)
            top = np.argsort(-(vectors @ asked), kind="stable")[:k]
            note, sentence, score = llm.best_sentence(question.question, [notes[i] for i in top], asked)
            answer = spoken_date(note.timestamp) if question.category == TEMPORAL else sentence
            gold = question.answer if question.category != ADVERSARIAL else None
            rows.append({"category": question.category, "score": score,
                         "f1": amem_f1(answer, gold) if gold is not None else None})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=LOCOMO)
    parser.add_argument("-k", type=int, default=10, help="notes retrieved per question (default 10)")
    parser.add_argument("--out", type=Path, default=RESULTS / "abstention.json")
    args = parser.parse_args()

    started = time.perf_counter()
    text = TextEncoder()
    llm = OfflineLLM(text, abstain_below=-1.0)
    rows = locomo_scores(args.data, args.k, llm, text)
    answerable = [r for r in rows if r["category"] != ADVERSARIAL]
    adversarial = [r for r in rows if r["category"] == ADVERSARIAL]
    ana = [Note(id=i, owner=1, content=c, timestamp=t) for i, (c, t) in enumerate(DEMO_PEOPLE["Ana"])]
    demo = [{"question": q, "answerable": ok, "score": llm.best_sentence(q, ana)[2]} for q, ok in DEMO_QUESTIONS]

    table = []
    for t in THRESHOLDS:
        kept = [r["f1"] if r["score"] >= t else 0.0 for r in answerable]
        table.append({"threshold": t,
                      "answerable_abstained": float(np.mean([r["score"] < t for r in answerable])),
                      "adversarial_abstained": float(np.mean([r["score"] < t for r in adversarial])),
                      "answerable_f1": float(np.mean(kept)),
                      "demo_right": int(sum((d["score"] >= t) == d["answerable"] for d in demo))})
    print(f"\nLoCoMo: {len(answerable)} answerable (categories 1-4), {len(adversarial)} adversarial (5); "
          f"k={args.k}; shipped threshold {ABSTAIN_BELOW}\n")
    print("| abstain below | answerable abstained | adversarial abstained | answerable F1 | demo questions right |")
    print("|---:|---:|---:|---:|---:|")
    for r in table:
        mark = " **(shipped)**" if abs(r["threshold"] - ABSTAIN_BELOW) < 1e-9 else ""
        print(f"| {r['threshold']:.2f}{mark} | {r['answerable_abstained']:.1%} | {r['adversarial_abstained']:.1%} | "
              f"{r['answerable_f1']:.3f} | {r['demo_right']} / {len(demo)} |")
    print("\nbest-sentence cosine of the demo questions (Ana's notes):")
    for d in demo:
        print(f"- {d['question']!r} ({'answerable' if d['answerable'] else 'not in her notes'}): {d['score']:.3f}")
    for name, group in (("answerable", answerable), ("adversarial", adversarial)):
        scores = np.array([r["score"] for r in group])
        print(f"- LoCoMo {name}: median {np.median(scores):.3f}, 10th percentile {np.percentile(scores, 10):.3f}")
    out = write_result(args.out, {"machine": machine_info("torch"), "args": arguments(args), "shipped": ABSTAIN_BELOW,
                                  "table": table, "demo": demo, "seconds": time.perf_counter() - started,
                                  "questions": rows}, indent=1)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
