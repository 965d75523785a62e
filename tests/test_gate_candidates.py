"""The gate's candidate path and its int8 screen decide as the exact scan does.

The proof: 100,000 probes (random people and strangers, and probes aimed just above and below τ of one person,
at the near-miss band, at τ + δ where the candidate path hands over to the scan, and blends of two people that
tie within δ or clear τ for both) against 10,000 synthetic people × 5 captures × 512-d (face-like templates,
biomem.identity.candidates.SyntheticFaces): the candidate path's admitted set, identity and ambiguous flag equal
the exact scan's, and every identity scoring at or above its result's floor is listed with the exact scan's
score, bit for bit. The exact scan's decision for all 100,000 comes from a float32 matrix product screened with
a margin (scores more than 1e-3 below every threshold cannot change a comparison) and every score near or above
a threshold recomputed with the scan's own product. Each probe asks the candidate path (`Gate._candidates`, what
`Gate.decide` runs first) and the screen (`Gate._screened`, what decides a probe the candidate path declines),
and every 50th probe goes through the whole of `Gate.decide`, with a floor and
without (its exact scan against the reference).
A quick run (3,500 probes, 5,000 people × 2 captures) is in the default selection; the 100,000 are marked slow.

Then the index's life cycle on a store that changes: a newly enrolled person is found on the next decision, a
forgotten one is never admitted, a stale index is never read (the scan answers until it is brought up to date),
and a change of a few rows updates the index in place.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from biomem.identity import candidates
from biomem.identity.candidates import CANDIDATE_CELLS, Templates, cosines
from biomem.identity.gate import DEFAULT_MARGINS, Gate, GateResult, Probe, _admit, fuse
from biomem.identity.synthetic import ArrayTemplates, SyntheticFaces

TAU = 0.4291  # face-arcface-s's calibrated τ (docs/gate-calibration.md) ...
DELTA = DEFAULT_MARGINS["face-arcface-s"]  # ... its δ ...
BAND = 0.50 - TAU  # ... and its near-miss band: near 1.0 × (step-up τ 0.50 − τ)
MODALITY = "face-synthetic"
Enrolment = tuple[np.ndarray, np.ndarray, np.ndarray]  # identity ids, templates, centres


@pytest.fixture(scope="module")
def faces() -> SyntheticFaces:
    return SyntheticFaces(seed=28)


@functools.cache
def enrolled(people: int, captures: int) -> tuple[SyntheticFaces, Enrolment, Gate]:
    """A synthetic enrolment, its generator (for strangers like its people) and a gate over it with its index
    built (once per size)."""
    faces = SyntheticFaces(seed=people)
    enrolment = faces.gallery(people, captures)
    ids, matrix, _ = enrolment
    gate = Gate(ArrayTemplates(ids, matrix, MODALITY), background=False)
    gate.candidates.threads = 2  # the test's build; the server's builds beside its requests on one
    assert len(ids) * matrix.shape[1] >= CANDIDATE_CELLS, "the proof needs a store on the candidate path"
    assert gate.candidates.get(MODALITY, gate._templates(MODALITY)) is not None
    return faces, enrolment, gate


def _aimed(faces: SyntheticFaces, targets: np.ndarray, cosine: np.ndarray) -> np.ndarray:
    """Unit probes at `cosine` from each target (a template or a centre), the rest of the way a stranger's face."""
    away = faces.centres(len(targets))
    away -= np.sum(away * targets, axis=1, keepdims=True) * targets
    away /= np.linalg.norm(away, axis=1, keepdims=True)
    return (cosine[:, None] * targets + np.sqrt(1 - cosine ** 2)[:, None] * away).astype(np.float32)


def probes(faces: SyntheticFaces, enrolment: Enrolment, n: int) -> dict[str, np.ndarray]:
    """n probes in seven kinds: people, strangers, aimed at τ ± 0.02 of a template, at the near-miss band, at
    τ + δ ± 0.02, blends of two people within δ of each other, blends that clear τ for both."""
    ids, matrix, centres = enrolment
    rng = np.random.default_rng(n)
    each = n // 7

    def pick(count: int) -> np.ndarray:
        return rng.integers(0, len(centres), count)

    def aimed(low: float, high: float) -> np.ndarray:
        return _aimed(faces, matrix[rng.integers(0, len(matrix), each)], rng.uniform(low, high, each))

    def blends(low: float, high: float) -> np.ndarray:
        w = rng.uniform(low, high, each)[:, None].astype(np.float32)
        mixed = w * centres[pick(each)] + (1 - w) * centres[pick(each)]
        return faces.captures(mixed / np.linalg.norm(mixed, axis=1, keepdims=True))

    kinds = {"people": faces.captures(centres[pick(each)]), "strangers": faces.captures(faces.centres(each)),
             "around τ": aimed(TAU - 0.02, TAU + 0.02), "near-miss band": aimed(TAU - BAND - 0.02, TAU - BAND + 0.02),
             "around τ + δ": aimed(TAU + DELTA - 0.02, TAU + DELTA + 0.02), "ties within δ": blends(0.42, 0.58),
             "above τ for two": blends(0.3, 0.7)}
    kinds["people"] = np.concatenate([kinds["people"], faces.captures(centres[pick(n - 7 * each)])])
    return kinds


def reference(templates: Templates, batch: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The exact scan's (identities, best scores, which are exact) for each probe of the batch: the scan's own
    product wherever a score is within 1e-3 of the lowest level a decision or a reader compares it with, else the
    float32 matrix product's (off by < 1e-5, so below every such level, like the exact score)."""
    screen = min(TAU - BAND, TAU - DELTA) - 1e-3
    best = np.maximum.reduceat(batch @ templates.matrix.T, templates.starts[:-1], axis=1)
    out = []
    for probe, row in zip(batch, best):
        groups = np.flatnonzero(row >= screen)
        rows, offsets = templates.rows_of(groups)
        if len(groups):
            row[groups] = np.maximum.reduceat(cosines(templates.matrix[rows], probe), offsets)
        exact = np.zeros(len(row), dtype=bool)
        exact[groups] = True
        out.append((templates.owners, row, exact))
    return out


def mismatch(found: GateResult, ids: np.ndarray, best: np.ndarray, exact: np.ndarray, policy: str) -> str | None:
    """What differs between the gate's decision and the exact scan's (ids, best), or None."""
    admitted, ambiguous = _admit(ids, best, TAU, policy, DELTA)
    if (found.admitted, found.ambiguous, found.identity) != (admitted, ambiguous, admitted[0] if admitted else None):
        return f"decided {found.admitted} ambiguous {found.ambiguous}, the scan {admitted} {ambiguous}"
    listed = dict(zip(found.identity_ids.tolist(), found.best_scores.tolist()))
    if found.floor == -math.inf and len(listed) != len(ids):
        return f"lists {len(listed)} of {len(ids)} identities with floor -inf"
    for i in np.flatnonzero((best >= found.floor) & exact):
        got = listed.get(int(ids[i]))
        if got != float(best[i]):
            return f"identity {ids[i]} scores {best[i]} >= floor {found.floor} but is listed as {got}"
    if found.floor > -math.inf and np.any((best >= found.floor) & ~exact):
        return "the reference screened out a score above the floor"
    return None


@pytest.mark.parametrize("people, captures, n", [
    pytest.param(5_000, 2, 3_500, id="5000x2-3.5k"),
    pytest.param(10_000, 5, 100_000, id="10000x5-100k", marks=[pytest.mark.slow, pytest.mark.timeout(3600)])])
def test_the_candidate_path_and_the_screen_decide_as_the_exact_scan(people: int, captures: int, n: int) -> None:
    faces, enrolment, gate = enrolled(people, captures)
    templates = gate._templates(MODALITY)
    gate.paths.clear()
    failures: list[str] = []
    checked = declined = 0
    for kind, batch in probes(faces, enrolment, n).items():
        for start in range(0, len(batch), 1000):
            chunk = [Probe(vector, MODALITY) for vector in batch[start:start + 1000]]
            exact = reference(templates, np.stack([p.embedding for p in chunk]))
            for j, probe in enumerate(chunk):
                policy, floor = "best" if j % 4 else "all", TAU - BAND if j % 2 else TAU
                if j % 50 == 0:  # the whole of Gate.decide, and the reference against its own exact scan
                    found = gate.decide(probe, TAU, policy, DELTA, floor=floor)
                    scan = gate.decide(probe, TAU, policy, DELTA)
                    assert np.array_equal(scan.identity_ids, exact[j][0])
                    assert mismatch(scan, *exact[j], policy) is None
                else:  # what decide runs first; a None hands the probe to the screen
                    found = gate._candidates(probe, templates, TAU, policy, DELTA)
                    declined += found is None
                problem = found is not None and mismatch(found, *exact[j], policy)
                if problem:
                    failures.append(f"{kind} #{start + j} {policy} floor {floor:.4f}: {problem}")
                problem = mismatch(gate._screened(probe, templates, TAU, policy, DELTA, floor), *exact[j], policy)
                if problem:
                    failures.append(f"{kind} #{start + j} {policy} floor {floor:.4f}, screened: {problem}")
                checked += 1
    print(f"\n{checked} probes, {declined} left to the scan, {dict(gate.paths)}")
    assert checked == n
    assert not failures, f"{len(failures)} mismatches, first: {failures[:5]}"
    assert gate.paths["candidates"] > n / 10  # the strong matches (the scan decides the others)


# ---- the index's life cycle --------------------------------------------------------------------------


@pytest.fixture
def small(faces: SyntheticFaces, monkeypatch: pytest.MonkeyPatch) -> tuple[Gate, ArrayTemplates]:
    """A gate over 1,000 people × 2 captures, on the candidate path (the switch lowered for speed)."""
    monkeypatch.setattr("biomem.identity.gate.CANDIDATE_CELLS", 1)
    ids, matrix, centres = SyntheticFaces(seed=7).gallery(1_000, 2)
    store = ArrayTemplates(ids, matrix, MODALITY)
    store.centres = centres
    return Gate(store, background=False), store


def test_a_newly_enrolled_person_is_found_on_the_next_decision(small, faces: SyntheticFaces) -> None:
    gate, store = small
    centre = faces.centres(1)
    probe = Probe(faces.captures(centre)[0], MODALITY)
    assert gate.decide(probe, TAU, "best", DELTA, floor=TAU).identity is None
    assert gate.paths == {"scan: no strong match": 1, "screen": 1}  # a stranger's probe is screened
    store.enrol(5_000, faces.captures(np.repeat(centre, 3, axis=0)))
    found = gate.decide(probe, TAU, "best", DELTA, floor=TAU)
    assert found.identity == 5_000 and gate.paths["candidates"] == 1
    index = gate.candidates.get(MODALITY, gate._templates(MODALITY))
    assert index.updates == 1  # three rows added in place, no rebuild


def test_a_forgotten_person_is_never_admitted(small) -> None:
    gate, store = small
    probe = Probe(SyntheticFaces(seed=9).captures(store.centres[10:11])[0], MODALITY)
    assert gate.decide(probe, TAU, "best", DELTA, floor=TAU).identity == 11
    store.forget(11)
    for background in (False, True):
        gate.candidates.background = background
        found = gate.decide(probe, TAU, "best", DELTA, floor=TAU)
        assert found.identity is None and 11 not in found.identity_ids.tolist()
    index = gate.candidates.get(MODALITY, gate._templates(MODALITY))
    assert index is not None and index.updates == 1


def test_a_stale_index_is_never_read(small, faces: SyntheticFaces) -> None:
    """While the background refresh has not caught up, the scan answers: a new person is found, a forgotten
    one is not, and the index is read again once it reflects the store."""
    gate, store = small
    assert gate.candidates.get(MODALITY, gate._templates(MODALITY)) is not None
    gate.candidates.background = True
    newcomer = faces.centres(1)
    store.enrol(6_000, faces.captures(newcomer))
    store.forget(12)
    gate.paths.clear()
    blocked = gate.candidates._refreshing.acquire()  # the refresh cannot run yet
    try:
        probe = Probe(faces.captures(newcomer)[0], MODALITY)
        assert gate.decide(probe, TAU, "best", DELTA, floor=TAU).identity == 6_000
        forgotten = Probe(SyntheticFaces(seed=11).captures(store.centres[11:12])[0], MODALITY)
        assert gate.decide(forgotten, TAU, "best", DELTA, floor=TAU).identity is None
        assert gate.paths == {"scan: index not ready": 2, "screen": 2}
    finally:
        if blocked:
            gate.candidates._refreshing.release()
    assert gate.candidates.wait(60)
    assert gate.decide(probe, TAU, "best", DELTA, floor=TAU).identity == 6_000
    assert gate.paths["candidates"] == 1


def test_many_changes_rebuild_the_index(small, faces: SyntheticFaces) -> None:
    gate, store = small
    probe = Probe(faces.captures(store.centres[3:4])[0], MODALITY)
    assert gate.decide(probe, TAU, "best", DELTA, floor=TAU).identity == 4
    before = gate.candidates.get(MODALITY, gate._templates(MODALITY))
    for person in range(100, 400):
        store.forget(person)
    assert gate.decide(probe, TAU, "best", DELTA, floor=TAU).identity == 4
    after = gate.candidates.get(MODALITY, gate._templates(MODALITY))
    assert after is not before and after.updates == 0 and after.size == len(store.ids)


def test_a_changed_template_is_not_searched_under_its_old_vector(small, faces: SyntheticFaces) -> None:
    """An identity whose templates changed in place (same count) loses its old labels."""
    gate, store = small
    assert gate.decide(Probe(store.matrix[0], MODALITY), TAU, "best", DELTA, floor=TAU).identity == 1
    fresh = faces.centres(1)
    store.matrix = store.matrix.copy()
    store.matrix[store.ids == 1] = faces.captures(np.repeat(fresh, 2, axis=0))
    store.version += 1
    assert gate.decide(Probe(faces.captures(fresh)[0], MODALITY), TAU, "best", DELTA, floor=TAU).identity == 1
    index = gate.candidates.get(MODALITY, gate._templates(MODALITY))
    assert index.updates == 1 and index._deleted == 2


def test_the_demo_disclosure_and_fusion_keep_the_exact_scan(small) -> None:
    gate, store = small
    probe = Probe(store.matrix[0], MODALITY)
    full = gate.decide(probe, TAU, "best", DELTA)  # no floor: every identity's score
    assert full.floor == -math.inf and len(full.identity_ids) == 1_000
    assert full.score_of(999_999) == 0.0
    partial = gate.decide(probe, TAU, "best", DELTA, floor=TAU)
    assert partial.floor == TAU and len(partial.identity_ids) < 1_000 and partial.identity == full.identity
    assert partial.score_of(int(full.identity_ids[np.argmin(full.best_scores)])) == -math.inf
    with pytest.raises(Exception, match="exact scan"):
        fuse([partial, full], "all")


def test_below_the_switch_the_gate_scans_and_builds_nothing(faces: SyntheticFaces) -> None:
    ids, matrix, _ = SyntheticFaces(seed=5).gallery(100, 2)
    gate = Gate(ArrayTemplates(ids, matrix, MODALITY), background=False)
    found = gate.decide(Probe(matrix[0], MODALITY), TAU, "best", DELTA, floor=TAU)
    assert found.identity == 1 and found.floor == -math.inf
    assert gate.paths == {"scan: small": 1} and not gate.candidates._indexes


def test_cosines_are_the_same_bits_wherever_a_row_sits() -> None:
    """What the exact check rests on: BLAS gemv's score of a row depends on where it sits, np.vecdot's not."""
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((4_099, 512), dtype=np.float32)
    probe = rng.standard_normal(512, dtype=np.float32)
    whole = cosines(matrix, probe)
    for _ in range(200):
        rows = rng.choice(len(matrix), int(rng.integers(1, 40)), replace=False)
        assert np.array_equal(cosines(matrix[rows], probe), whole[rows])


def test_module_constants_are_coherent() -> None:
    assert candidates.EF_QUERY <= min(candidates.K, candidates.K_REST)  # k sets every query's breadth
    assert candidates.WIDEN > 1 and 0 < candidates.REBUILD_SHARE < 1


# ---- identify: what it passes the gate ----------------------------------------------------------------


@pytest.fixture
def engine(make_memory, monkeypatch: pytest.MonkeyPatch):
    """make(**kw): a BioMemory with 300 synthetic face-arcface-s people × 2 captures, the gate on the candidate
    path (the switch lowered) and building its index inline."""
    monkeypatch.setattr("biomem.identity.gate.CANDIDATE_CELLS", 1)

    def make(**kwargs):
        mem = make_memory(**kwargs)
        mem.gate.candidates.background = False
        _, matrix, _ = SyntheticFaces(seed=13).gallery(300, 2)
        with mem.store.transaction():
            for person in range(300):
                mem.store.add_identity(f"p{person}", "face-arcface-s", matrix[2 * person:2 * person + 2])
        mem.set_threshold(TAU, "face-arcface-s")
        return mem, matrix
    return make


def test_identify_admits_by_the_candidates_and_rescans_a_match_the_guard_takes_back(engine) -> None:
    mem, matrix = engine()
    client = ["session:s", "address:203.0.113.1"]
    probe = Probe(matrix[0] + 0.1 * SyntheticFaces(seed=14).centres(1)[0], "face-arcface-s")  # p0 at ~0.995
    found = mem.identify(probe, client=client)
    assert found.identity == mem.identities()[0].id and found.floor == TAU
    mem.set_threshold(0.999, "face-arcface-s", step_up=True)  # no capture reaches it: a guard refuses the match
    mem.limiter.guarded = lambda identities: set(identities)
    refused = mem.identify(probe, client=client)
    assert not refused.matched and refused.floor == -math.inf  # the near-miss count read the scan's scores
    assert mem.gate.paths["candidates"] == 2 and mem.gate.paths["scan: every score"] == 1


def test_the_demo_disclosure_decides_by_the_exact_scan(engine) -> None:
    mem, matrix = engine(disclosure="demo", force_disclosure=True)
    found = mem.identify(Probe(matrix[0], "face-arcface-s"))
    assert found.matched and found.floor == -math.inf and len(found.scores) == 300
