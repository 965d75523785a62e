"""Calibrate the gate's τ for one encoder on one dataset, from genuine and impostor cosine scores.

    report = calibrate_folder(modalities.create("face-arcface-s"), "lfw/")   # or "face-arcface-s"
    print(report.table())
    report.plot("scores.png")
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
"""

from __future__ import annotations

import logging
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image
from scipy.stats import gaussian_kde

import modalities

from .errors import InvalidInputError

if TYPE_CHECKING:
    from .memory import BioMemory

log = logging.getLogger(__name__)

MIN_SCORES = 2  # the fewest scores of each kind a density can be estimated from
GRID_POINTS = 2048  # KDE evaluation grid over the score range
KDE_BINS = 16384  # scores are binned this finely (per kind) before the KDE: exact far below the bandwidth, fast for 200k
PAIR_CHUNK = 1 << 22  # floats gathered at once when scoring pairs (16 MB)
HIST_BINS = 100


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

    @property
    def eer_threshold(self) -> float:
        """τ at the equal error rate."""
        return self.at_eer.tau

    def as_dict(self) -> dict[str, Any]:
        """Every number as JSON-ready values (the raw scores are left out)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, np.ndarray):
                out[f.name] = asdict(value) if isinstance(value, OperatingPoint) else value
        return out

    def table(self) -> str:
        """A markdown summary: data counts, one row per τ with its FMR and FNMR, then caveats."""
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
        for name, point in (("intersection (paper)", self.intersection),
                            (f"FMR ≤ {self.target_fmr:g}", self.at_fmr),
                            (f"EER = {self.eer:.4%}", self.at_eer)):
            lines.append(f"| {name} | {point.tau:.5f} | {point.fmr:.3e} ({point.false_matches}/{self.impostor})"
                         f" | {point.fnmr:.3e} ({point.false_non_matches}/{self.genuine}) | {point.how} |")
        if self.caveats:
            lines += ["", *(f"- caveat: {c}" for c in self.caveats)]
        return "\n".join(lines)

    def det_curve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(FMR, FNMR, τ) at every distinct score, τ ascending: the detection error trade-off of a
        gate that admits scores >= τ, from every impostor admitted to (nearly) none."""
        taus = np.unique(np.concatenate([self.genuine_scores, self.impostor_scores]))
        fmr = 1.0 - np.searchsorted(np.sort(self.impostor_scores), taus, side="left") / self.impostor
        fnmr = np.searchsorted(np.sort(self.genuine_scores), taus, side="left") / self.genuine
        return fmr, fnmr, taus

    def plot(self, path: str | Path) -> Path:
        """Write a PNG of both score histograms (density-normalised) with each τ marked, and the DET
        curve (FNMR against FMR, log scales) with the same τ as points: to see the choice."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(13, 5), layout="constrained")
        FigureCanvasAgg(fig)  # Agg without pyplot: no global state, safe in threads and headless
        ax, det = fig.subplots(1, 2, width_ratios=(3, 2))
        edges = np.histogram_bin_edges(np.concatenate([self.impostor_scores, self.genuine_scores]), HIST_BINS)
        ax.hist(self.impostor_scores, bins=edges, density=True, alpha=0.5, color="tab:red",
                label=f"impostor ({self.impostor:,})")
        ax.hist(self.genuine_scores, bins=edges, density=True, alpha=0.5, color="tab:green",
                label=f"genuine ({self.genuine:,})")
        # Zero error rates cannot sit on a log axis: they are drawn at half of one error in n.
        floor_fmr, floor_fnmr = 0.5 / self.impostor, 0.5 / self.genuine
        fmr, fnmr, _ = self.det_curve()
        det.step(np.maximum(fmr, floor_fmr), np.maximum(fnmr, floor_fnmr), where="post", color="tab:blue")
        for point, style, marker, name in ((self.intersection, "-", "o", "τ intersection"),
                                           (self.at_fmr, "--", "s", f"τ at FMR ≤ {self.target_fmr:g}"),
                                           (self.at_eer, ":", "^", f"τ at EER {self.eer:.2%}")):
            label = f"{name} = {point.tau:.4f} (FMR {point.fmr:.1e}, FNMR {point.fnmr:.1e})"
            ax.axvline(point.tau, color="black", linestyle=style, label=label)
            det.plot(max(point.fmr, floor_fmr), max(point.fnmr, floor_fnmr), marker=marker, color="black",
                     linestyle="none", label=name)
        ax.set_xlabel("cosine score")
        ax.set_ylabel("density")
        ax.set_title(f"{self.modality or 'scores'}: genuine vs impostor")
        ax.legend(fontsize="small")
        det.set_xscale("log")
        det.set_yscale("log")
        det.set_xlabel("false match rate (FMR)")
        det.set_ylabel("false non-match rate (FNMR)")
        det.set_title("DET curve (zeros drawn at 0.5 / n)")
        det.grid(True, which="both", alpha=0.3)
        det.legend(fontsize="small")
        path = Path(path)
        fig.savefig(path, format="png", dpi=120)
        return path


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
        folders = _identity_folders(root)
        vectors, refused = _encode_all(encoder, root, [p for paths in folders.values() for p in paths])
        sizes = [n for n in (sum(p in vectors for p in paths) for paths in folders.values()) if n]
        matrix = _stack(vectors, root)
        genuine = _genuine_scores(matrix, sizes)
        impostor, total = _impostor_scores(matrix, sizes, max_impostors, np.random.default_rng(seed))
        extra: dict[str, Any] = {"identities": len(sizes), "impostor_total": total}
    else:
        rows = _read_pairs(Path(pairs))
        vectors, refused = _encode_all(encoder, root, list(dict.fromkeys(p for a, b, _ in rows for p in (a, b))))
        kept = [(a, b, same) for a, b, same in rows if a in vectors and b in vectors]
        matrix, index = _stack(vectors, root), {path: n for n, path in enumerate(vectors)}
        scores = _pair_cosines(matrix, np.array([index[a] for a, _, _ in kept], dtype=np.int64),
                               np.array([index[b] for _, b, _ in kept], dtype=np.int64))
        same = np.array([s for _, _, s in kept], dtype=bool)
        genuine, impostor = scores[same], scores[~same]
        extra = {"pairs_file": str(pairs), "skipped_pairs": len(rows) - len(kept)}
    if refused:
        log.warning("%d of %d images refused by %s", len(refused), len(vectors) + len(refused), encoder.name)
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
            from .samples import write_face_set

            write_face_set(tmp, captures)
        elif kind == "palm":
            from modalities.palmsynth import write_dataset

            write_dataset(tmp, palms, captures, seed=seed)
        else:
            raise InvalidInputError(f"no sample data for a {kind!r} encoder: calibrate on a folder")
        report = calibrate_folder(encoder, tmp)
    return replace(report, data_dir=f"sample {kind}s ({report.identities} people, {captures} captures each)")


def save(report: CalibrationReport, memory: BioMemory, which: str = "intersection", *,
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
    return point.tau


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


def _genuine_scores(matrix: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Cosines of every same-identity pair: the upper triangle of each identity's Gram block."""
    starts = np.cumsum([0, *sizes[:-1]])
    return np.concatenate([(matrix[s:s + n] @ matrix[s:s + n].T)[np.triu_indices(n, 1)]
                           for s, n in zip(starts, sizes)])


def _impostor_scores(matrix: np.ndarray, sizes: list[int], cap: int | None,
                     rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Cosines of all cross-identity pairs, or of a uniform sample of `cap` distinct ones; and their total.

    Rows are grouped by identity, so the pairs (a, b) with b in a later identity than a are numbered
    0..total-1 in order of a; a sampled number maps back to its pair without listing the others.
    """
    ends = np.repeat(np.cumsum(sizes), sizes)  # one past the last row of each row's identity
    offsets = np.concatenate([[0], np.cumsum(len(matrix) - ends)])
    total = int(offsets[-1])
    if cap is None or total <= cap:
        numbers = np.arange(total)
    else:
        numbers = np.sort(rng.choice(total, size=cap, replace=False))
    first = np.searchsorted(offsets, numbers, side="right") - 1
    return _pair_cosines(matrix, first, ends[first] + numbers - offsets[first]), total


def _pair_cosines(matrix: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise dot products of matrix[a] and matrix[b] (unit vectors: cosines), in bounded chunks."""
    out = np.empty(len(a), dtype=np.float64)
    step = max(1, PAIR_CHUNK // matrix.shape[1])
    for start in range(0, len(a), step):
        rows = slice(start, start + step)
        out[rows] = np.einsum("ij,ij->i", matrix[a[rows]], matrix[b[rows]])
    return out


# ---- data -------------------------------------------------------------------------------------------------


def _identity_folders(root: Path) -> dict[str, list[str]]:
    """{identity: image paths relative to root} for every non-hidden sub-folder, sorted for reproducibility."""
    suffixes = Image.registered_extensions()
    folders = {d.name: sorted(f"{d.name}/{f.name}" for f in d.iterdir()
                              if f.is_file() and f.suffix.lower() in suffixes and not f.name.startswith("."))
               for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith(".")}
    if not any(folders.values()):
        raise InvalidInputError(f"{root} holds no identity folders with images (expected DIR/<identity>/<images>)")
    return folders


def _read_pairs(path: Path) -> list[tuple[str, str, bool]]:
    """(path_a, path_b, same identity) per line of a pairs file: `path_a path_b 1|0`, `#` comments."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"cannot read the pairs file {path}: {exc}") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            parts = shlex.split(line, comments=True)
        except ValueError as exc:
            raise InvalidInputError(f"{path}:{number}: {exc}") from None
        if not parts:
            continue
        if len(parts) != 3 or parts[2] not in ("0", "1"):
            raise InvalidInputError(f"{path}:{number}: expected `path_a path_b 1|0`, got {line.strip()!r}")
        rows.append((parts[0], parts[1], parts[2] == "1"))
    if not rows:
        raise InvalidInputError(f"the pairs file {path} lists no pairs")
    return rows


def _encode_all(encoder: modalities.Encoder, root: Path, paths: list[str]) -> tuple[dict[str, np.ndarray],
                                                                                   dict[str, str]]:
    """Embed each image once; images the encoder refuses are recorded with the reason, not fatal."""
    vectors: dict[str, np.ndarray] = {}
    refused: dict[str, str] = {}
    for done, path in enumerate(paths, 1):
        try:
            vectors[path] = encoder.encode(str(root / path))
        except InvalidInputError as exc:
            refused[path] = f"{type(exc).__name__}: {exc}"
        if done % 500 == 0:
            log.info("encoded %d/%d images (%d refused)", done, len(paths), len(refused))
    return vectors, refused


def _stack(vectors: dict[str, np.ndarray], root: Path) -> np.ndarray:
    """The embeddings as one float32 matrix, rows in insertion order."""
    if not vectors:
        raise InvalidInputError(f"the encoder refused every image under {root}: nothing to calibrate on")
    return np.stack(list(vectors.values())).astype(np.float32, copy=False)
