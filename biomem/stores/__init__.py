"""The storage layer: the store interface and `open_store`, which picks the embedded SQLite store (sqlite/) or
PostgreSQL + pgvector (pg/); records, sealed templates, partitions and copies between stores.

`open_store(location)`: a file path or `sqlite:///path` opens the SQLite store; `postgresql://…` opens the
PostgreSQL store, where row-level security is the last line of owner isolation.
"""

from __future__ import annotations

from pathlib import Path

from ..settings import Settings
from .base import (
    AttemptStore,
    IdentityStore,
    KeyStore,
    MemoryStore,
    NoteStore,
    SearchIndex,
    StoreCore,
    ThresholdStore,
    is_postgres,
    sqlite_path,
)


def open_store(location: str | Path, *, key: bytes | None = None, settings: Settings | None = None) -> MemoryStore:
    """The store at `location`: PostgreSQL for a postgresql:// URL, else the SQLite file. Each backend loads
    when it is first opened (psycopg is only needed for PostgreSQL)."""
    if is_postgres(location):
        from .pg import PostgresStore
        return PostgresStore(str(location), key=key, settings=settings)
    from .sqlite import Store
    return Store(sqlite_path(location), key=key, settings=settings)


__all__ = ["AttemptStore", "IdentityStore", "KeyStore", "MemoryStore", "NoteStore", "SearchIndex", "StoreCore",
           "ThresholdStore", "is_postgres", "open_store", "sqlite_path"]
