"""The int8 screen keeps every row that can reach its level, and the gate's screened decision is the exact scan's.

The bound (biomem.identity.screen) on adversarial rows: spiky rows (one large coordinate, so a coarse scale and a
large rounding error), rows slightly off unit norm, a zero row, and probes aimed at a row at the level, just
above and just below it; a level equal to a row's float32 score keeps that row. Then the gate's screened
decision (`Gate._screened`, what decides every probe the candidate path declines): a match exactly at τ, a
runner-up within δ but below the caller's floor (the margin rule reads below the floor), one just outside δ,
strangers, and `policy="all"`, each against the exact scan. The 100,000-probe proof over 10,000 people × 5
captures is tests/test_gate_candidates.py's (it screens each probe).
"""

from __future__ import annotations

import numpy as np
import pytest
import simsimd

from biomem.identity.candidates import cosines
from biomem.identity.gate import DEFAULT_MARGINS, Gate, GateResult, Probe
from biomem.identity.screen import Screen
from biomem.identity.synthetic import ArrayTemplates, SyntheticFaces

TAU = 0.4291  # face-arcface-s's calibrated τ ...
DELTA = DEFAULT_MARGINS["face-arcface-s"]  # ... and δ
NEAR_MISS = TAU - 0.0709  # the attempt limiter's floor: near × (step-up τ − τ) below τ
MODALITY = "face-synthetic"


def _adversarial_rows(rng: np.random.Generator) -> np.ndarray:
    """Face-like rows, spiky rows, rows off unit norm by up to 1e-3, and a zero row."""
    faces = SyntheticFaces(seed=3).centres(2_000)
    spiky = rng.standard_normal((200, 512)).astype(np.float32) * 0.01
    spiky[np.arange(200), rng.integers(0, 512, 200)] = 1.0
    spiky /= np.linalg.norm(spiky, axis=1, keepdims=True)
    off = faces[:200] * rng.uniform(0.999, 1.001, (200, 1)).astype(np.float32)
    return np.concatenate([faces, spiky, off, np.zeros((1, 512), np.float32)])


def _aimed(target: np.ndarray, cosine: float, rng: np.random.Generator) -> np.ndarray:
    """A unit probe at `cosine` from a unit target, the rest of the way a random direction."""
    away = rng.standard_normal(target.shape[0])
    away -= (away @ target) * target
    away /= np.linalg.norm(away)
    return (cosine * target + np.sqrt(1 - cosine ** 2) * away).astype(np.float32)


def test_the_int8_products_are_exact_integers() -> None:
    """The bound rests on q_p·q summed exactly: extreme codes (all ±127, the largest sums) included."""
    rng = np.random.default_rng(2)
    codes = rng.integers(-127, 128, (3_000, 512), dtype=np.int8)
    codes[:2] = 127
    codes[2] = -127
    probe = np.full((1, 512), 127, dtype=np.int8)
    probe[0, ::3] = rng.integers(-127, 128, len(probe[0, ::3]), dtype=np.int8)
    for query in (probe, codes[:1]):
        got = np.asarray(simsimd.cdist(codes, query, metric="dot", dtype="int8")).reshape(-1)
        assert np.array_equal(got, codes.astype(np.int64) @ query[0].astype(np.int64))


def test_the_screen_keeps_every_row_that_reaches_the_level() -> None:
    rng = np.random.default_rng(0)
    matrix = _adversarial_rows(rng)
    screen = Screen.build(matrix)
    unit = matrix[:2_400] / np.linalg.norm(matrix[:2_400], axis=1, keepdims=True)
    for trial in range(600):
        level = float(rng.choice([TAU, TAU - DELTA, NEAR_MISS, 0.9]))
        target = unit[rng.integers(0, len(unit))]
        probe = _aimed(target.astype(np.float64), level + rng.uniform(-0.01, 0.01), rng)
        probe /= np.linalg.norm(probe)
        kept = set(screen.rows(probe, level).tolist())
        reached = np.flatnonzero(cosines(matrix, probe) >= level)
        assert set(reached.tolist()) <= kept, f"trial {trial}: a row at or above {level} was screened out"


def test_a_level_equal_to_a_rows_float32_score_keeps_that_row() -> None:
    rng = np.random.default_rng(1)
    matrix = _adversarial_rows(rng)
    screen = Screen.build(matrix)
    for row in rng.integers(0, len(matrix) - 1, 300):
        probe = _aimed(matrix[row] / np.linalg.norm(matrix[row]), TAU, rng)
        level = float(cosines(matrix[row:row + 1], probe)[0])  # exactly the row's score: the row reaches it
        assert row in screen.rows(probe, level)


def test_the_screen_sets_aside_all_but_the_rows_near_the_level() -> None:
    faces = SyntheticFaces(seed=4)
    _, matrix, _ = faces.gallery(5_000, 2)
    screen = Screen.build(matrix)
    assert screen.error < 0.02  # E on unit-norm 512-d face templates
    kept = [len(screen.rows(p, TAU - DELTA)) for p in faces.captures(faces.centres(100))]
    assert np.median(kept) < 0.02 * len(matrix)  # a stranger's probe: about 1% of rows re-scored


@pytest.fixture(scope="module")
def screened() -> tuple[Gate, np.ndarray]:
    """A gate over 3,000 people × 2 captures, and its templates."""
    ids, matrix, _ = SyntheticFaces(seed=5).gallery(3_000, 2)
    return Gate(ArrayTemplates(ids, matrix, MODALITY), background=False), matrix


def _decide(gate: Gate, probe: Probe, tau: float, policy: str, floor: float) -> GateResult:
    """The screen's decision (what Gate.decide runs when the candidate path declines)."""
    return gate._screened(probe, gate._templates(MODALITY), tau, policy, DELTA, floor)


def _between(a: np.ndarray, b: np.ndarray, to_a: float, to_b: float, rng: np.random.Generator) -> np.ndarray:
    """A unit probe scoring `to_a` with unit row a and `to_b` with unit row b, the rest a random direction."""
    g = float(a @ b)
    x, y = (to_a - to_b * g) / (1 - g * g), (to_b - to_a * g) / (1 - g * g)
    part = x * a.astype(np.float64) + y * b
    away = rng.standard_normal(len(a))
    away -= np.linalg.lstsq(np.stack([a, b]).T, away, rcond=None)[0] @ np.stack([a, b])
    away /= np.linalg.norm(away)
    return (part + np.sqrt(max(1 - part @ part, 0.0)) * away).astype(np.float32)


def _same(found: GateResult, scan: GateResult) -> None:
    """The screened result decides as the scan and lists every identity at or above its floor with its score."""
    assert (found.admitted, found.identity, found.ambiguous) == (scan.admitted, scan.identity, scan.ambiguous)
    listed = dict(zip(found.identity_ids.tolist(), found.best_scores.tolist()))
    above = scan.best_scores >= found.floor
    assert listed == dict(zip(scan.identity_ids[above].tolist(), scan.best_scores[above].tolist()))


def test_a_screened_decision_is_the_exact_scans(screened) -> None:
    gate, matrix = screened
    rng = np.random.default_rng(6)
    cases = 0
    for _ in range(200):
        a, b = rng.integers(0, len(matrix), 2)
        if a // 2 == b // 2:
            continue
        best = rng.uniform(TAU - 0.01, TAU + 0.3)
        for runner_up in (best - DELTA + 0.01, best - DELTA - 0.01, rng.uniform(-0.1, 0.3)):
            probe = Probe(_between(matrix[a], matrix[b], best, runner_up, rng), MODALITY)
            for policy in ("best", "all"):
                for floor in (TAU, NEAR_MISS):
                    found = _decide(gate, probe, TAU, policy, floor)
                    assert found.floor <= floor
                    _same(found, gate.decide(probe, TAU, policy, DELTA))
                    cases += 1
    assert gate.paths["screen"] == cases


def test_the_margin_rule_reads_below_the_callers_floor(screened) -> None:
    gate, matrix = screened
    rng = np.random.default_rng(7)
    probe = Probe(_between(matrix[0], matrix[10], TAU + 0.05, TAU + 0.05 - DELTA + 0.02, rng), MODALITY)
    found, scan = _decide(gate, probe, TAU, "best", TAU), gate.decide(probe, TAU, "best", DELTA)
    assert scan.ambiguous and found.ambiguous and found.identity is None
    assert found.floor == TAU - DELTA and 6 in found.identity_ids.tolist()  # the runner-up (rows 10, 11)
    _same(found, scan)
    clear = Probe(_between(matrix[0], matrix[10], TAU + 0.05, TAU + 0.05 - DELTA - 0.02, rng), MODALITY)
    assert _decide(gate, clear, TAU, "best", TAU).identity == 1 == gate.decide(clear, TAU, "best", DELTA).identity


def test_a_score_exactly_at_tau_is_admitted(screened) -> None:
    gate, matrix = screened
    rng = np.random.default_rng(8)
    for row in rng.integers(0, len(matrix), 50):
        probe = Probe(_aimed(matrix[row].astype(np.float64), 0.6, rng), MODALITY)
        scan = gate.decide(probe, TAU, "all", DELTA)
        tau = float(scan.best_scores[row // 2])  # the owner's exact best score, as the threshold
        found = _decide(gate, probe, tau, "all", tau)
        assert int(row // 2 + 1) in found.admitted
        _same(found, gate.decide(probe, tau, "all", DELTA))
