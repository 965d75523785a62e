"""Erasure: a person or a group gone from the store, their index partitions and the LLM's caches, and no byte of
them left in the database, its write-ahead log or the index folder before the call returns."""

from __future__ import annotations

from ..notes.llm import LLM
from ..stores import MemoryStore, SearchIndex


class Erasure:
    """Erases owners (people and groups) with everything derived from their notes."""

    def __init__(self, store: MemoryStore, partitions: SearchIndex, llm: LLM) -> None:
        self.store = store
        self.partitions = partitions
        self.llm = llm

    def erase(self, owner: int, timeout: float = 10.0) -> None:
        """Delete `owner`'s rows (a person's memberships and group notes too), the index partitions and LLM caches
        of every owner whose notes changed, then checkpoint (ForgetIncompleteError when a reader holds it)."""
        touched: list[int] = []
        try:
            touched = self.store.delete_identity(owner)
        finally:
            for erased in (owner, *touched):  # their groups' indexes held their notes' vectors too
                self.dropped(erased)
        self.store.checkpoint(timeout)

    def dropped(self, owner: int) -> None:
        """Forget what was derived from `owner`'s notes: their index partition and the LLM's cached answers."""
        self.partitions.drop(owner)
        self.llm.drop_owner(owner)

    def finish(self, timeout: float = 10.0) -> None:
        """Finish an erasure that ForgetIncompleteError interrupted: wait up to `timeout` s for other readers, then
        empty the write-ahead log that still held the erased pages."""
        self.store.checkpoint(timeout)
