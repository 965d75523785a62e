"""The Compare tab: one question asked as two requesters, side by side."""

from __future__ import annotations

import functools
from typing import Any

import gradio as gr

from .. import render
from ..controller import Controller
from ..widgets import QUICK, RAW, Control, Listing, action, on, probe_input, voice_input

DEFAULT_QUESTION = "What is my bank card PIN?"
# Compare's demo questions (button id, question): one person's own note, then the demo household's notes.
DEMO_QUESTIONS = (("pin", DEFAULT_QUESTION), ("wifi", "What is the Wi-Fi password?"),
                  ("party", "When is the surprise party?"))


def compare_tab(ui: Controller, encoder: gr.Dropdown, load_button: gr.Button, listing: Listing) -> dict[str, Any]:
    """The one-minute story; returns its button, its probes and what shows a result, for Load demo."""
    gr.Markdown("One question, two people at the same agent. Each side is gated by its own probe: two "
                "decisions, two sets of memories, two answers. Ana, Ben and Chloe share a household: its Wi-Fi "
                "password reaches all three, the surprise party everyone but Chloe, and a stranger neither.",
                elem_classes="bm-hint")
    with gr.Row(equal_height=True):
        question = gr.Textbox(DEFAULT_QUESTION, label="Question", scale=4, elem_id="bm-cmp-question")
        button = gr.Button("Compare", variant="primary", scale=1, elem_id="bm-cmp-button")
    with gr.Row(elem_id="bm-cmp-questions", elem_classes="bm-samples"):
        for key, text in DEMO_QUESTIONS:
            ask = gr.Button(text, size="sm", min_width=0, elem_id=f"bm-cmp-q-{key}")
            ask.click(on(ui, "page:view", functools.partial(same, text)), None, [question], **QUICK)
    with gr.Row():
        with gr.Column():
            probe_a = probe_input(ui, "bm-cmp-probe-a", "Requester A — probe", encoder, height=200)
            voice_a = voice_input(ui, "bm-cmp-voice-a", "Requester A — who is speaking? (optional)")
            panel_a = gr.HTML(render.panel_html(None, True), elem_id="bm-cmp-panel-a")
        with gr.Column():
            probe_b = probe_input(ui, "bm-cmp-probe-b", "Requester B — probe", encoder, height=200)
            voice_b = voice_input(ui, "bm-cmp-voice-b", "Requester B — who is speaking? (optional)")
            panel_b = gr.HTML(render.panel_html(None, True), elem_id="bm-cmp-panel-b")
    chart = gr.HTML("", elem_id="bm-cmp-chart")
    with gr.Accordion("Raw result (JSON, as the compare API returns it)", open=False):
        raw = gr.JSON(elem_id="bm-cmp-json")

    empty = render.panel_html(None, True)
    listing.private.extend([(panel_a, empty), (panel_b, empty), (chart, ""), (raw, None)])

    def compare(question: str, probe_a: Any, probe_b: Any, encoder: str | None, voice_a: Any = None,
                voice_b: Any = None, request: gr.Request | None = None) -> dict[str, Any]:
        """One question asked as two requesters (a probe, a recording or both each; the recordings optional in
        the API): both gate decisions, retrieved notes and answers."""
        return ui.compare(question, probe_a, probe_b, encoder, request, voice_a, voice_b)

    def shown(result: dict[str, Any] | None, encoder: str | None) -> tuple[Any, ...]:
        result = result or {}
        return (render.panel_html(result.get("a"), True), render.panel_html(result.get("b"), True),
                render.compare_chart(result), *(ui.resample(result.get(side), encoder) for side in "ab"), None, None)

    # Load demo fills these probes: it may not run while a compare does, nor a compare while it loads.
    controls = [Control(button, "Compare"), Control(load_button, "Load demo")]
    action(ui, [button.click, question.submit], "compare", controls, compare,
           [question, probe_a, probe_b, encoder, voice_a, voice_b], raw, shown, [raw, encoder],
           [panel_a, panel_b, chart, probe_a, probe_b, voice_a, voice_b], name="page:compare",
           api_name="compare",
           show_progress_on=[panel_a, panel_b], **RAW)
    return {"button": button, "probes": [probe_a, probe_b], "shown": [panel_a, panel_b, chart]}


def same(value: Any) -> Any:
    """`value` itself: a button that puts a fixed value in an input."""
    return value
