"""An int8 copy of the templates with a certified bound: which rows may score at or above a level, exactly.

A stranger's refusal must read every template (no index proves what it did not return), but it need not read
float32: a quarter of the bytes, in int8 with one scale per row, bounds every score tightly enough to set aside
all but the rows near the level, and those are scored exactly (`candidates.cosines`).

The bound. Row t (float32) is stored as codes q (int8) and a scale s, t̂ = s·q, with e = ‖t − t̂‖; the probe p
likewise as q_p, s_p, p̂ = s_p·q_p, e_p = ‖p − p̂‖. Then

    p·t = p̂·t̂ + p̂·(t − t̂) + (p − p̂)·t,  so by Cauchy–Schwarz  p·t ≤ s_p·s·(q_p·q) + ‖p̂‖·e + e_p·‖t‖,

where q_p·q is an integer, summed exactly (simsimd's int8 product accumulates in int32; |q_p·q| ≤ 512·127²
< 2²⁴, exact in the float64 it returns). The gate compares the float32 score fl(p·t), not p·t; any float32
summation of d products (in any order, with or without FMA) is within γ_d·Σ|p_i·t_i| ≤ γ_d·‖p‖·‖t‖ of p·t,
γ_d = d·u / (1 − d·u), u = 2⁻²⁴. So

    fl(p·t) ≤ s_p·s·(q_p·q) + ‖p̂‖·E + (e_p + γ_d·‖p‖)·N + SLACK,

with E and N the largest e and ‖t‖ over the rows, and SLACK (1e-6) covering the float64 arithmetic of the bound
itself (a few operations on numbers below 10, each off by < 2⁻⁵², and the norms' own float64 sums). A row whose
right-hand side is below the level scores below it in float32, as the exact scan computes it: it is refused
exactly. The rest (`Screen.rows`) are the only rows that can reach the level. On unit-norm 512-d face templates
E is about 0.01, so the screen keeps the rows scoring within about 0.02 of the level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simsimd

LEVELS = 127  # int8 codes in [-127, 127]: symmetric, so a row's scale is its largest magnitude / 127
SLACK = 1e-6  # the float64 arithmetic of the bound (see the module docstring)
CHUNK = 4096  # rows quantised at once (the float64 working copy of one chunk, not of the matrix)


def gamma(dim: int) -> float:
    """γ_d: the relative error bound of a float32 sum of `dim` products, in any order."""
    unit = 2.0 ** -24
    return dim * unit / (1.0 - dim * unit)


def quantise(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(int8 codes, per-row scale, ‖t − t̂‖, ‖t‖) of float rows, computed in float64."""
    exact = np.asarray(rows, dtype=np.float64)
    peak = np.max(np.abs(exact), axis=1, initial=0.0)
    scales = np.where(peak > 0, peak / LEVELS, 1.0)
    codes = np.clip(np.rint(exact / scales[:, None]), -LEVELS, LEVELS)
    errors = np.linalg.norm(exact - codes * scales[:, None], axis=1)
    return codes.astype(np.int8), scales, errors, np.linalg.norm(exact, axis=1)


@dataclass(frozen=True, eq=False)
class Screen:
    """The int8 codes of one template matrix, each row's scale, and the largest rounding error and norm."""

    codes: np.ndarray  # (rows, dim) int8
    scales: np.ndarray  # (rows,) float64
    error: float  # E: the largest ‖t − t̂‖
    norm: float  # N: the largest ‖t‖

    @classmethod
    def build(cls, matrix: np.ndarray) -> Screen:
        """Quantise a (rows, dim) float32 matrix, CHUNK rows at a time."""
        rows, dim = matrix.shape
        codes = np.empty((rows, dim), dtype=np.int8)
        scales = np.empty(rows, dtype=np.float64)
        error = norm = 0.0
        for start in range(0, rows, CHUNK):
            part = slice(start, start + CHUNK)
            codes[part], scales[part], errors, norms = quantise(matrix[part])
            error, norm = max(error, float(errors.max())), max(norm, float(norms.max()))
        return cls(codes, scales, error, norm)

    def carry(self, kept: np.ndarray, matrix: np.ndarray, rows: np.ndarray) -> Screen:
        """The screen of `matrix`, whose rows `rows` hold this screen's rows `kept` unchanged: their codes copied,
        the other rows quantised; E and N the larger of both, still bounds on every row."""
        codes = np.empty(matrix.shape, dtype=np.int8)
        scales = np.empty(len(matrix), dtype=np.float64)
        codes[rows], scales[rows] = self.codes[kept], self.scales[kept]
        added = np.setdiff1d(np.arange(len(matrix)), rows, assume_unique=True)
        fresh = Screen.build(matrix[added])
        codes[added], scales[added] = fresh.codes, fresh.scales
        return Screen(codes, scales, max(self.error, fresh.error), max(self.norm, fresh.norm))

    def rows(self, probe: np.ndarray, level: float) -> np.ndarray:
        """The rows whose float32 score with `probe` may be `level` or more (every other row scores below it)."""
        return self.rows_at(probe, level)[0]

    def rows_at(self, probe: np.ndarray, *levels: float) -> list[np.ndarray]:
        """For each level, the rows whose float32 score with `probe` may be that level or more (every other row
        scores below it); the int8 products are read once for all levels."""
        if not len(self.codes):
            return [np.zeros(0, dtype=np.int64) for _ in levels]
        codes, scales, errors, norms = quantise(probe[None, :])
        rounded = float(np.linalg.norm(codes[0] * scales[0]))  # ‖p̂‖
        slack = rounded * self.error + (float(errors[0]) + gamma(len(probe)) * float(norms[0])) * self.norm + SLACK
        products = np.asarray(simsimd.cdist(self.codes, codes, metric="dot", dtype="int8")).reshape(-1)
        scaled = self.scales * products
        return [np.flatnonzero(scaled >= (level - slack) / float(scales[0])) for level in levels]
