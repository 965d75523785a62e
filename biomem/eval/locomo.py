"""LoCoMo under the biometric gate: the paper's Owner / Non-owner protocol, and an ungated baseline.

    biomem eval locomo --data ../shared/data/locomo/locomo10.json --bio palmsynth --llm offline
    results = run(args)  # args from biomem.eval.add_locomo_arguments; writes results.md, records.json, chart.png

Ten conversations become ten identities in one shared store (identity is the conversation,
not the speaker: "John" is three different people). Every turn is a note of its
conversation's identity, time-stamped with its session's date, in the protocol's wording
(biomem.eval.protocols: `paper`, the default, or `amem`). Each question is asked as the
owner (another capture of the owner's biometric), as a non-owner (the probe of the next
identity in the store) and without a gate (top-K over every note). The data itself
(locomo10.json, parsed, trimmed and sampled) is biomem.eval.locomo_data's, re-exported here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from biomem import __version__
from biomem.errors import InvalidInputError
from biomem.notes.textenc import TextEncoder
from biomem.stores.sqlite.schema import SCHEMA_VERSION

from .biosources import load_source, non_owner
from .locomo_data import (
    LOCOMO_SHA256,
    LOCOMO_URL,
    Conversation,
    DataUnavailableError,
    Question,
    Turn,
    default_cache_dir,
    ensure_data,
    file_sha256,
    load_locomo,
    sample_questions,
    trim,
)
from .metrics import word_tokenizer
from .protocols import AMemProtocol, Asker, PaperProtocol, Protocol
from .report import bar_chart, markdown, summarize

__all__ = [
    "LOCOMO_SHA256", "LOCOMO_URL", "Conversation", "DataUnavailableError", "Ingested", "MemoTextEncoder",
    "LAYOUTS", "Question", "Turn", "answer_all", "ensure_data", "evaluate", "file_sha256", "gate_check", "ingest",
    "load_locomo", "make_protocol", "run", "sample_questions", "trim",
]

INGEST_CHUNK = 128  # turns per add_many call: one progress-bar step


# ---- ingestion, cached ------------------------------------------------------------------------

LAYOUTS = ("single", "households")


@dataclass
class Ingested:
    """A store holding every turn as a note of its conversation's owner: a (template-less) identity in the
    "single" layout, or in the "households" layout a group whose members are the conversation's speakers
    (template-less people)."""

    db: Path
    key: str
    identities: dict[str, int]  # sample_id -> the owner of its notes: an identity id, or a group id
    dia_ids: dict[int, str]  # note id -> dia_id
    seconds: float  # wall time of the ingestion that built the cache entry
    cached: bool
    people: dict[str, list[int]] = field(default_factory=dict)  # sample_id -> its speakers' person ids, in
    # order of first turn (households; in the single layout, [the conversation's identity])
    labels: dict[int, str] = field(default_factory=dict)  # every person and group id -> its label


def ingest(conversations: Sequence[Conversation], *, data_sha256: str, cache_dir: Path, text: TextEncoder,
           llm: str, max_turns: int | None, protocol: Protocol, layout: str = "single") -> Ingested:
    """Ingest once per configuration; later runs reuse the cached SQLite file.

    The key covers the data file, the conversations and turn limit, the text model, the
    note-building LLM, the engine and schema versions, the protocol's note format and (when not
    "single") the layout. Identities are made without templates: enrolment belongs to a biometric
    source and is done on a copy. Layout "households": each conversation's speakers are people
    ("conv-26: Caroline"), the operator founds their group (create_group(identity=), add_member(identity=))
    and imports the turns into it (add_many(identity=<group id>)).
    """
    if layout not in LAYOUTS:
        raise InvalidInputError(f"unknown layout {layout!r}: one of {LAYOUTS}")
    fields = {"data_sha256": data_sha256, "conversations": [c.sample_id for c in conversations],
              "max_turns": max_turns, "text_model": text.name, "llm": llm, "engine": __version__,
              "schema": SCHEMA_VERSION, "note_format": protocol.note_format}
    if layout != "single":  # the single layout keeps the keys of earlier runs' caches
        fields["layout"] = layout
    key = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    entry = cache_dir / key
    cached = (entry / "ingest.json").is_file()
    if not cached:
        _build(entry, fields, conversations, text, llm, protocol, layout)
    meta = json.loads((entry / "ingest.json").read_text())
    identities = meta["identities"]
    people = meta.get("people") or {s: [i] for s, i in identities.items()}
    labels = {int(k): v for k, v in meta["labels"].items()} if "labels" in meta else \
        {i: s for s, i in identities.items()}
    return Ingested(db=entry / "store.db", key=key, identities=identities,
                    dia_ids={int(k): v for k, v in meta["dia_ids"].items()}, seconds=meta["seconds"],
                    cached=cached, people=people, labels=labels)


def _owner(mem: Any, conversation: Conversation, layout: str, people: dict[str, list[int]],
           labels: dict[int, str]) -> int:
    """The owner of a conversation's notes in `layout`, made with the operator's calls."""
    none = np.zeros((0, 0), np.float32)
    if layout == "single":
        owner = mem.store.add_identity(conversation.sample_id, "none", none).id
        people[conversation.sample_id], labels[owner] = [owner], conversation.sample_id
        return owner
    speakers = list(dict.fromkeys(t.speaker for t in conversation.turns))
    ids = [mem.store.add_identity(f"{conversation.sample_id}: {s}", "none", none).id for s in speakers]
    group = mem.create_group(conversation.sample_id, identity=ids[0])
    for other in ids[1:]:
        group = mem.add_member(group.id, identity=other)
    people[conversation.sample_id] = ids
    labels.update({i: f"{conversation.sample_id}: {s}" for i, s in zip(ids, speakers)})
    labels[group.id] = f"{conversation.sample_id} (household)"
    return group.id


def _build(entry: Path, fields: dict[str, Any], conversations: Sequence[Conversation], text: TextEncoder,
           llm: str, protocol: Protocol, layout: str = "single") -> None:
    """Ingest into a private folder, then move it into place (a crash leaves no half entry)."""
    from biomem import BioMemory

    partial = entry.with_name(f"{entry.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    start = time.perf_counter()
    identities: dict[str, int] = {}
    people: dict[str, list[int]] = {}
    labels: dict[int, str] = {}
    dia_ids: dict[int, str] = {}
    total = sum(len(c.turns) for c in conversations)
    with BioMemory(partial / "store.db", text_model=text, llm=llm) as mem, \
            tqdm(total=total, desc=f"ingest ({layout})", unit="turn", mininterval=2.0) as bar:
        for conversation in conversations:
            owner = _owner(mem, conversation, layout, people, labels)
            identities[conversation.sample_id] = owner
            for start_turn in range(0, len(conversation.turns), INGEST_CHUNK):
                chunk = conversation.turns[start_turn:start_turn + INGEST_CHUNK]
                ids = mem.add_many([protocol.note(t) for t in chunk], identity=owner,
                                   timestamps=[t.date for t in chunk])
                dia_ids.update(zip(ids, (t.dia_id for t in chunk)))
                bar.update(len(chunk))
    meta = {"key": fields, "identities": identities, "people": people, "labels": labels, "dia_ids": dia_ids,
            "notes": len(dia_ids), "seconds": round(time.perf_counter() - start, 2)}
    (partial / "ingest.json").write_text(json.dumps(meta, indent=1))
    shutil.rmtree(partial / "store.db.index", ignore_errors=True)  # derived; rebuilt from SQLite
    try:
        partial.rename(entry)
    except OSError:  # another run filled the entry first: keep theirs
        shutil.rmtree(partial, ignore_errors=True)


# ---- asking -----------------------------------------------------------------------------------

class MemoTextEncoder(TextEncoder):
    """A loaded TextEncoder that embeds each distinct string once per run.

    Each question is asked three times (owner, non-owner, ungated), and the offline answerer's
    own sentence cache is bounded (4,096) while a run reads sentences of all 5,882 notes:
    memoised, the answering phase costs about one pass over the distinct questions and
    retrieved sentences.
    """

    def __init__(self, inner: TextEncoder) -> None:
        self.__dict__.update(vars(inner))  # share the loaded model, its lock and word vectors
        self._memo: dict[str, np.ndarray] = {}

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        self._memo.update(zip(missing, super().encode(missing, batch_size)))
        return np.stack([self._memo[t] for t in texts]) if texts else super().encode(texts)


def gate_check(asker: Asker) -> dict[str, Any]:
    """Each owner probe against its gallery (TAR) and each non-owner probe against the owner's (FAR)."""
    rows = []
    for index, owner in enumerate(asker.owners):
        other = non_owner(index, len(asker.owners))
        own = asker.mem.identify(asker.bio.probes[index])
        foreign = asker.mem.identify(asker.bio.probes[other])
        rows.append({"identity": asker.labels[owner], "owner_score": own.scores[owner],
                     "accepted": owner in own.admitted, "non_owner": asker.labels[asker.owners[other]],
                     "non_owner_score": foreign.scores[owner], "false_accept": owner in foreign.admitted})
    return {"threshold": asker.mem.threshold(asker.bio.modality), "probes": rows,
            "tar": float(np.mean([r["accepted"] for r in rows])),
            "far": float(np.mean([r["false_accept"] for r in rows]))}


def answer_all(asker: Asker, plan: Sequence[tuple[Question, int]]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Gated (owner, then non-owner probe) and ungated (τ = -1, every identity admitted) answers."""
    records: list[dict[str, Any]] = []
    seconds: dict[str, float] = {}
    with tqdm(total=3 * len(plan), desc="answer", unit="q", mininterval=2.0) as bar:
        start = time.perf_counter()
        for question, index in plan:
            for role, probe_index in (("owner", index), ("non-owner", non_owner(index, len(asker.owners)))):
                records.append(asker.record(question, index, "gated", role, asker.ask(question, probe_index)))
                bar.update()
        seconds["answer_gated_s"] = time.perf_counter() - start
        # Plain A-Mem over all users: every partition admitted, merged top-K = global top-K by cosine.
        # The probe no longer matters, so one answer per question is scored for both probes.
        asker.mem.set_threshold(-1.0, asker.bio.modality, source="ungated baseline")
        start = time.perf_counter()
        for question, index in plan:
            answer = asker.ask(question, index, policy="all")
            records += [asker.record(question, index, "ungated", role, answer) for role in ("owner", "non-owner")]
            bar.update()
        seconds["answer_ungated_s"] = time.perf_counter() - start
    return records, seconds


# ---- the command ------------------------------------------------------------------------------

def run(args: argparse.Namespace, text: TextEncoder | None = None) -> dict[str, Any]:
    """Evaluate with --threads torch threads (restored afterwards), then write the three outputs.

    `text`: an already loaded text encoder to reuse (tests); default TextEncoder(--text-model).
    """
    results = run_and_write(args, evaluate, markdown, text)
    bar_chart(results["summary"], results["config"], args.out / "chart.png")
    return results


def run_and_write(args: argparse.Namespace, evaluate: Callable[..., dict[str, Any]],
                  markdown: Callable[..., str], text: TextEncoder | None) -> dict[str, Any]:
    """`evaluate(args, text)` with --threads torch threads (restored afterwards); its records.json and
    results.md (`markdown` of its summary, config and timings) written to --out."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        results = evaluate(args, text)
    finally:
        torch.set_num_threads(threads)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "records.json").write_text(json.dumps(results, indent=1, ensure_ascii=False, default=str))
    (args.out / "results.md").write_text(markdown(results["summary"], results["config"], results["timings"]))
    return results


def load_conversations(args: argparse.Namespace) -> tuple[list[Conversation], Path, str, Path]:
    """The conversations --data, --conversations and --max-turns select, the data file, its SHA-256 and the
    cache folder; InvalidInputError for a bad --sample or fewer than 2 conversations (the other one is
    where a non-owner comes from)."""
    if not 0.0 < args.sample <= 1.0:
        raise InvalidInputError(f"--sample must lie in (0, 1], got {args.sample}")
    cache_dir = args.cache_dir or default_cache_dir()
    data = ensure_data(args.data or cache_dir / "locomo10.json")
    conversations = [trim(c, args.max_turns) for c in load_locomo(data)[:args.conversations]]
    if len(conversations) < 2:
        raise InvalidInputError("LoCoMo under the gate needs at least 2 conversations: a non-owner is another "
                                "conversation's person")
    return conversations, data, file_sha256(data), cache_dir


def evaluate(args: argparse.Namespace, text: TextEncoder | None) -> dict[str, Any]:
    """Ingest (cached), enrol the biometric source on a copy of the store, ask every question, score."""
    from biomem import BioMemory

    wall = time.perf_counter()
    conversations, data, data_sha256, cache_dir = load_conversations(args)
    start = time.perf_counter()
    bio = load_source(args.bio, len(conversations), encoder=args.encoder, tau=args.tau, seed=args.seed)
    enrol_s = time.perf_counter() - start
    text = MemoTextEncoder(text or TextEncoder(args.text_model))
    dates = {(c.sample_id, t.dia_id): t.date for c in conversations for t in c.turns}
    protocol = make_protocol(args.protocol, args.k, args.seed, dates, links=args.links, query=args.query)
    ingested = ingest(conversations, data_sha256=data_sha256, cache_dir=cache_dir, text=text,
                      llm=args.ingest_llm, max_turns=args.max_turns, protocol=protocol)
    questions = sample_questions([q for c in conversations for q in c.questions], args.sample, args.seed,
                                 list(protocol.categories))
    position = {c.sample_id: i for i, c in enumerate(conversations)}
    owners = [ingested.identities[c.sample_id] for c in conversations]
    with tempfile.TemporaryDirectory(prefix="biomem-locomo-") as work:
        shutil.copyfile(ingested.db, Path(work) / "store.db")
        with BioMemory(Path(work) / "store.db", encoder=bio.modality, text_model=text, llm=args.llm,
                       policy=args.policy, k=args.k) as mem:
            start = time.perf_counter()
            for owner, gallery in zip(owners, bio.galleries):
                # Ground truth, not a visitor: stored as given (an impostor look-alike between two
                # galleries is what the evaluation measures, not an enrolment to refuse).
                mem.store.add_templates(owner, bio.modality, np.stack([p.embedding for p in gallery]))
            if bio.tau is not None:
                mem.set_threshold(bio.tau, bio.modality, source=bio.tau_source)
            enrol_s += time.perf_counter() - start
            asker = Asker(mem, bio, owners, {i: s for s, i in ingested.identities.items()}, ingested.dia_ids,
                          protocol)
            gate = gate_check(asker)
            records, seconds = answer_all(asker, [(q, position[q.conversation]) for q in questions])
    config = {
        "command": args.command_line, "data": str(data), "data_sha256": data_sha256,
        "conversations": [c.sample_id for c in conversations], "max_turns": args.max_turns, "bio": args.bio,
        "dataset": bio.name, "modality": bio.modality, "tau": gate["threshold"], "tau_source": bio.tau_source,
        "policy": args.policy, "gallery": "the first 2 captures (1 when only 2 exist) enrol, the next one probes",
        "non_owner": "conversation i is asked by identity (i + 1) mod n", "llm": args.llm,
        "ingest_llm": args.ingest_llm, "text_model": text.name, "threads": args.threads, "k": args.k,
        "sample": args.sample, "seed": args.seed, "questions": len(questions),
        "bleu_tokenizer": word_tokenizer()[0], "engine": __version__, "cache_dir": str(cache_dir),
        "cache_key": ingested.key, **protocol.config(),
    }
    timings = {"ingest_s": ingested.seconds, "ingest_cached": ingested.cached, "notes": len(ingested.dia_ids),
               "enrol_s": enrol_s, **seconds, "total_s": time.perf_counter() - wall}
    summary = summarize(records, gate, protocol.categories, protocol.average)
    return {"config": config, "timings": timings, "summary": summary, "records": records}


def make_protocol(name: str, k: int, seed: int, dates: dict[tuple[str, str], str], *, links: int | None = None,
                  query: str | None = None) -> Protocol:
    """The protocol called `name` ("paper" or "amem"); `dates` by (sample_id, dia_id), for A-Mem's context.
    `links` and `query` override the protocol's own choice (paper: 0 and the question; amem: k and keywords)."""
    if name == "paper":
        return PaperProtocol(k, 0 if links is None else links, query or "question")
    if name == "amem":
        return AMemProtocol(k, k if links is None else links, query or "keywords", seed, dates)
    raise InvalidInputError(f"unknown protocol {name!r}: paper or amem")
