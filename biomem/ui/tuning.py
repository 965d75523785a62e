"""The Calibrate tab's handlers: the encoder registry as this server sees it, genuine and impostor scores of an
encoder, and storing the τ they give (admin)."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np
from PIL import Image

import modalities

from ..engine import access
from ..engine.memory import BioMemory
from ..identity import calibration_plot
from ..identity.calibrate import CalibrationReport, calibrate_folder, calibrate_samples, save
from . import render
from .doors import Operators
from .fields import Progress, silent
from .messages import hint
from .voices import kind_of

log = logging.getLogger("biomem.ui")


def short(reason: str) -> str:
    """The first clause of an availability reason: what is missing, without the how-to (logged)."""
    return reason.split(":")[0].strip()


class Calibration:
    """Encoders and τ for the page, over one BioMemory; a server folder is the admin's (the operators' doors)."""

    def __init__(self, mem: BioMemory, operators: Operators) -> None:
        self.mem = mem
        self.operators = operators

    def encoder_table(self) -> list[list[Any]]:
        """The registry: each encoder's metadata (no weights loaded), whether it loads here, this store's τ."""
        rows = []
        for status in modalities.availability_all():
            try:
                info = modalities.info(status.name)
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the page
                rows.append([status.name, "?", "", "", "", f"unavailable ({exc.__class__.__name__})", "", ""])
                continue
            rows.append([status.name, info.kind, info.dim, round(info.default_threshold, 4),
                         round(self.mem.threshold(status.name), 4), "yes" if status.ready else short(status.reason),
                         info.weights, info.license])
        return rows

    def encoder_choices(self) -> tuple[list[str], str]:
        """(image encoders that can load here, a line naming the others and why): the probe encoder and what the
        Calibrate tab scores images with. A voice is not offered: recordings have boxes of their own."""
        ready, missing = [], []
        for status in modalities.availability_all():
            if kind_of(status.name) != "voice":
                (ready if status.ready else missing).append(status)
        if self.mem.modality not in [s.name for s in ready]:
            ready.insert(0, modalities.availability(self.mem.modality))
        for status in missing:
            log.info("encoder %s unavailable: %s", status.name, status.reason)
        note = "; ".join(f"`{s.name}` ({short(s.reason)})" for s in missing)
        return [s.name for s in ready], f"Not available on this server: {note}." if note else ""

    def calibrate(self, encoder: str | None, source: str, folder: str = "", progress: Progress = silent,
                  request: gr.Request | None = None) -> CalibrationReport:
        """Genuine/impostor scores of `encoder` on the sample people (or, admin only, a server folder)."""
        name = encoder or self.mem.modality
        if source == "folder":
            access.require("page:calibrate_folder", self.operators.role(request), "Calibrating on a server folder")
            progress(0.1, desc=f"Encoding the images under {folder} with {name}…")
            return calibrate_folder(self.mem.encoder(name), Path((folder or "").strip()).expanduser())
        progress(0.1, desc=f"Encoding sample captures with {name}…")
        return calibrate_samples(self.mem.encoder(name))

    def view(self, report: CalibrationReport) -> tuple[np.ndarray, str]:
        """(histograms and DET curve as an image, markdown) of a report, with this store's current τ, and its
        FPIR at the number of people this store enrolled with the report's encoder and at its target FPIR."""
        with tempfile.TemporaryDirectory(prefix="biomem-plot-") as tmp:
            plot = np.asarray(Image.open(calibration_plot.plot(report, Path(tmp) / "scores.png")).convert("RGB"))
        guards = self.mem.identification(report.modality)
        return plot, render.calibration_text(report, self.mem.threshold(report.modality), guards["enrolled"],
                                             guards["target_fpir"])

    def store_tau(self, report: CalibrationReport | None, which: str) -> str:
        """Store the report's τ (the page's door: admin only)."""
        if report is None:
            raise hint("Run a calibration first.", "No calibration")
        tau = save(report, self.mem, which=which)
        return f"Stored τ = {tau:.4f} for `{report.modality}` ({which}); the gate uses it from now on."

