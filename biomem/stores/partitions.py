"""Per-owner vector partitions, the SQLite store's search index: the storage form of isolation.

A partition holds only one owner's note embeddings, so a search can never rank another
person's note. Small partitions are searched exactly over a cached matrix; a partition
with at least `hnsw_threshold` notes gets an hnswlib index saved next to the database,
stamped with the owner's generation so a stale or missing file is rebuilt, never trusted.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import hnswlib
import numpy as np

from .base import NoteStore, StoreCore, Within
from .blas import one_thread


@dataclass
class Partition:
    """One owner's searchable vectors at one generation."""

    ids: np.ndarray  # note ids, oldest first
    matrix: np.ndarray  # (n, dim) unit-norm float32 rows aligned with ids
    generation: int
    hnsw: hnswlib.Index | None = None
    dirty: bool = False  # hnsw changed in memory since its file was written
    by_id: np.ndarray | None = None  # argsort(ids) for mapping hnsw labels, built on first use

    # A Partition is a snapshot: ids and matrix are never changed in place (see Partitions.added).


def wipe(path: Path) -> None:
    """Overwrite a file with zeros, flush it to disk, then delete it (no-op when absent)."""
    try:
        with open(path, "r+b") as handle:
            size = handle.seek(0, 2)
            handle.seek(0)
            for _ in range(0, size, 1 << 20):
                handle.write(bytes(min(1 << 20, size - handle.tell())))
            handle.flush()
            os.fsync(handle.fileno())
    except FileNotFoundError:
        return
    path.unlink(missing_ok=True)


HNSW_THRESHOLD = 20_000  # notes per owner from which a partition gets an hnswlib index (default)
# An exact scan of at most this many floats (512 KB: 341 notes of 384-d) scores each row with np.vecdot, one
# thread by construction; a larger one takes BLAS gemv on one thread. Switching BLAS's threads (threadpoolctl)
# cost about 0.1 ms with cold caches, a sixth of a search after the gate at 1M notes (benchmarks/peers.py).
SMALL_SCAN = 1 << 17


class PartitionedStore(NoteStore, StoreCore, Protocol):
    """What Partitions reads of its store: note vectors and generations (NoteStore), and the store id its index
    files are stamped with (StoreCore)."""


class Partitions:
    """Cache of partitions keyed by owner id; reloads an owner whenever its generation moved."""

    def __init__(self, store: PartitionedStore, index_dir: str | Path, dim: int, *,
                 hnsw_threshold: int = HNSW_THRESHOLD, ef_search: int = 256) -> None:
        self.store = store
        self.index_dir = Path(index_dir)
        self.dim = dim
        self.hnsw_threshold = hnsw_threshold
        self.ef_search = ef_search
        self._cache: dict[int, Partition] = {}
        self._lock = threading.RLock()

    def _files(self, owner_id: int) -> tuple[Path, Path]:
        stem = self.index_dir / f"owner-{owner_id}"
        return stem.with_suffix(".hnsw"), stem.with_suffix(".json")

    def get(self, owner_id: int) -> Partition:
        """The owner's partition, loaded from the store (and the index file) when stale."""
        with self._lock:
            cached = self._cache.get(owner_id)
            if cached is not None and cached.generation == self.store.generation(owner_id):
                return cached
            ids, matrix, generation = self.store.note_vectors(owner_id)
            if matrix is None:
                matrix = np.zeros((0, self.dim), dtype=np.float32)
            part = Partition(ids, matrix, generation)
            if len(ids) >= self.hnsw_threshold:
                part.hnsw = self._load_or_build_hnsw(owner_id, part)
            self._cache[owner_id] = part
            return part

    def _load_or_build_hnsw(self, owner_id: int, part: Partition) -> hnswlib.Index:
        index_file, stamp_file = self._files(owner_id)
        index = hnswlib.Index(space="ip", dim=self.dim)
        if index_file.exists() and stamp_file.exists():
            stamp = json.loads(stamp_file.read_text())
            if stamp == self._stamp(part):
                index.load_index(str(index_file))
                index.set_ef(max(self.ef_search, 10))
                return index
        index.init_index(max_elements=len(part.ids), ef_construction=400, M=32)
        index.add_items(part.matrix, part.ids)
        index.set_ef(max(self.ef_search, 10))
        part.hnsw = index
        self._save(owner_id, part)
        return index

    def _stamp(self, part: Partition) -> dict:
        """What an index file must match to be trusted: this store, the owner's generation."""
        return {"store": self.store.store_id, "generation": part.generation, "count": len(part.ids),
                "dim": self.dim}

    def _save(self, owner_id: int, part: Partition) -> None:
        """Write the owner's index, unless the owner is gone or moved on (another instance
        forgot or changed it): a forgotten person's vectors are never written back."""
        if self.store.generation(owner_id) != part.generation:
            self._cache.pop(owner_id, None)
            return
        index_file, stamp_file = self._files(owner_id)
        self.index_dir.mkdir(parents=True, exist_ok=True)
        part.hnsw.save_index(str(index_file))
        stamp_file.write_text(json.dumps(self._stamp(part)))
        part.dirty = False
        if self.store.generation(owner_id) == -1:  # forgotten while we wrote
            self.drop(owner_id)

    def search(self, owner_id: int, query: np.ndarray, k: int,
               within: Within | None = None) -> list[tuple[int, float]]:
        """Top-k (note id, cosine) inside one owner's partition, best first, ties oldest first; with `within`,
        among the notes it allows only (an exact scan of those rows, whatever the partition's size)."""
        part = self.get(owner_id)
        if within is not None and (within.where is not None or within.excluded or within.only is not None):
            return self._search_rows(part, self._allowed(owner_id, part, within), query, k)
        n = len(part.ids)
        k = min(k, n)
        if k <= 0:
            return []
        if part.hnsw is not None:
            with self._lock:  # hnswlib's index changes in place (resize, add): query it with its snapshot
                current = self._cache.get(owner_id)
                if current is not None and current.hnsw is part.hnsw:
                    part = current
                part.hnsw.set_ef(max(self.ef_search, k))
                labels = part.hnsw.knn_query(query, k=min(k, len(part.ids)))[0][0]
                if part.by_id is None:
                    part.by_id = np.argsort(part.ids)
            found = np.searchsorted(part.ids, labels, sorter=part.by_id).clip(max=len(part.ids) - 1)
            positions = part.by_id[found]
            positions = positions[part.ids[positions] == labels]  # a label newer than the snapshot
            scores = part.matrix[positions] @ query
            order = np.lexsort((positions, -scores))  # by score, then chronological position
            return [(int(part.ids[positions[i]]), float(scores[i])) for i in order]
        return self._search_rows(part, None, query, k)

    def _allowed(self, owner_id: int, part: Partition, within: Within) -> np.ndarray:
        """Positions of the partition's rows that `within` allows."""
        keep = np.ones(len(part.ids), dtype=bool)
        if within.where is not None:
            keep &= np.isin(part.ids, self.store.note_ids_where(owner_id, within.where))
        if within.excluded:
            keep &= ~np.isin(part.ids, np.fromiter(within.excluded, dtype=np.int64))
        if within.only is not None:
            keep &= np.isin(part.ids, np.fromiter(within.only, dtype=np.int64))
        return np.flatnonzero(keep)

    @staticmethod
    def _search_rows(part: Partition, rows: np.ndarray | None, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Exact top-k over the partition's rows at positions `rows` (None: all), ties oldest first."""
        matrix = part.matrix if rows is None else part.matrix[rows]
        n = len(matrix)
        k = min(k, n)
        if k <= 0:
            return []
        if matrix.size <= SMALL_SCAN:
            scores_all = np.vecdot(matrix, query)
        else:
            with one_thread():
                scores_all = matrix @ query
        positions = np.argpartition(-scores_all, k - 1)[:k] if k < n else np.arange(n)
        scores = scores_all[positions]
        order = np.lexsort((positions, -scores))  # by score, then chronological position
        ids = part.ids if rows is None else part.ids[rows]
        return [(int(ids[positions[i]]), float(scores[i])) for i in order]

    def size(self, owner_id: int) -> int:
        return len(self.get(owner_id).ids)

    def drop(self, owner_id: int) -> None:
        """Forget an owner's partition: the cached matrix and the index files, overwritten
        with zeros before they are unlinked."""
        with self._lock:
            self._cache.pop(owner_id, None)
            for path in self._files(owner_id):
                wipe(path)

    def cached_owners(self) -> list[int]:
        with self._lock:
            return sorted(self._cache)

    # Incremental maintenance after the engine's own writes. Each store write bumps the
    # owner's generation by one; if the cache is exactly one behind it is patched, otherwise
    # (another process wrote too) it is dropped and reloaded on the next search. A patch
    # swaps in a new snapshot: a search holding the old one never sees half a change.
    def _patchable(self, owner_id: int, generation: int) -> Partition | None:
        part = self._cache.get(owner_id)
        if part is None or part.generation != generation - 1:
            self._cache.pop(owner_id, None)
            return None
        return part

    def _swap(self, owner_id: int, part: Partition, generation: int, ids: np.ndarray,
              matrix: np.ndarray) -> None:
        self._cache[owner_id] = replace(part, ids=ids, matrix=matrix, generation=generation,
                                        dirty=part.hnsw is not None, by_id=None)

    def added(self, owner_id: int, note_ids: list[int], vectors: np.ndarray, generation: int) -> None:
        with self._lock:
            part = self._patchable(owner_id, generation)
            if part is None:
                return
            ids = np.concatenate([part.ids, np.asarray(note_ids, dtype=np.int64)])
            if part.hnsw is None and len(ids) >= self.hnsw_threshold:
                self._cache.pop(owner_id)  # crossed the threshold: build the index on next use
                return
            if part.hnsw is not None:
                part.hnsw.resize_index(len(ids))
                part.hnsw.add_items(vectors, note_ids)
            self._swap(owner_id, part, generation, ids, np.concatenate([part.matrix, vectors.astype(np.float32)]))

    def updated(self, owner_id: int, note_id: int, vector: np.ndarray, generation: int) -> None:
        with self._lock:
            part = self._patchable(owner_id, generation)
            if part is None:
                return
            matrix = part.matrix.copy()
            matrix[int(np.flatnonzero(part.ids == note_id)[0])] = vector
            if part.hnsw is not None:
                part.hnsw.add_items(vector[None, :], [note_id])  # same label: replaced in place
            self._swap(owner_id, part, generation, part.ids, matrix)

    def deleted(self, owner_id: int, note_id: int, generation: int) -> None:
        with self._lock:
            part = self._patchable(owner_id, generation)
            if part is None:
                return
            keep = part.ids != note_id
            if part.hnsw is not None:
                # mark_deleted keeps the vector in the graph and in the saved file: overwrite it first
                decoy = np.random.default_rng().standard_normal(self.dim).astype(np.float32)
                part.hnsw.add_items((decoy / np.linalg.norm(decoy))[None, :], [note_id])
                part.hnsw.mark_deleted(note_id)
            self._swap(owner_id, part, generation, part.ids[keep], part.matrix[keep])

    def flush(self) -> None:
        """Write every hnsw index changed in memory, stamped with its generation."""
        with self._lock:
            for owner_id, part in list(self._cache.items()):
                if part.hnsw is not None and part.dirty:
                    self._save(owner_id, part)
