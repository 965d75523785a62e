"""The Chat tab: ask (and remember) as whoever the probe shows."""

from __future__ import annotations

from typing import Any

import gradio as gr

from .. import bursts, render
from ..controller import Controller
from ..widgets import RAW, Control, Listing, action, burst_input, probe_input, voice_input
from .notes import listing_now


def chat_tab(ui: Controller, encoder: gr.Dropdown, status: gr.HTML, listing: Listing) -> gr.Image:
    with gr.Row():
        with gr.Column(scale=3):
            chatbot = gr.Chatbot(label="Shared agent", height=380, elem_id="bm-chatbot", buttons=["copy", "copy_all"],
                                 placeholder="Ask something with a probe: the gate picks whose memories the "
                                             "agent may use. Each message says who asked.")
            with gr.Row(equal_height=True):
                question = gr.Textbox(placeholder="Ask, or type something to remember…", show_label=False,
                                      scale=4, elem_id="bm-question")
                ask_button = gr.Button("Ask", variant="primary", scale=1, min_width=80, elem_id="bm-ask")
                remember_button = gr.Button("Remember", scale=1, min_width=80, elem_id="bm-remember")
            probe = probe_input(ui, "bm-chat-probe", "Who is asking? Probe for this message", encoder)
            burst = burst_input(ui, "bm-chat-probe", probe)
            voice = voice_input(ui, "bm-chat-voice")
        with gr.Column(scale=2):
            panel = gr.HTML(render.panel_html(None), elem_id="bm-chat-panel")
    with gr.Accordion("What the LLM saw: the exact prompt", open=False):
        prompt = gr.Textbox(lines=8, show_label=False, interactive=False, elem_id="bm-prompt")
    with gr.Accordion("Raw result (JSON, as the ask / remember API returns it)", open=False):
        raw = gr.JSON(elem_id="bm-chat-json")

    def ask(question: str, probe: Any, frames: bursts.Frames | None, encoder: str | None, voice: Any = None,
            request: gr.Request | None = None) -> dict[str, Any]:
        """Ask the shared agent as whoever `probe` (and the recording `voice`, optional in the API) shows; the gate
        decides which memories it may read."""
        return ui.ask(question, bursts.chosen(probe, frames), encoder, request, voice)

    def remember(text: str, probe: Any, frames: bursts.Frames | None, encoder: str | None, voice: Any = None,
                 request: gr.Request | None = None) -> dict[str, Any]:
        """Store `text` for whoever `probe` (and the recording `voice`) shows (refused for a stranger)."""
        return ui.remember(text, bursts.chosen(probe, frames), encoder, request, voice=voice)

    def shown(result: dict[str, Any] | None, history: list[dict[str, Any]] | None,
              unlocked: dict[str, Any] | None) -> tuple[Any, ...]:
        if result is None:
            return gr.skip(), render.panel_html(None), "", gr.skip(), None, None, gr.skip(), *(gr.skip(),) * 3
        history = [*(history or []), *render.chat_messages(result)]
        if result["kind"] == "remember":
            return (history, render.panel_html(None), "", "", None, None, ui.status(), *listing_now(ui, unlocked))
        return (history, render.panel_html(result), result["prompt"], "", None, None, ui.status(),
                *(gr.skip(),) * 3)

    listing.private.extend([(chatbot, []), (panel, render.panel_html(None)), (prompt, ""), (raw, None)])
    controls = [Control(ask_button, "Ask"), Control(remember_button, "Remember")]
    outputs = [chatbot, panel, prompt, question, probe, voice, status, *listing.outputs]
    for triggers, work, name in (([ask_button.click, question.submit], ask, "ask"),
                                 ([remember_button.click], remember, "remember")):
        action(ui, triggers, "chat", controls, work, [question, probe, burst.frames, encoder, voice], raw, shown,
               [raw, chatbot, listing.unlocked], outputs, name=f"page:{name}", burst=burst, api_name=name,
               show_progress_on=[panel], **RAW)
    return probe
