"""The embedded SQLite store: one file, WAL, per-owner partitions beside it (see biomem.stores.sqlite.store)."""

from .store import Store

__all__ = ["Store"]
