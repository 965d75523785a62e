"""What every `biomem` command shares: the engine of the settings and --db, and printing JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import InvalidInputError


def memory(args: argparse.Namespace):  # noqa: ANN202 - BioMemory, imported lazily (torch is slow)
    """The BioMemory of the settings, with --db, --encoder, --llm and --policy over them."""
    from ..engine.memory import BioMemory

    return BioMemory.from_settings(args.settings.model_copy(update={
        "db": args.db, "encoder": args.encoder, "llm": args.llm, "policy": args.policy}))


def store_exists(db: str) -> bool:
    """Whether --db names a store that is there already: a PostgreSQL URL, or an SQLite file on disk."""
    from ..stores import is_postgres, sqlite_path

    return is_postgres(db) or sqlite_path(db).exists()


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def json_argument(text: str) -> Any:
    """A JSON command-line value (--metadata, --filters); InvalidInputError when it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"not JSON: {text!r} ({exc.msg})") from None
