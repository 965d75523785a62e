"""The Calibrate tab: genuine and impostor scores of an encoder, and storing the τ they give (admin)."""

from __future__ import annotations

import functools
from typing import Any

import gradio as gr

from .. import render
from ..controller import Controller
from ..widgets import Control, action


def calibrate_tab(ui: Controller, encoder: gr.Dropdown, status: gr.HTML) -> None:
    gr.Markdown("How alike are two captures of one person (genuine) and captures of two people (impostor)? The "
                "gate admits similarity ≥ τ; the paper takes τ where the two densities cross, the security choice "
                "is τ at a target false-match rate. The encoder is the **probe encoder** chosen at the top (faces and "
                "palms: the voice encoder is calibrated on recordings with `python -m benchmarks.voice`, not here).")
    registry = gr.Dataframe(ui.calibration.encoder_table(), headers=[
        "encoder", "kind", "dim", "default τ", "τ in this store", "loads here", "weights", "licence"],
        interactive=False, label="Encoder registry", elem_id="bm-registry")
    with gr.Row(equal_height=True):
        source = gr.Radio([("Sample people (shipped faces / synthetic palms)", "samples"),
                           ("A folder on the server: DIR/<person>/<images>", "folder")], value="samples",
                          label="Scores from", scale=3, interactive=ui.admin)
        folder = gr.Textbox(label="Folder", scale=2, visible=ui.admin)
        button = gr.Button("Compute histograms and DET", variant="primary", scale=1, elem_id="bm-calibrate")
    plot = gr.Image(label="Genuine vs impostor scores and DET curve, with τ", type="numpy", format="png",
                    interactive=False, elem_id="bm-cal-plot")
    table = gr.Markdown(elem_id="bm-cal-table")

    def guarded() -> str:
        return render.identification_text({m: ui.mem.identification(m)
                                           for m in sorted({ui.mem.modality, *ui.mem.gate.modalities()})})

    guards = gr.Markdown(guarded(), elem_id="bm-fpir")  # refreshed by a calibration and by storing τ
    with gr.Row(visible=ui.admin):
        store_intersection = gr.Button("Store τ (intersection, the paper's)")
        store_fmr = gr.Button("Store τ (at FMR ≤ 1e-3)")
    message = gr.Markdown()
    report, calibrated, stored = gr.State(None), gr.State(None), gr.State(None)

    def calibrate(encoder: str | None, source: str, folder: str, request: gr.Request,
                  progress: gr.Progress = gr.Progress()) -> dict[str, Any]:  # noqa: B008
        done = ui.calibration.calibrate(encoder, source, folder, progress, request)
        return {"report": done, "view": ui.calibration.view(done), "guards": guarded()}

    def shown(done: dict[str, Any] | None) -> tuple[Any, ...]:
        return (done["report"], *done["view"], done["guards"]) if done else (gr.skip(),) * 4

    action(ui, [button.click], "calibrate", [Control(button, "Compute histograms and DET")], calibrate,
           [encoder, source, folder], calibrated, shown, [calibrated], [report, plot, table, guards],
           name="page:calibrate_samples", show_progress_on=[plot])

    def tau_stored(done: str | None) -> tuple[Any, ...]:
        return (done, ui.calibration.encoder_table(), ui.status(), guarded()) if done else (gr.skip(),) * 4

    controls = [Control(store_intersection, "Store τ (intersection, the paper's)"),
                Control(store_fmr, "Store τ (at FMR ≤ 1e-3)")]
    for store, which in ((store_intersection, "intersection"), (store_fmr, "fmr")):
        action(ui, [store.click], "tau", controls, functools.partial(store_tau, ui, which=which), [report], stored,
               tau_stored, [stored], [message, registry, status, guards], name="page:store_tau")


def store_tau(ui: Controller, report: Any, *, which: str) -> str:
    return ui.calibration.store_tau(report, which)
