"""The gate's candidate path: an hnswlib index over one modality's templates, kept in step with
enrolment, and the exact score of every template of each identity it returns.

The exact scan (biomem.identity.gate.Gate.scores) reads every template: at 100,000 people × 5 captures × 512-d
that is 1 GB per probe. The candidate path asks an hnswlib index (space "ip" over the unit-norm templates) for
the k templates nearest the probe, then scores every template of each identity among them exactly, with the
product the scan uses (`cosines`: a row's float32 score is the same bits wherever the row sits, which BLAS's
matrix-vector product does not promise: it scores the last rows of a matrix with another kernel), so a
candidate's best score is the scan's, bit for bit.

What an hnswlib search does not do is find a lone template far from everything else the probe resembles. A
stranger's probe draws its top scores from the tail of 500,000 impostor scores (0.03 ± 0.08); the few that reach
0.36 or 0.43 are not near it in the graph. Measured on face-like templates (biomem.identity.synthetic's
SyntheticFaces, face-arcface-s's τ 0.4291): over 50,000 templates (M 16, ef_construction 200), the 64
nearest missed a template at or above τ − 0.07 for 17%, 8% and 2% of 1,000 strangers' probes at ef 64, 128
and 256, though the 64th already scored below that; over 10,000 (M 16, ef_construction 100, ef 128), probes
aimed at one template at τ ± 0.02 missed a template at or above τ 25 times in 1,000; over 50,000, a blend of
two people scoring 0.74 and 0.58 missed a third person's template at 0.45.
So "the k-th neighbour scores below the floor" is no completeness certificate for a refusal, and the gate
(`Gate._candidates`) lets the candidate path only admit, and only a strong match (the best identity τ + δ and
τ + STRONG or more): it is near enrolled templates, where the graph is dense, and a runner-up at τ or more is
either near it too or, for a blend of two people, near the probe's part orthogonal to its best template, which
the gate searches as well. Every refusal (nobody, a weak match, an ambiguous probe) is the exact scan's, read
through the int8 screen (biomem.identity.screen), which proves what it sets aside.
tests/test_gate_candidates.py checks 100,000 probes of both kinds, and those aimed at the edges, against the scan.

The index is built lazily per modality, off the request path (`CandidateIndexes`, a background thread that makes the
int8 screen first: the screen, or before it the exact scan, answers meanwhile), and follows enrolment incrementally
(hnswlib add_items, mark_deleted) when few rows changed; it answers only for the exact template snapshot it
reflects, so a stale index is never read: a forgotten person's labels are deleted before the index answers for the
store without them, and a new person's rows are in it before it answers for the store with them. It lives in memory
only: templates are sealed at rest (biomem.stores.sealing) and an index file would hold them in the clear.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property

import hnswlib
import numpy as np

from .screen import Screen

log = logging.getLogger(__name__)

# From how many template cells (templates × dimension) of one modality the gate takes the candidate path, and
# decides what it declines through the int8 screen (biomem.identity.screen) rather than the float32 scan.
# benchmarks/gate.py's crossover (benchmarks/results/gate_10000x5.json, 2 shared cores under load, p50 genuine /
# stranger): identify's path against the exact scan took 0.80 / 0.60 against 0.60 / 0.51 ms at 8,000 × 512,
# 1.21 / 1.13 against 1.23 / 1.19 ms at 16,000 × 512, 1.52 / 1.91 against 4.64 / 3.52 ms at 40,000 × 512: they
# cross near 16,000 × 512 = 8,192,000 cells. The switch sits at 10,000 × 512, the most the proof test's 5,000 × 2
# enrolment (tests/test_gate_candidates.py) allows. Below it, no index or screen, and a decision lists every
# identity's score, as the scan does.
CANDIDATE_CELLS = 5_120_000
# The candidate path decides only a probe whose best identity clears τ by δ and by STRONG (a cosine gap), one
# near an enrolled template, where the graph is dense. With 0.18 (face-arcface-s's δ) the proof test's 100,000
# probes over 10,000 people × 5 captures found one candidate decision in 29,417 that differed from the scan's:
# a probe aimed at one template at 0.61 admitted its owner though a lone template of someone else, far from the
# probe's neighbours, scored τ or more. 0.30 leaves such probes to the scan and still lets the candidate path
# decide 95% of genuine probes (SyntheticFaces: 5% score below 0.727; face-arcface-s's sample faces: 5% below
# 0.632, 25% below 0.948). An encoder whose scores crowd near 1 (face-dlib: τ 0.95) never clears it.
STRONG = 0.30
# Templates asked of the index, which is also its search breadth (hnswlib's ef is max(ef, k), and ef stays at
# EF_QUERY, below k, so no query ever changes another's breadth): K nearest the probe, K × WIDEN once when the
# K-th still scores τ or more, then the exact scan; K_REST nearest the probe's part orthogonal to its best
# template.
K = 64
WIDEN = 4
K_REST = 32
EF_QUERY = 16
# The candidate path declines a probe, before scoring anything exactly, when hnswlib's own inner product with the
# nearest template it found is below τ + STRONG by more than HINT: its float32 sum is within 1e-5 of the scan's,
# so this leaves out strangers' probes, not strong matches (and a decline is always safe: the screen decides).
HINT = 0.01
# hnswlib's graph degree and construction breadth (build time grows with both). Over 10,000 people × 5 captures
# at face-arcface-s's τ, the candidate path's decisions differed from the scan's 16 times in 8,017 with M 16 and
# ef_construction 100 (a runner-up at τ or more left unfound: five captures of one person fill a sparse
# graph's links), never in 8,188 with M 32 and 200 (docs/gate.md; the proof test checks 100,000 more).
M = 32
EF_CONSTRUCTION = 200
BUILD_THREADS = 1  # a build runs beside the requests it speeds up: one core of two
REBUILD_SHARE = 0.05  # an enrolment change touching more rows than this share of the index rebuilds it
DELETED_SHARE = 0.2  # ... as do deleted labels past this share of the live ones (they still cost hops)


def cosines(matrix: np.ndarray, probe: np.ndarray) -> np.ndarray:
    """The float32 cosine of each unit-norm row with the unit-norm probe: the exact scan's and the candidate
    check's one product, a row's score the same wherever the row sits (np.vecdot; BLAS gemv is not)."""
    return np.vecdot(matrix, probe)


@dataclass(frozen=True, eq=False)
class Templates:
    """One modality's templates as the gate loaded them at one enrolment version, rows grouped by identity."""

    version: str
    ids: np.ndarray  # identity of each row
    matrix: np.ndarray  # (rows, dim) unit-norm float32
    owners: np.ndarray  # identity of each group of rows, in row order
    starts: np.ndarray  # first row of each group, then the row count
    group: np.ndarray  # the group of each row (a gather per lookup, not a search: ~100 a candidate decision)

    @classmethod
    def load(cls, version: str, ids: np.ndarray, matrix: np.ndarray) -> Templates:
        ids = np.asarray(ids, dtype=np.int64)
        firsts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.zeros(0, np.int64)
        owners = ids[firsts]
        starts = np.r_[firsts, len(ids)].astype(np.int64)
        return cls(version, ids, matrix, owners, starts, np.repeat(np.arange(len(owners), dtype=np.int64),
                                                                   np.diff(starts)))

    @property
    def rows(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1]) if self.matrix.ndim == 2 else 0

    def best(self, probe: np.ndarray) -> np.ndarray:
        """The exact scan: the probe's best cosine with each group's templates."""
        if not self.rows:
            return np.zeros(0, dtype=np.float32)
        return np.maximum.reduceat(cosines(self.matrix, probe), self.starts[:-1])

    @cached_property
    def screen(self) -> Screen:
        """The int8 screen of the matrix, made on first use (0.14 s for 50,000 × 512): by the background refresh
        (`CandidateIndexes`), or carried over from the previous snapshot (`carry_screen`)."""
        return Screen.build(self.matrix)

    @property
    def screened(self) -> bool:
        """Whether the int8 screen is made: until it is, the gate scans exactly rather than wait for it."""
        return "screen" in self.__dict__

    def carry_screen(self, old: Templates) -> None:
        """Make the screen from `old`'s when few rows changed (REBUILD_SHARE): the kept rows' codes copied, the
        new rows quantised, an enrolment's cost rather than a build's; else the background refresh makes it."""
        if not old.screened or old.dim != self.dim:
            return
        keep_old, keep_new = self.kept(old)
        if self.rows - len(keep_new) + old.rows - len(keep_old) <= REBUILD_SHARE * max(self.rows, 1):
            object.__setattr__(self, "screen", old.screen.carry(keep_old, self.matrix, keep_new))

    def kept(self, old: Templates) -> tuple[np.ndarray, np.ndarray]:
        """(rows of `old`, the same rows here) of the identities whose templates carried over unchanged: an
        identity that kept its templates, or gained some, keeps them; one that went or whose templates changed
        keeps none."""
        old_counts, new_counts = np.diff(old.starts), np.diff(self.starts)
        _, at_old, at_new = np.intersect1d(old.owners, self.owners, assume_unique=True, return_indices=True)
        grows = new_counts[at_new] >= old_counts[at_old]
        at_old, at_new = at_old[grows], at_new[grows]
        old_rows, firsts = old.rows_of(at_old)
        new_rows = np.repeat(self.starts[at_new] - old.starts[at_old], old_counts[at_old]) + old_rows
        same = _rows_equal(old.matrix, old_rows, self.matrix, new_rows)
        kept = np.logical_and.reduceat(same, firsts) if len(firsts) else np.zeros(0, bool)
        at_old, at_new = at_old[kept], at_new[kept]
        keep_old, _ = old.rows_of(at_old)
        return keep_old, np.repeat(self.starts[at_new] - old.starts[at_old], old_counts[at_old]) + keep_old

    def above(self, probe: np.ndarray, level: float, reach: float = np.inf,
              lower: float | None = None) -> tuple[np.ndarray, np.ndarray, float]:
        """(groups, their exact best cosine, the level) of every group scoring the level or more with the probe,
        and no other: `level`, or `lower` when some group reaches `reach` (a match, whose runner-up the margin rule
        reads lower down). The screen's rows are scored exactly (a group's best row reaches the level, so the
        screen keeps it); its int8 products are read once for both levels."""
        near, wide = self.screen.rows_at(probe, level, level if lower is None else lower)
        groups, best = self._reaching(near, probe, level)
        if lower is not None and lower < level and len(best) and float(best.max()) >= reach:
            return *self._reaching(wide, probe, lower), lower
        return groups, best, level

    def _reaching(self, rows: np.ndarray, probe: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
        """(groups, exact best cosine) of the groups whose rows among `rows` score `level` or more."""
        sims = cosines(self.matrix[rows], probe)
        reached = sims >= level
        rows, sims = rows[reached], sims[reached]
        if not len(rows):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        groups = self.group[rows]
        firsts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])  # rows ascend, so groups do
        return groups[firsts], np.maximum.reduceat(sims, firsts)

    def groups_of(self, rows: np.ndarray) -> np.ndarray:
        """The group of each row."""
        return self.group[rows]

    def rows_of(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(every row of these groups, each group's first position in it)."""
        firsts = self.starts[groups]
        counts = self.starts[groups + 1] - firsts
        ends = np.cumsum(counts)
        offsets = ends - counts
        return np.arange(int(ends[-1]) if len(ends) else 0) + np.repeat(firsts - offsets, counts), offsets

    def score(self, groups: np.ndarray, probe: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(every row of these groups, ascending; its exact cosine with the probe; each group's best): the scan's
        scores, bit for bit (`cosines`)."""
        rows, offsets = self.rows_of(groups)
        sims = cosines(self.matrix[rows], probe)
        return rows, sims, np.maximum.reduceat(sims, offsets) if len(rows) else sims


class _Shared:
    """Many readers or one writer; a reader never waits for a writer (it scans exactly instead)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False

    @contextmanager
    def reading(self) -> Iterator[bool]:
        with self._cond:
            allowed = not self._writing
            self._readers += allowed
        try:
            yield allowed
        finally:
            if allowed:
                with self._cond:
                    self._readers -= 1
                    self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._writing = True
            self._cond.wait_for(lambda: self._readers == 0)
        try:
            yield
        finally:
            with self._cond:
                self._writing = False


class CandidateIndex:
    """An hnswlib index over the templates of one snapshot (`templates`), labels mapped to its rows."""

    def __init__(self, templates: Templates, *, threads: int = BUILD_THREADS) -> None:
        started = time.perf_counter()
        n = templates.rows
        self._hnsw = hnswlib.Index(space="ip", dim=templates.dim)
        self._hnsw.init_index(max_elements=max(n, 1), ef_construction=EF_CONSTRUCTION, M=M)
        self._hnsw.add_items(templates.matrix, np.arange(n), num_threads=threads)
        self._hnsw.set_ef(EF_QUERY)
        self.templates = templates
        self._labels = np.arange(n, dtype=np.int64)  # the label of each row of `templates`
        self._rows = np.arange(n, dtype=np.int64)  # the row of each label, -1 once deleted
        self._deleted = 0
        self._lock = _Shared()
        self.threads = threads
        self.seconds = time.perf_counter() - started  # build time
        self.updates = 0  # incremental updates since the build

    @property
    def size(self) -> int:
        return self.templates.rows

    def nearest(self, query: np.ndarray, k: int, templates: Templates) -> tuple[np.ndarray, float] | None:
        """(the rows of the k templates nearest `query`, hnswlib's own inner product with the nearest: a hint, not
        the scan's score); None when the index does not reflect `templates` (stale) or is being updated."""
        with self._lock.reading() as allowed:
            if not allowed or self.templates is not templates:
                return None
            try:
                labels, distances = self._hnsw.knn_query(query, k=min(k, templates.rows), num_threads=1)
            except RuntimeError:  # hnswlib found fewer than k (deleted labels fill the graph): scan exactly
                return None
            returned = self._rows[labels[0]]
        if returned.min() < 0:  # a deleted label: never expected; the exact scan is the safe answer
            return None
        return returned, 1.0 - float(distances[0, 0])

    def update(self, new: Templates) -> bool:
        """Bring the index to `new` in place when few rows changed (False: rebuild instead). An identity that
        kept its templates and gained some keeps its labels; one that went, or whose templates changed, has its
        labels deleted; new rows are added. Queries meanwhile scan exactly."""
        old = self.templates
        if new.dim != old.dim:
            return False
        keep_old, keep_new = new.kept(old)  # rows whose labels carry over
        gone = np.setdiff1d(np.arange(old.rows), keep_old, assume_unique=True)
        added = np.setdiff1d(np.arange(new.rows), keep_new, assume_unique=True)
        if len(gone) + len(added) > REBUILD_SHARE * max(new.rows, 1) or \
                self._deleted + len(gone) > DELETED_SHARE * max(new.rows, 1):
            return False
        labels = np.empty(new.rows, dtype=np.int64)
        labels[keep_new] = self._labels[keep_old]
        first = len(self._rows)
        labels[added] = np.arange(first, first + len(added))
        rows = np.full(first + len(added), -1, dtype=np.int64)
        rows[labels] = np.arange(new.rows)
        with self._lock.writing():
            needed = self._hnsw.element_count + len(added)
            if needed > self._hnsw.max_elements:
                self._hnsw.resize_index(max(needed, int(self._hnsw.max_elements * 1.25)))
            for label in self._labels[gone]:
                self._hnsw.mark_deleted(int(label))
            if len(added):
                self._hnsw.add_items(new.matrix[added], labels[added], num_threads=self.threads)
            self.templates, self._labels, self._rows = new, labels, rows
            self._deleted += len(gone)
            self.updates += 1
        return True


def _rows_equal(a: np.ndarray, a_rows: np.ndarray, b: np.ndarray, b_rows: np.ndarray,
                chunk: int = 8192) -> np.ndarray:
    """Whether a[a_rows[i]] and b[b_rows[i]] hold the same values, row by row (in chunks: no full copy)."""
    out = np.empty(len(a_rows), dtype=bool)
    for start in range(0, len(a_rows), chunk):
        part = slice(start, start + chunk)
        out[part] = np.all(a[a_rows[part]] == b[b_rows[part]], axis=1)
    return out


class CandidateIndexes:
    """The candidate index of each modality, refreshed to the gate's latest template snapshot: on a background
    thread (`background`, the default: the gate scans exactly until it is ready) or inline."""

    def __init__(self, *, background: bool = True, threads: int = BUILD_THREADS) -> None:
        self.background = background
        self.threads = threads
        self._indexes: dict[str, CandidateIndex] = {}
        self._wanted: dict[str, Templates] = {}  # the latest snapshot each stale modality should reflect
        self._failed: dict[str, Templates] = {}  # a snapshot whose build raised is not tried again
        self._lock = threading.Lock()
        self._refreshing = threading.Lock()
        self._worker: threading.Thread | None = None

    def get(self, modality: str, templates: Templates) -> CandidateIndex | None:
        """The modality's index if it reflects `templates`; else None, after asking for a refresh."""
        index = self._indexes.get(modality)
        if index is not None and index.templates is templates:
            return index
        with self._lock:
            if self._failed.get(modality) is templates:
                return None
            self._wanted[modality] = templates
            if self.background:
                if self._worker is None:
                    self._worker = threading.Thread(target=self._work, name="biomem-gate-index", daemon=True)
                    self._worker.start()
                return None
        self._work()
        index = self._indexes.get(modality)
        return index if index is not None and index.templates is templates else None

    def drop(self, modality: str) -> None:
        """Forget the modality's index (the store fell below the switch size)."""
        with self._lock:
            self._wanted.pop(modality, None)
            self._indexes.pop(modality, None)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the background refresh to finish (benchmarks and tests); False on timeout."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)
            return not worker.is_alive()
        return True

    def _work(self) -> None:
        with self._refreshing:
            while True:
                with self._lock:
                    if not self._wanted:
                        if threading.current_thread() is self._worker:
                            self._worker = None
                        return
                    modality, templates = self._wanted.popitem()
                try:
                    self._refresh(modality, templates)
                except Exception:  # the exact scan keeps answering; this snapshot is not tried again
                    log.exception("could not index the %s templates; the gate scans them exactly", modality)
                    with self._lock:
                        self._failed[modality] = templates

    def _refresh(self, modality: str, templates: Templates) -> None:
        """The int8 screen first (a fraction of a second, and the gate's path meanwhile), then the index."""
        if not templates.screened:
            started = time.perf_counter()
            _ = templates.screen
            log.info("screened %d %s templates in %.2f s", templates.rows, modality, time.perf_counter() - started)
        index = self._indexes.get(modality)
        if index is not None and index.templates is templates:
            return
        if index is not None and index.update(templates):
            return
        built = CandidateIndex(templates, threads=self.threads)
        log.info("indexed %d %s templates for the gate in %.1f s", templates.rows, modality, built.seconds)
        with self._lock:
            self._indexes[modality] = built
