"""Pictures of a calibration: the genuine and impostor score histograms with each τ, and the DET curve."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .calibrate import CalibrationReport

if TYPE_CHECKING:
    from matplotlib.figure import Figure

HIST_BINS = 100


def det_curve(report: CalibrationReport) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(FMR, FNMR, τ) at every distinct score, τ ascending: the detection error trade-off of a
    gate that admits scores >= τ, from every impostor admitted to (nearly) none."""
    taus = np.unique(np.concatenate([report.genuine_scores, report.impostor_scores]))
    fmr = 1.0 - np.searchsorted(np.sort(report.impostor_scores), taus, side="left") / report.impostor
    fnmr = np.searchsorted(np.sort(report.genuine_scores), taus, side="left") / report.genuine
    return fmr, fnmr, taus


def figure(report: CalibrationReport) -> Figure:
    """Both score histograms (density-normalised) with each τ marked, and the DET curve (FNMR against FMR, log
    scales) with the same τ as points; one key below both panels, so that no label covers a bar, line or point."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(13, 5.6), layout="constrained")
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
    handles, labels = ax.get_legend_handles_labels()
    # hollow markers of three sizes: τ that fall on one point of the DET curve stay visible one inside the other
    for point, style, marker, size, name in ((report.intersection, "-", "o", 11, "τ intersection"),
                                             (report.at_fmr, "--", "s", 8, f"τ at FMR ≤ {report.target_fmr:g}"),
                                             (report.at_eer, ":", "^", 6, f"τ at EER {report.eer:.2%}")):
        hollow = {"marker": marker, "markersize": size, "markerfacecolor": "none", "markeredgewidth": 1.5,
                  "color": "black"}
        ax.axvline(point.tau, color="black", linestyle=style)
        det.plot(max(point.fmr, floor_fmr), max(point.fnmr, floor_fnmr), linestyle="none", **hollow)
        handles.append(Line2D([], [], linestyle=style, **hollow))  # one key for the line and the point
        labels.append(f"{name} = {point.tau:.4f} (FMR {point.fmr:.1e}, FNMR {point.fnmr:.1e})")
    ax.set_xlabel("cosine score")
    ax.set_ylabel("density")
    ax.set_title(f"{report.modality or 'scores'}: genuine vs impostor")
    det.set_xscale("log")
    det.set_yscale("log")
    det.set_xlabel("false match rate (FMR)")
    det.set_ylabel("false non-match rate (FNMR)")
    det.set_title("DET curve (zeros drawn at 0.5 / n)")
    det.grid(True, which="both", alpha=0.3)
    # column by column: the two histograms, then the three τ (line style and DET marker alike)
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize="small", handlelength=3)
    return fig


def plot(report: CalibrationReport, path: str | Path) -> Path:
    """Write figure(report) as a PNG: to see the choice of τ."""
    path = Path(path)
    figure(report).savefig(path, format="png", dpi=120)
    return path
