"""Pictures of a calibration: the genuine and impostor score histograms with each τ, and the DET curve."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .calibrate import CalibrationReport

HIST_BINS = 100


def det_curve(report: CalibrationReport) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(FMR, FNMR, τ) at every distinct score, τ ascending: the detection error trade-off of a
    gate that admits scores >= τ, from every impostor admitted to (nearly) none."""
    taus = np.unique(np.concatenate([report.genuine_scores, report.impostor_scores]))
    fmr = 1.0 - np.searchsorted(np.sort(report.impostor_scores), taus, side="left") / report.impostor
    fnmr = np.searchsorted(np.sort(report.genuine_scores), taus, side="left") / report.genuine
    return fmr, fnmr, taus


def plot(report: CalibrationReport, path: str | Path) -> Path:
    """Write a PNG of both score histograms (density-normalised) with each τ marked, and the DET
    curve (FNMR against FMR, log scales) with the same τ as points: to see the choice."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 5), layout="constrained")
    FigureCanvasAgg(fig)  # Agg without pyplot: no global state, safe in threads and headless
    ax, det = fig.subplots(1, 2, width_ratios=(3, 2))
    edges = np.histogram_bin_edges(np.concatenate([report.impostor_scores, report.genuine_scores]), HIST_BINS)
    ax.hist(report.impostor_scores, bins=edges, density=True, alpha=0.5, color="tab:red",
            label=f"impostor ({report.impostor:,})")
    ax.hist(report.genuine_scores, bins=edges, density=True, alpha=0.5, color="tab:green",
            label=f"genuine ({report.genuine:,})")
    # Zero error rates cannot sit on a log axis: they are drawn at half of one error in n.
    floor_fmr, floor_fnmr = 0.5 / report.impostor, 0.5 / report.genuine
    fmr, fnmr, _ = det_curve(report)
    det.step(np.maximum(fmr, floor_fmr), np.maximum(fnmr, floor_fnmr), where="post", color="tab:blue")
    for point, style, marker, name in ((report.intersection, "-", "o", "τ intersection"),
                                       (report.at_fmr, "--", "s", f"τ at FMR ≤ {report.target_fmr:g}"),
                                       (report.at_eer, ":", "^", f"τ at EER {report.eer:.2%}")):
        label = f"{name} = {point.tau:.4f} (FMR {point.fmr:.1e}, FNMR {point.fnmr:.1e})"
        ax.axvline(point.tau, color="black", linestyle=style, label=label)
        det.plot(max(point.fmr, floor_fmr), max(point.fnmr, floor_fnmr), marker=marker, color="black",
                 linestyle="none", label=name)
    ax.set_xlabel("cosine score")
    ax.set_ylabel("density")
    ax.set_title(f"{report.modality or 'scores'}: genuine vs impostor")
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
