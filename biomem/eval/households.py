"""LoCoMo with households: each conversation's two speakers are two people who share its memory as a group.

    biomem eval households --data ../shared/data/locomo/locomo10.json --bio palmsynth
    results = run(args)  # args from biomem.eval.add_households_arguments; writes results.md and records.json

One run asks the same sampled questions of two stores built from the same turns:

- "single" (today's protocol, biomem.eval.locomo): conversation i is one identity, enrolled with biometric
  identity i; each question is asked by its owner (probe i) and by a non-owner (probe (i + 1) mod n).
- "households": conversation i's speakers are two people, A (biometric identity i: the same gallery and probe
  as the single owner's) and B (biometric identity n + i). The operator founds their group
  (create_group(identity=A), add_member(identity=B)) and imports the conversation into it
  (add_many(identity=<group id>)): the group owns every turn, neither speaker does. Each question is asked by A,
  by B, and by both speakers of conversation (i + 1) mod n, members of another household.

Retrieval only, as the paper protocol retrieves: `search(question, probe=..., k=K)`, no links, no answer (the
LLM builds notes at ingestion, the offline one by default; nothing is asked of it afterwards). Evidence
recall@K is the share of the question's evidence turns among the K notes; a retrieved note leaks when the
probe's person may not read it: it is neither theirs nor their household's (ground truth, whatever the gate
admitted). Both stores are ingested once per configuration and cached (biomem.eval.locomo.ingest), through
one text encoder that embeds each distinct string once, so the second layout costs little more than storage.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from biomem import __version__
from biomem.errors import InvalidInputError
from biomem.notes.textenc import TextEncoder

from .biosources import BioSet, load_source, non_owner
from .locomo import Ingested, MemoTextEncoder, ingest, load_conversations, run_and_write
from .locomo_data import (
    Conversation,
    Question,
    sample_questions,
)
from .metrics import evidence_recall, percent
from .protocols import PaperProtocol

# (layout, role) in the order of the tables; each role's probe, as a function of the question's position i
# among n conversations: the biometric identity asking.
ROLES: dict[tuple[str, str], Any] = {
    ("single", "owner"): lambda i, n: i,
    ("single", "non-owner"): lambda i, n: non_owner(i, n),
    ("households", "speaker A"): lambda i, n: i,
    ("households", "speaker B"): lambda i, n: n + i,
    ("households", "non-member A"): lambda i, n: non_owner(i, n),
    ("households", "non-member B"): lambda i, n: n + non_owner(i, n),
}
MEMBER_ROLES = {("single", "owner"), ("households", "speaker A"), ("households", "speaker B")}


class Layout:
    """One store of the run: its ingestion, who is enrolled with which biometric, and what each may read."""

    def __init__(self, name: str, ingested: Ingested, conversations: Sequence[Conversation]) -> None:
        self.name, self.ingested = name, ingested
        n = len(conversations)
        # biometric identity j -> (person id, the owners whose notes that person may read)
        self.people: dict[int, tuple[int, frozenset[int]]] = {}
        for i, conversation in enumerate(conversations):
            speakers = ingested.people[conversation.sample_id]
            owner = ingested.identities[conversation.sample_id]
            if name == "single":
                self.people[i] = (speakers[0], frozenset({owner}))
                continue
            if len(speakers) != 2:
                raise InvalidInputError(f"{conversation.sample_id} has {len(speakers)} speaker(s) in its turns; "
                                        "the household check needs two (raise --max-turns)")
            for slot, person in enumerate(speakers):
                self.people[slot * n + i] = (person, frozenset({person, owner}))
        self.conversation_of = {owner: sample for sample, owner in ingested.identities.items()}

    def turns(self, notes: Sequence[Any]) -> list[tuple[str, str | None]]:
        """(sample_id, dia_id) of each note: the turn it stores."""
        return [(self.conversation_of.get(n.owner, "?"), self.ingested.dia_ids.get(n.id)) for n in notes]


def _enrolled(layout: Layout, bio: BioSet, work: Path, text: TextEncoder, args: argparse.Namespace) -> Any:
    """A BioMemory on a copy of the layout's store, its people enrolled with their galleries."""
    from biomem import BioMemory

    copy = work / f"{layout.name}.db"
    shutil.copyfile(layout.ingested.db, copy)
    mem = BioMemory(copy, encoder=bio.modality, text_model=text, llm="offline", policy=args.policy, k=args.k)
    for j, (person, _) in layout.people.items():
        # ground truth, stored as given (as biomem.eval.locomo enrols)
        mem.store.add_templates(person, bio.modality, np.stack([p.embedding for p in bio.galleries[j]]))
    if bio.tau is not None:
        mem.set_threshold(bio.tau, bio.modality, source=bio.tau_source)
    return mem


def gate_check(mem: Any, layout: Layout, bio: BioSet) -> dict[str, Any]:
    """Each enrolled person's probe through the gate: admitted as themselves (TAR), and as anyone else
    (false accepts over every other enrolled person)."""
    rows, false_pairs = [], 0
    for j, (person, _) in sorted(layout.people.items()):
        gate = mem.identify(bio.probes[j])
        others = sorted(set(gate.admitted) - {person})
        false_pairs += len(others)
        rows.append({"probe": j, "person": layout.ingested.labels[person], "score": gate.scores.get(person),
                     "accepted": person in gate.admitted,
                     "also_admitted": [layout.ingested.labels[o] for o in others]})
    people = len(rows)
    return {"threshold": mem.threshold(bio.modality), "probes": rows,
            "tar": float(np.mean([r["accepted"] for r in rows])),
            "false_accept_pairs": false_pairs, "pairs": people * (people - 1)}


def ask_all(mem: Any, layout: Layout, bio: BioSet, plan: Sequence[tuple[Question, int]], k: int,
            n: int) -> list[dict[str, Any]]:
    """Every question of `plan` (question, its conversation's position) by every role of the layout."""
    records = []
    roles = [role for (name, role) in ROLES if name == layout.name]
    for question, i in plan:
        evidence = [(question.conversation, e) for e in question.evidence]
        for role in roles:
            j = ROLES[(layout.name, role)](i, n)
            person, readable = layout.people[j]
            result = mem.search(question.question, probe=bio.probes[j], k=k)
            hits = [note for note, _ in result.notes]
            turns = layout.turns(hits)
            records.append({
                "layout": layout.name, "role": role, "conversation": question.conversation,
                "qa_index": question.index, "category": question.category, "question": question.question,
                "evidence": list(question.evidence), "probe": layout.ingested.labels[person],
                "admitted": [layout.ingested.labels.get(a, str(a)) for a in result.gate.admitted],
                "retrieved": [{"note": note.id, "owner": layout.ingested.labels.get(note.owner, str(note.owner)),
                               "dia_id": dia, "score": round(float(score), 4)}
                              for (note, score), (_, dia) in zip(result.notes, turns)],
                "recall": evidence_recall(evidence, turns),
                "leaked": sum(note.owner not in readable for note in hits),
                "of_this_conversation": sum(c == question.conversation for c, _ in turns),
            })
    return records


def summarize(records: Sequence[dict[str, Any]], gates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per (layout, role): recall, leakage, empty results; and how often a speaker's top K is the single
    owner's, turn for turn."""
    rows = {}
    for layout, role in ROLES:
        picked = [r for r in records if r["layout"] == layout and r["role"] == role]
        retrieved = sum(len(r["retrieved"]) for r in picked)
        leaked = sum(r["leaked"] for r in picked)
        rows[f"{layout}/{role}"] = {
            "layout": layout, "role": role, "questions": len(picked), "recall": percent(r["recall"] for r in picked),
            "leaked": leaked, "retrieved": retrieved, "leakage": 100 * leaked / retrieved if retrieved else 0.0,
            "of_the_question_conversation": sum(r["of_this_conversation"] for r in picked),
            "empty": sum(not r["retrieved"] for r in picked)}
    single = {(r["conversation"], r["qa_index"]): [x["dia_id"] for x in r["retrieved"]]
              for r in records if (r["layout"], r["role"]) == ("single", "owner")}
    same = {}
    for role in ("speaker A", "speaker B"):
        picked = [r for r in records if (r["layout"], r["role"]) == ("households", role)]
        same[role] = sum([x["dia_id"] for x in r["retrieved"]] == single[(r["conversation"], r["qa_index"])]
                         for r in picked) / max(1, len(picked))
    return {"rows": rows, "same_top_k_as_single_owner": same, "gate": gates}


def markdown(summary: dict[str, Any], config: dict[str, Any], timings: dict[str, Any]) -> str:
    """The run's table, as printed and written to results.md."""
    gates = summary["gate"]
    first = "" if config["max_turns"] is None else f", the first {config['max_turns']} of each"
    lines = [
        f"### LoCoMo households check, {config['dataset']}", "",
        f"`{config['command']}`", "",
        (f"{config['questions']} questions (categories {', '.join(map(str, config['categories']))}) over "
         f"{len(config['conversations'])} conversations ({config['notes']} turns{first}); "
         f"K = {config['k']}; τ = {gates['single']['threshold']:.4f} ({config['tau_source']}); gate policy "
         f"`{config['policy']}`; notes built by `{config['ingest_llm']}`; text model `{config['text_model']}`. "
         "Retrieval only: `search(question, probe, k)`; a note leaks when the probe's person may not read it."), "",
        "| Store | Probe | Questions | Evidence recall@K | Leaked / retrieved notes | Leakage "
        "| Notes of the asked conversation | Empty results |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    titles = {"single": "single owner per conversation (today)",
              "households": "household: the two speakers' group"}
    shown = set()
    for row in summary["rows"].values():
        title = "" if row["layout"] in shown else titles[row["layout"]]
        shown.add(row["layout"])
        recall = "–" if row["recall"] is None else f"{row['recall']:.2f}%"
        lines.append(f"| {title} | {row['role']} | {row['questions']} | {recall} | {row['leaked']} / "
                     f"{row['retrieved']} | {row['leakage']:.2f}% | {row['of_the_question_conversation']} "
                     f"| {row['empty']} |")
    same = summary["same_top_k_as_single_owner"]
    lines += ["", (f"Top K identical, turn for turn, to the single owner's: speaker A {100 * same['speaker A']:.1f}%, "
                   f"speaker B {100 * same['speaker B']:.1f}% of questions."),
              ""]
    for name, gate in gates.items():
        accepted = sum(r["accepted"] for r in gate["probes"])
        lines.append(f"Gate, {name} store: {accepted}/{len(gate['probes'])} people admitted as themselves "
                     f"(TAR {100 * gate['tar']:.0f}%), {gate['false_accept_pairs']} of {gate['pairs']} "
                     "(probe, other person) pairs falsely admitted.")
    lines += ["", (f"Timings: ingestion {timings['ingest_s']['single']:.1f} s (single) and "
                   f"{timings['ingest_s']['households']:.1f} s (households)"
                   f"{', cached' if all(timings['ingest_cached'].values()) else ''}; enrolment "
                   f"{timings['enrol_s']:.1f} s; retrieval {timings['search_s']:.1f} s for "
                   f"{timings['searches']} searches; total {timings['total_s']:.1f} s."), ""]
    return "\n".join(lines)


def evaluate(args: argparse.Namespace, text: TextEncoder | None = None) -> dict[str, Any]:
    """Ingest both layouts (cached), enrol on copies, ask every sampled question in every role, score."""
    wall = time.perf_counter()
    conversations, data, data_sha256, cache_dir = load_conversations(args)
    n = len(conversations)
    start = time.perf_counter()
    bio = load_source(args.bio, 2 * n, encoder=args.encoder, tau=args.tau, seed=args.seed)
    enrol_s = time.perf_counter() - start
    text = MemoTextEncoder(text or TextEncoder(args.text_model))
    protocol = PaperProtocol(args.k, 0, "question")
    layouts = {name: Layout(name, ingest(conversations, data_sha256=data_sha256, cache_dir=cache_dir, text=text,
                                         llm=args.ingest_llm, max_turns=args.max_turns, protocol=protocol,
                                         layout=name), conversations)
               for name in ("single", "households")}
    questions = sample_questions([q for c in conversations for q in c.questions], args.sample, args.seed,
                                 list(protocol.categories))
    position = {c.sample_id: i for i, c in enumerate(conversations)}
    plan = [(q, position[q.conversation]) for q in questions]
    records: list[dict[str, Any]] = []
    gates: dict[str, dict[str, Any]] = {}
    search_s = 0.0
    with tempfile.TemporaryDirectory(prefix="biomem-households-") as work:
        for name, layout in layouts.items():
            start = time.perf_counter()
            mem = _enrolled(layout, bio, Path(work), text, args)
            enrol_s += time.perf_counter() - start
            try:
                gates[name] = gate_check(mem, layout, bio)
                start = time.perf_counter()
                records += ask_all(mem, layout, bio, plan, args.k, n)
                search_s += time.perf_counter() - start
            finally:
                mem.close()
    config = {
        "command": getattr(args, "command_line", "biomem eval households"), "data": str(data),
        "data_sha256": data_sha256, "conversations": [c.sample_id for c in conversations],
        "max_turns": args.max_turns, "notes": len(layouts["single"].ingested.dia_ids), "bio": args.bio,
        "dataset": bio.name, "modality": bio.modality, "tau_source": bio.tau_source, "policy": args.policy,
        "probes": "speaker A of conversation i: biometric identity i (the single owner's); speaker B: n + i; "
                  "non-members: both speakers of conversation (i + 1) mod n",
        "ingest_llm": args.ingest_llm, "text_model": text.name, "threads": args.threads, "k": args.k,
        "sample": args.sample, "seed": args.seed, "questions": len(questions),
        "categories": list(protocol.categories), "engine": __version__, "cache_dir": str(cache_dir),
        "cache_keys": {name: layout.ingested.key for name, layout in layouts.items()},
    }
    timings = {"ingest_s": {name: layout.ingested.seconds for name, layout in layouts.items()},
               "ingest_cached": {name: layout.ingested.cached for name, layout in layouts.items()},
               "enrol_s": enrol_s, "search_s": search_s, "searches": len(records),
               "total_s": time.perf_counter() - wall}
    return {"config": config, "timings": timings, "summary": summarize(records, gates), "records": records}


def run(args: argparse.Namespace, text: TextEncoder | None = None) -> dict[str, Any]:
    """Evaluate with --threads torch threads (restored afterwards); write results.md and records.json."""
    return run_and_write(args, evaluate, markdown, text)
