"""Evaluation of Bio-Memory on LoCoMo under the biometric gate: `biomem eval locomo`, and the households
check `biomem eval households` (biomem.eval.households).

The command line is built here and imports nothing heavy (nltk alone takes seconds to
import): `biomem.cli` can add it to every `biomem` invocation at no cost. The protocol
itself lives in `biomem.eval.locomo` and loads when a benchmark runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .locomo_data import default_cache_dir


def add_common_arguments(parser: argparse.ArgumentParser, *, bio_help: str, out: str, out_help: str) -> None:
    """The options `biomem eval locomo` and `biomem eval households` share: data, identities, gate, sample."""
    parser.add_argument("--data", type=Path, default=None,
                        help="locomo10.json (downloaded there when absent; default: in --cache-dir)")
    parser.add_argument("--bio", default="palmsynth", help=bio_help)
    parser.add_argument("--encoder", default=None,
                        help="biometric encoder (palmsynth: palm-compcode or palm-ccnet; faces, folder: "
                             "face-arcface-s)")
    parser.add_argument("--tau", type=float, default=None, help="gate threshold (default: the encoder's)")
    parser.add_argument("--policy", default="all", choices=["all", "best"],
                        help="gate policy: all = the paper's rule, every identity at or above τ (default)")
    parser.add_argument("--ingest-llm", default="offline", help="note construction at ingestion (default offline)")
    parser.add_argument("--text-model", default=None, help="sentence encoder (default all-MiniLM-L6-v2)")
    parser.add_argument("--sample", type=float, default=1.0,
                        help="fraction of questions, stratified per category and seeded (default 1: all)")
    parser.add_argument("--seed", type=int, default=0, help="question sample and palm seeds (default 0)")
    parser.add_argument("-k", type=int, default=10, help="notes retrieved per question (default 10)")
    parser.add_argument("--conversations", type=int, default=None, help="use the first N conversations")
    parser.add_argument("--max-turns", type=int, default=None,
                        help="smoke runs: ingest the first N turns of each conversation and keep "
                             "only questions whose evidence lies in them")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for the text encoder (default 1: on the shared 2-core machine "
                             "two threads ran ~10x slower under load)")
    parser.add_argument("--cache-dir", type=Path, default=None, help=f"default {default_cache_dir()}")
    parser.add_argument("--out", type=Path, default=Path(out), help=out_help)


def add_locomo_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `biomem eval locomo`."""
    add_common_arguments(parser, bio_help="palmsynth | faces | folder:DIR | embeddings:FILE (default palmsynth)",
                         out="locomo_eval",
                         out_help="folder for results.md, records.json and chart.png (default ./locomo_eval)")
    parser.add_argument("--protocol", default="paper", choices=["paper", "amem"],
                        help="paper: the seed paper's (categories 1, 2, 4, macro average; default); amem: A-Mem's "
                             "own evaluation choices (turn text, dates, query keywords, links, 5 categories, "
                             "its answer prompts, micro average); see biomem.eval.protocols")
    parser.add_argument("--query", default=None, choices=["question", "keywords"],
                        help="retrieve with the question or the LLM's query keywords (default: the protocol's)")
    parser.add_argument("--links", type=int, default=None,
                        help="linked notes followed per hit (default: the protocol's, paper 0, amem k)")
    parser.add_argument("--llm", default="offline", help="answers: offline | openai:<model> | hf:<model-id>")


def add_households_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `biomem eval households` (biomem.eval.households)."""
    add_common_arguments(parser, bio_help="palmsynth | faces | folder:DIR | embeddings:FILE (default palmsynth); "
                                          "two identities per conversation: faces allows 8 conversations",
                         out="households_eval",
                         out_help="folder for results.md and records.json (default ./households_eval)")


def add_eval_parser(commands: Any) -> None:
    """Add `eval locomo` to a parser's sub-commands (`commands` from add_subparsers)."""
    parser = commands.add_parser("eval", help="benchmarks under the gate: `biomem eval locomo --help`")
    benchmarks = parser.add_subparsers(dest="benchmark", required=True)
    locomo = benchmarks.add_parser("locomo", help="the paper's LoCoMo Owner / Non-owner protocol",
                                   description="LoCoMo under the biometric gate: Owner, Non-owner and "
                                               "ungated baseline; prints the paper's tables.")
    add_locomo_arguments(locomo)
    locomo.set_defaults(func=run_locomo)
    households = benchmarks.add_parser(
        "households", help="LoCoMo with each conversation's two speakers sharing it as a household",
        description="Each LoCoMo conversation's two speakers are enrolled as people and share the conversation "
                    "as their group's memory; both retrieve it, members of another household do not. Beside "
                    "it, in the same run, today's single-owner store: evidence recall@K and leakage of each.")
    add_households_arguments(households)
    households.set_defaults(func=run_households)


def run_locomo(args: argparse.Namespace) -> None:
    """Run the protocol, print its tables and say where the records and chart went."""
    from .locomo import run

    results = run(args)
    print((args.out / "results.md").read_text())
    print(f"wrote {args.out / 'records.json'} ({len(results['records'])} records) and {args.out / 'chart.png'}")


def run_households(args: argparse.Namespace) -> None:
    """Run the households check, print its table and say where the records went."""
    from .households import run

    results = run(args)
    print((args.out / "results.md").read_text())
    print(f"wrote {args.out / 'records.json'} ({len(results['records'])} records)")
