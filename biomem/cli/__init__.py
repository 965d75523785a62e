"""The `biomem` command: enrol, remember, ask, search, forget and inspect one database file.

    biomem enroll alice alice1.jpg alice2.jpg
    biomem add "My PIN is 1234" --probe alice3.jpg
    biomem ask "What is my PIN?" --probe alice3.jpg
    biomem group create Home --probe alice3.jpg; biomem group join 4 --probe alice3.jpg --member-probe bob.jpg
    biomem add "The Wi-Fi password is sunflower" --probe alice3.jpg --scope 4
    biomem forget --probe alice4.jpg
    biomem keys create kiosk --role agent; biomem serve --host 0.0.0.0
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from ..errors import BioMemError
from ..eval import add_eval_parser
from ..settings import Settings
from .operator import add_calibrate_command, add_sample_commands, add_service_commands, add_store_commands
from .people import add_memory_commands


def build_parser(settings: Settings) -> argparse.ArgumentParser:
    """The `biomem` command line; the global options default to `settings`."""
    parser = argparse.ArgumentParser(prog="biomem", description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=settings.db, help="database file (default $BIOMEM_DB or ./biomem.db)")
    parser.add_argument("--encoder", default=settings.encoder,
                        help="default biometric encoder of a new store (default $BIOMEM_ENCODER)")
    parser.add_argument("--llm", default=settings.llm,
                        help="offline | openai:<model> | hf:<model-id> (default $BIOMEM_LLM or offline)")
    parser.add_argument("--policy", default=settings.policy, choices=["best", "all"],
                        help="gate policy (default $BIOMEM_POLICY or best)")
    sub = parser.add_subparsers(dest="command", required=True)
    add_memory_commands(sub)
    add_store_commands(sub)
    add_calibrate_command(sub)
    add_sample_commands(sub)
    add_service_commands(sub, settings)
    add_eval_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `biomem` console script; typed errors become one line and exit 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        settings = Settings.from_env()
    except BioMemError as exc:
        return _failed(exc)
    args = build_parser(settings).parse_args(argv)
    args.settings = settings
    args.command_line = shlex.join(["biomem", *argv])  # recorded by runs such as `biomem eval locomo`
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    try:
        args.func(args)
    except BioMemError as exc:
        return _failed(exc)
    return 0


def _failed(exc: BioMemError) -> int:
    print(f"biomem: {exc.__class__.__name__}: {exc}", file=sys.stderr)
    return 2
