"""Calibrate the gate's τ for one encoder on one dataset, from genuine and impostor cosine scores.

    report = calibrate_folder(modalities.create("face-arcface-s"), "lfw/")   # or "face-arcface-s"
    print(report.table())
    calibration_plot.plot(report, "scores.png")                         # histograms and DET curve
    save(report, memory, which="intersection")                          # or which="fmr"

Data (paths inside DIR; every image is encoded once)
    identity per folder  DIR/<identity>/<image files> (Pillow's image suffixes; other files are
                         ignored). Genuine scores: every same-folder pair. Impostor scores: every
                         cross-folder pair, or a seeded uniform sample of `max_impostors` of them.
    pairs file           one pair per line, `path_a path_b label`: paths relative to DIR, label 1
                         (same person) or 0 (different people); `#` starts a comment, blank lines
                         are skipped, paths with spaces take shell quotes. The listed pairs are used
                         as given (no cap); a pair with a refused image is skipped and counted.
                         LFW's own pairs.txt (`name n1 n2` / `name1 n1 name2 n2`) needs converting,
                         e.g. `Abel_Pacheco/Abel_Pacheco_0001.jpg Abel_Pacheco/Abel_Pacheco_0004.jpg 1`.
    Images the encoder refuses (InvalidInputError and its kin: NoFaceError, MultipleFacesError,
    NoPalmError, InvalidImageError) are listed in the report and left out; any other error stops.

Thresholds. The gate admits a probe when cos >= τ, so FMR(τ) is the share of impostor scores
>= τ and FNMR(τ) the share of genuine scores < τ.
    intersection  the paper's rule: where the genuine and impostor densities cross between their
                  modes. Densities are Gaussian KDEs (scipy, Scott's bandwidth) on a grid over the
                  scores; the crossing is interpolated between grid points; of several crossings
                  the one of lowest summed density (the valley floor) wins; if they do not cross
                  between the modes, the minimum of their sum there. If no impostor scores as high
                  as any genuine one (perfectly separated), τ is the midpoint of that gap: every
                  τ in it makes no error, the KDE tails alone would place the crossing (or
                  underflow to 0 = 0), and the midpoint keeps the widest margin on both sides.
    fmr           the security choice: the smallest τ whose empirical FMR <= target, i.e. the
                  float just above the highest impostor score that must be refused. With n
                  impostor scores FMR moves in steps of 1/n: when 1/n > target the report says
                  that the target is not demonstrated, only that no sampled impostor passes.
    eer           where FMR = FNMR, interpolated linearly between adjacent score thresholds.

Identification (1:N). A stranger's probe is compared with all N people enrolled, so the expected
false-positive identification rate is FPIR = 1 - (1 - FMR(τ))^N (≈ N × FMR). The table gives it at
each τ for N in FPIR_SIZES (and the store's N when given), with the largest N whose FPIR stays under
the target. No FMR below the rule-of-three floor 3/n is credited: with n impostor scores and no false
match, FMR < 3/n at 95%, and the data cannot show less. `save` stores the τ's FMR and n in its
source; enrolment reads them back (biomem.identity.enrolment.calibrated_fmr).

Ambiguity margin δ (identity-per-folder data only). Each image is a genuine probe against the rest: its
top-1 is its best cosine with its own identity's other images, its top-2 the best with anyone else's. The gate
admits nobody when the runner-up is within δ of the best (biomem.identity.gate). δ = τ − the runner-up score
that a share 1 − MARGIN_RATE of genuine probes stay under: a genuine probe that clears τ has a gap of at
least τ − its runner-up, so at most MARGIN_RATE of them are refused as ambiguous, and a probe whose
runner-up scores higher than real people's runners-up do (a look-alike, a morph) is.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import gaussian_kde

import modalities

from ..errors import InvalidInputError
from ..settings import DEFAULT_TARGET_FPIR
from .biometrics import Biometrics
from .calibration_data import (
    encode_all,
    genuine_scores,
    identity_folders,
    impostor_scores,
    pair_cosines,
    read_pairs,
    stack_vectors,
)
from .enrolment import fpir, max_enrolled, rule_of_three
from .samples import write_face_set

log = logging.getLogger(__name__)

MIN_SCORES = 2  # the fewest scores of each kind a density can be estimated from
GRID_POINTS = 2048  # KDE evaluation grid over the score range
# Scores are binned this finely (per kind) before the KDE: exact far below the bandwidth, fast for 200k.
KDE_BINS = 16384
FPIR_SIZES = (10, 100, 1_000, 10_000)  # people enrolled at which the report gives the FPIR
MARGIN_RATE = 0.01  # genuine probes that clear τ the calibrated δ may refuse as ambiguous, at most


@dataclass(frozen=True)
class OperatingPoint:
    """A threshold and the errors it makes on the calibration scores."""

    tau: float
    fmr: float  # impostor scores >= tau / impostor scores
    fnmr: float  # genuine scores < tau / genuine scores
    false_matches: int
    false_non_matches: int
    how: str  # how tau was found


@dataclass
class CalibrationReport:
    """What a calibration measured: counts, modes, the three thresholds and their error rates."""

    target_fmr: float
    genuine: int  # genuine (same-identity) scores
    impostor: int  # impostor (cross-identity) scores
    genuine_mode: float
    impostor_mode: float
    intersection: OperatingPoint  # the paper's τ
    at_fmr: OperatingPoint  # the smallest τ with FMR <= target_fmr
    at_eer: OperatingPoint  # τ where FMR = FNMR (eer_threshold)
    eer: float
    caveats: list[str]
    genuine_scores: np.ndarray = field(repr=False, compare=False)
    impostor_scores: np.ndarray = field(repr=False, compare=False)
    modality: str | None = None
    data_dir: str | None = None
    pairs_file: str | None = None
    identities: int | None = None  # identity folders with at least one usable image
    images: int | None = None  # images encoded
    refused: dict[str, str] = field(default_factory=dict)  # image path -> "ErrorClass: message"
    impostor_total: int | None = None  # cross-identity pairs available before sampling
    skipped_pairs: int = 0  # pairs-file lines left out because an image was refused
    # per genuine probe (folder mode): its top-1 (own identity) and top-2 (anyone else) cosine; empty for pairs
    top_two: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)), repr=False, compare=False)

    @property
    def eer_threshold(self) -> float:
        """τ at the equal error rate."""
        return self.at_eer.tau

    @property
    def fmr_floor(self) -> float:
        """The lowest FMR these impostor scores can support (rule of three: 3/n)."""
        return rule_of_three(self.impostor)

    def credited_fmr(self, point: OperatingPoint) -> float:
        """The FMR a τ is credited with: its measured FMR, never below the rule-of-three floor."""
        return max(point.fmr, self.fmr_floor)

    def margin(self, tau: float | None = None) -> float | None:
        """The ambiguity margin δ at `tau` (default the paper's τ), see the module doc; None without top_two."""
        if not self.top_two.size:
            return None
        tau = self.intersection.tau if tau is None else tau
        return max(0.0, float(tau - np.quantile(self.top_two[:, 1], 1.0 - MARGIN_RATE)))

    def as_dict(self) -> dict[str, Any]:
        """Every number as JSON-ready values (the raw scores are left out)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, np.ndarray):
                out[f.name] = asdict(value) if isinstance(value, OperatingPoint) else value
        return out

    def table(self, enrolled: int | None = None, target_fpir: float = DEFAULT_TARGET_FPIR) -> str:
        """A markdown summary: data counts, one row per τ with its FMR and FNMR, the FPIR each τ gives at
        FPIR_SIZES people (and `enrolled`, the store's N) with the largest N under `target_fpir`, then caveats."""
        source = f"`{self.data_dir}`" if self.data_dir else "given scores"
        if self.pairs_file:
            source += f" (pairs `{self.pairs_file}`)"
        lines = [f"**{self.modality or 'τ calibration'}** on {source}"]
        if self.images is not None:
            who = f"{self.identities} identities, " if self.identities is not None else ""
            skipped = f", {self.skipped_pairs} pairs skipped" if self.skipped_pairs else ""
            lines.append(f"- {who}{self.images} images encoded, {len(self.refused)} refused{skipped}")
        sampled = (f" (sampled from {self.impostor_total:,})"
                   if self.impostor_total is not None and self.impostor_total > self.impostor else "")
        lines += [f"- {self.genuine:,} genuine / {self.impostor:,} impostor scores{sampled}",
                  f"- modes: impostor {self.impostor_mode:.4f}, genuine {self.genuine_mode:.4f}", "",
                  "| τ rule | τ | FMR | FNMR | how |", "|---|---:|---:|---:|---|"]
        rules = (("intersection (paper)", self.intersection), (f"FMR ≤ {self.target_fmr:g}", self.at_fmr),
                 (f"EER = {self.eer:.4%}", self.at_eer))
        for name, point in rules:
            lines.append(f"| {name} | {point.tau:.5f} | {point.fmr:.3e} ({point.false_matches}/{self.impostor})"
                         f" | {point.fnmr:.3e} ({point.false_non_matches}/{self.genuine}) | {point.how} |")
        sizes = sorted({*FPIR_SIZES, *([enrolled] if enrolled is not None else [])})
        lines += ["", f"Identification (1:N): FPIR = 1 − (1 − FMR)^N for N people enrolled; no FMR below the rule-of-"
                  f"three floor 3/{self.impostor:,} = {self.fmr_floor:.2e} is credited (0 false matches in"
                  f" {self.impostor:,} impostor scores show FMR < 3/n at 95%, no lower).", "",
                  "| τ rule | FMR credited | " + " | ".join(
                      f"FPIR N={n:,}{' (store)' if n == enrolled else ''}" for n in sizes)
                  + f" | largest N at FPIR ≤ {target_fpir:g} |", "|---|" + "---:|" * (len(sizes) + 2)]
        for name, point in rules:
            fmr = self.credited_fmr(point)
            lines.append(f"| {name} | {fmr:.2e} | " + " | ".join(f"{fpir(fmr, n):.2%}" for n in sizes)
                         + f" | {max_enrolled(fmr, target_fpir):,} |")
        if self.top_two.size:
            gaps = self.top_two[:, 0] - self.top_two[:, 1]
            lines += ["", f"- ambiguity margin δ {self.margin():.4f} at the paper's τ,"
                      f" {self.margin(self.at_fmr.tau):.4f} at FMR ≤ {self.target_fmr:g}: τ − the runner-up score"
                      f" {1 - MARGIN_RATE:.0%} of {len(gaps):,} genuine probes stay under; their top-1 − top-2"
                      f" gap: median {np.median(gaps):.4f}, min {gaps.min():.4f}"]
        if self.caveats:
            lines += ["", *(f"- caveat: {c}" for c in self.caveats)]
        return "\n".join(lines)


def calibrate_scores(genuine: Sequence[float] | np.ndarray, impostor: Sequence[float] | np.ndarray, *,
                     fmr: float = 1e-3, modality: str | None = None) -> CalibrationReport:
    """Thresholds and error rates from cosine scores already computed (pure: no model, no files)."""
    if not 0.0 < fmr < 1.0:
        raise InvalidInputError(f"the target FMR must lie in (0, 1), got {fmr}")
    g, i = _checked(genuine, "genuine"), _checked(impostor, "impostor")
    if g.size < MIN_SCORES or i.size < MIN_SCORES:
        raise InvalidInputError(
            f"calibration needs at least {MIN_SCORES} genuine scores (same-identity pairs) and {MIN_SCORES}"
            f" impostor scores (cross-identity pairs); got {g.size} and {i.size}: give two or more"
            " identities, some with two or more usable images")
    for scores, kind in ((g, "genuine"), (i, "impostor")):
        if np.ptp(scores) == 0.0:
            raise InvalidInputError(f"all {scores.size} {kind} scores equal {scores[0]}: "
                                    "a density needs scores that vary (are the images copies?)")
    grid = np.linspace(min(g[0], i[0]), max(g[-1], i[-1]), GRID_POINTS)
    g_density, i_density = _density(g, grid), _density(i, grid)
    tau, how = _intersection(g, i, grid, g_density, i_density)
    eer, eer_tau = _equal_error(g, i)
    fmr_tau, fmr_how, caveats = _at_target_fmr(i, fmr)
    return CalibrationReport(
        target_fmr=fmr, genuine=int(g.size), impostor=int(i.size),
        genuine_mode=float(grid[np.argmax(g_density)]), impostor_mode=float(grid[np.argmax(i_density)]),
        intersection=_point(tau, g, i, how), at_fmr=_point(fmr_tau, g, i, fmr_how),
        at_eer=_point(eer_tau, g, i, "FMR = FNMR, interpolated between adjacent score thresholds"),
        eer=eer, caveats=caveats, genuine_scores=g, impostor_scores=i, modality=modality)


def calibrate_folder(encoder: modalities.Encoder | str, data_dir: str | Path, *, pairs: str | Path | None = None,
                     fmr: float = 1e-3, max_impostors: int | None = 200_000, seed: int = 0) -> CalibrationReport:
    """Encode a labelled image set once, score genuine and impostor pairs, and calibrate τ on them.

    `pairs`: a pairs file (see the module doc) instead of the identity-per-folder layout.
    `max_impostors`: cap on cross-identity pairs in folder mode (None: all); `seed` picks the sample.
    """
    if isinstance(encoder, str):
        encoder = modalities.create(encoder)
    root = Path(data_dir)
    if not root.is_dir():
        raise InvalidInputError(f"calibration data folder not found: {root}")
    if pairs is None:
        folders = identity_folders(root, encoder.info.kind)
        vectors, refused = encode_all(encoder, root, [p for paths in folders.values() for p in paths])
        sizes = [n for n in (sum(p in vectors for p in paths) for paths in folders.values()) if n]
        matrix = stack_vectors(vectors, root)
        genuine = genuine_scores(matrix, sizes)
        impostor, total = impostor_scores(matrix, sizes, max_impostors, np.random.default_rng(seed))
        extra: dict[str, Any] = {"identities": len(sizes), "impostor_total": total,
                                 "top_two": top_two(matrix, sizes)}
    else:
        rows = read_pairs(Path(pairs))
        vectors, refused = encode_all(encoder, root, list(dict.fromkeys(p for a, b, _ in rows for p in (a, b))))
        kept = [(a, b, same) for a, b, same in rows if a in vectors and b in vectors]
        matrix, index = stack_vectors(vectors, root), {path: n for n, path in enumerate(vectors)}
        scores = pair_cosines(matrix, np.array([index[a] for a, _, _ in kept], dtype=np.int64),
                               np.array([index[b] for _, b, _ in kept], dtype=np.int64))
        same = np.array([s for _, _, s in kept], dtype=bool)
        genuine, impostor = scores[same], scores[~same]
        extra = {"pairs_file": str(pairs), "skipped_pairs": len(rows) - len(kept)}
    if refused:
        log.warning("%d of %d captures refused by %s", len(refused), len(vectors) + len(refused), encoder.name)
    report = calibrate_scores(genuine, impostor, fmr=fmr, modality=encoder.name)
    return replace(report, data_dir=str(root), images=len(vectors), refused=refused, **extra)


SAMPLE_CAPTURES = 6  # captures per sample person in calibrate_samples
SAMPLE_PALMS = 20  # synthetic palm identities in calibrate_samples


def calibrate_samples(encoder: modalities.Encoder | str, *, captures: int = SAMPLE_CAPTURES,
                      palms: int = SAMPLE_PALMS, seed: int = 1000) -> CalibrationReport:
    """Calibrate on the sample people shipped here, by the encoder's kind: the packaged face photos
    (`biomem samples`'s set) or `palms` synthetic palms, `captures` captures each."""
    if isinstance(encoder, str):
        encoder = modalities.create(encoder)
    kind = encoder.info.kind
    with tempfile.TemporaryDirectory(prefix="biomem-calibrate-") as tmp:
        if kind == "face":
            write_face_set(tmp, captures)
        elif kind == "palm":
            from modalities.palmsynth import write_dataset

            write_dataset(tmp, palms, captures, seed=seed)
        else:
            raise InvalidInputError(f"no sample data for a {kind!r} encoder: calibrate on a folder")
        report = calibrate_folder(encoder, tmp)
    return replace(report, data_dir=f"sample {kind}s ({report.identities} people, {captures} captures each)")


def save(report: CalibrationReport, memory: Biometrics, which: str = "intersection", *,
         step_up: bool = False) -> float:
    """Store the report's τ (rule `which`: "intersection" or "fmr") in the memory DB, with its provenance.

    step_up: store it as the stricter step-up τ (calibrate at a lower FMR for that, e.g. 1e-5).
    """
    points = {"intersection": report.intersection, "fmr": report.at_fmr}
    if which not in points:
        raise InvalidInputError(f"which must be one of {sorted(points)}, got {which!r}")
    if report.modality is None:
        raise InvalidInputError("the report names no modality: pass modality= to calibrate_scores")
    point = points[which]
    rule = ("intersection of the genuine and impostor densities (paper)" if which == "intersection"
            else f"smallest τ with FMR <= {report.target_fmr:g}")
    data = f"data {report.data_dir}" if report.data_dir else "scores given"
    if report.pairs_file:
        data += f", pairs {report.pairs_file}"
    images = f", {report.images} images ({len(report.refused)} refused)" if report.images is not None else ""
    source = (f"calibrate {which}: {rule}; {data}; {report.genuine} genuine / {report.impostor} impostor"
              f" scores{images}; FMR {point.fmr:.2e} FNMR {point.fnmr:.2e};"
              f" {datetime.now(timezone.utc).date().isoformat()}")
    memory.set_threshold(point.tau, report.modality, source, step_up=step_up)
    delta = None if step_up else report.margin(point.tau)
    if delta is not None:
        memory.set_margin(delta, report.modality, f"calibrate {which}: τ {point.tau:.4f} − the runner-up score"
                          f" {1 - MARGIN_RATE:.0%} of {len(report.top_two)} genuine probes stay under; {data}; "
                          f"{datetime.now(timezone.utc).date().isoformat()}")
    return point.tau


def top_two(matrix: np.ndarray, sizes: list[int], chunk: int = 1024) -> np.ndarray:
    """(top-1, top-2) per genuine probe: each image's best cosine with its own identity's other images and
    with any other identity's, for images whose identity has two or more (rows grouped by identity)."""
    labels = np.repeat(np.arange(len(sizes)), sizes)
    rows = np.flatnonzero(np.repeat(np.asarray(sizes) > 1, sizes))
    out = np.empty((rows.size, 2))
    for start in range(0, rows.size, chunk):
        batch = rows[start:start + chunk]
        sims = matrix[batch] @ matrix.T
        sims[np.arange(batch.size), batch] = -np.inf  # not the image itself
        same = labels[batch][:, None] == labels[None, :]
        out[start:start + batch.size, 0] = np.where(same, sims, -np.inf).max(axis=1)
        out[start:start + batch.size, 1] = np.where(same, -np.inf, sims).max(axis=1, initial=-np.inf)
    return out


# ---- scores -----------------------------------------------------------------------------------------------


def _checked(scores: Sequence[float] | np.ndarray, kind: str) -> np.ndarray:
    """Scores as a sorted float64 array of cosines, clipped to [-1, 1] against float rounding."""
    array = np.asarray(scores, dtype=np.float64).reshape(-1)
    if not np.isfinite(array).all():
        raise InvalidInputError(f"{kind} scores must be finite numbers")
    if array.size and np.abs(array).max() > 1.0 + 1e-4:
        raise InvalidInputError(f"{kind} scores are cosines and must lie in [-1, 1]; got {np.abs(array).max()}")
    return np.sort(np.clip(array, -1.0, 1.0))


def _density(scores: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Gaussian KDE (Scott's bandwidth for the raw scores) on `grid`, fitted on the scores binned finely."""
    counts, edges = np.histogram(scores, bins=KDE_BINS)
    kept = counts > 0
    centres = (edges[:-1] + edges[1:])[kept] / 2
    return gaussian_kde(centres, bw_method=scores.size ** -0.2, weights=counts[kept])(grid)


def _intersection(g: np.ndarray, i: np.ndarray, grid: np.ndarray, g_density: np.ndarray,
                  i_density: np.ndarray) -> tuple[float, str]:
    """The paper's τ: where the densities cross between the modes (module doc: the fallbacks)."""
    if i[-1] < g[0]:
        return float((i[-1] + g[0]) / 2), "perfectly separated: midpoint of max impostor and min genuine"
    low, high = int(np.argmax(i_density)), int(np.argmax(g_density))
    if high <= low:
        raise InvalidInputError(
            f"the genuine mode ({grid[high]:.4f}) is not above the impostor mode ({grid[low]:.4f}): "
            "the encoder does not separate these identities, or the labels are wrong")
    x, diff = grid[low:high + 1], (g_density - i_density)[low:high + 1]
    total = (g_density + i_density)[low:high + 1]
    crossings = np.flatnonzero((diff[:-1] < 0) & (diff[1:] >= 0))
    if crossings.size == 0:
        return float(x[np.argmin(total)]), "densities do not cross between the modes: minimum of their sum"
    k = crossings[np.argmin(total[crossings])]
    tau = x[k] + (x[k + 1] - x[k]) * diff[k] / (diff[k] - diff[k + 1])
    return float(tau), "genuine and impostor KDE densities cross between the modes"


def _at_target_fmr(i: np.ndarray, target: float) -> tuple[float, str, list[str]]:
    """The smallest τ whose empirical FMR <= target, how it was found, and the resolution caveat."""
    n = i.size
    allowed = int(np.floor(target * n))  # impostors the target tolerates: the largest k with k/n <= target
    if (allowed + 1) / n <= target:  # floor(target * n) can round one short
        allowed += 1
    tau = float(np.nextafter(i[n - allowed - 1], np.inf))
    how = f"just above the impostor score ranked {allowed + 1} from the top ({allowed} allowed)"
    caveats = []
    if 1.0 / n > target:
        caveats.append(f"only {n:,} impostor scores: the smallest non-zero FMR they can show is 1/{n:,} ="
                       f" {1.0 / n:.1e}, above the target {target:g}; τ at FMR admits none of them, which does"
                       " not demonstrate FMR <= target (use more identities or a larger max_impostors)")
    return tau, how, caveats


def _equal_error(g: np.ndarray, i: np.ndarray) -> tuple[float, float]:
    """(EER, its threshold): where FNMR - FMR turns non-negative, interpolated between adjacent thresholds."""
    taus = np.unique(np.concatenate([g, i, [np.nextafter(max(g[-1], i[-1]), np.inf)]]))
    fmr = 1.0 - np.searchsorted(i, taus, side="left") / i.size
    fnmr = np.searchsorted(g, taus, side="left") / g.size
    diff = fnmr - fmr  # -1 at the lowest threshold, +1 above every score, non-decreasing between
    k = int(np.argmax(diff >= 0))
    share = -diff[k - 1] / (diff[k] - diff[k - 1])
    return (float(fmr[k - 1] + share * (fmr[k] - fmr[k - 1])),
            float(taus[k - 1] + share * (taus[k] - taus[k - 1])))


def _point(tau: float, g: np.ndarray, i: np.ndarray, how: str) -> OperatingPoint:
    """The empirical errors of admitting cos >= tau."""
    false_matches = int(i.size - np.searchsorted(i, tau, side="left"))
    false_non_matches = int(np.searchsorted(g, tau, side="left"))
    return OperatingPoint(tau=float(tau), fmr=false_matches / i.size, fnmr=false_non_matches / g.size,
                          false_matches=false_matches, false_non_matches=false_non_matches, how=how)
