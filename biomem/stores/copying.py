"""`biomem migrate SOURCE TARGET`: copy a whole store to another backend, row for row, and prove it.

Every table is copied with its ids, the never-reused id counters are carried over (an id a deleted
row had is not given again in the target), and so is the store id that sealed templates are bound to,
so the same key opens them. The target must be empty. At the end each table's row count and a
checksum of every row are read back from both stores and compared; any difference is an error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidInputError, StoreCorruptError
from ..settings import Settings
from . import open_store
from .base import COUNTED, OWN_META, TABLES, StoreCore


@dataclass(frozen=True)
class TableCheck:
    """One table after a copy: its rows and the checksum both sides agreed on."""

    table: str
    rows: int
    checksum: str


def copied_rows(store: StoreCore, table: str) -> Iterator[tuple]:
    """The rows of `table` a copy carries: all of them, but the meta rows each store keeps by itself."""
    return (row for row in store.export_rows(table) if table != "meta" or row[0] not in OWN_META)


def table_checksum(store: StoreCore, table: str) -> tuple[int, str]:
    """(rows, SHA-256 over every copied row) of one table, independent of the order rows come in."""
    digests = sorted(hashlib.sha256(repr(_canonical(row)).encode()).digest() for row in copied_rows(store, table))
    return len(digests), hashlib.sha256(b"".join(digests)).hexdigest()


def _canonical(row: tuple) -> tuple:
    """A row as both stores export it (floats as their repr, bytes as hex)."""
    return tuple(value.hex() if isinstance(value, (bytes, memoryview)) else
                 repr(float(value)) if isinstance(value, float) else value for value in row)


def copy_store(source: str | Path, target: str | Path, *, key: bytes | None = None,
               settings: Settings | None = None) -> list[TableCheck]:
    """Copy every row of `source` into the empty store at `target`; returns each table's checked count
    and checksum. StoreCorruptError if any table differs after the copy (the target is then left as is,
    for inspection; it is not a usable store)."""
    with closing(open_store(source, key=key, settings=settings)) as old, \
            closing(open_store(target, key=key, settings=settings)) as new:
        if any(new.counts().values()):
            raise InvalidInputError(f"{new.location} already holds data: the target of a copy must be empty")
        dim = old.get_meta("text_dim")
        if dim is not None:  # PostgreSQL types its embedding column for this dimension
            new.search_index(int(dim))
        for table in TABLES:
            new.import_rows(table, copied_rows(old, table))
            if table in COUNTED:
                new.set_id_floor(table, old.id_floor(table))
        checks = []
        for table in TABLES:
            before, after = table_checksum(old, table), table_checksum(new, table)
            if before != after:
                raise StoreCorruptError(f"the copy of {table} differs: {before[0]} rows in {old.location}, "
                                        f"{after[0]} in {new.location}; checksums {before[1][:12]} / {after[1][:12]}")
            checks.append(TableCheck(table, *after))
        if new.note_total() != old.note_total():
            raise StoreCorruptError(f"the target counts {new.note_total()} notes, the source {old.note_total()}")
        return checks

