"""The operator's panels: sign in with a key, import LoCoMo conversations, and Load demo."""

from __future__ import annotations

from typing import Any

import gradio as gr

from ..controller import Controller
from ..widgets import PRIVATE, Control, action, on


def import_panel(ui: Controller, encoder: gr.Dropdown, status: gr.HTML, chat_probe: gr.Image) -> None:
    gr.Markdown("Each conversation becomes one identity with a sample palm (or a sample face without a palm "
                "encoder); probe it with the sample person *LoCoMo n* below. About 10 s per conversation.")
    with gr.Row(equal_height=True):
        path = gr.Textbox(ui.settings.locomo, label="locomo10.json path", scale=3, elem_id="bm-locomo-path")
        count = gr.Slider(1, 10, value=2, step=1, label="Conversations", scale=1)
        button = gr.Button("Import", scale=1, elem_id="bm-locomo-import")
    with gr.Row(equal_height=True):
        person = gr.Dropdown([f"LoCoMo {i + 1}" for i in range(10)], value="LoCoMo 1", label="Sample person", scale=2)
        sample_button = gr.Button("Put a capture in the Chat probe", scale=1)
    message = gr.Markdown(elem_id="bm-locomo-message")
    result = gr.State(None)

    def run(path: str, count: float, progress: gr.Progress = gr.Progress()) -> str:  # noqa: B008
        return ui.import_locomo(path, int(count), progress)

    def shown(done: str | None) -> tuple[Any, ...]:
        return (done, ui.status()) if done else ("", gr.skip())

    action(ui, [button.click], "import", [Control(button, "Import")], run, [path, count], result, shown, [result],
           [message, status], name="page:import_locomo", show_progress_on=[message])
    sample_button.click(on(ui, "page:sample", ui.sample_capture), [person, encoder], [chat_probe], **PRIVATE)


def operator_panel(ui: Controller) -> None:
    """Sign in with an API key the operator issued: on a store with keys, enrolling and loading the demo
    need an agent key, server paths and τ an admin key (biomem.engine.access); the key is checked, never kept."""
    gr.Markdown("On a server with API keys, enrolling people and loading the demo need an operator's key "
                "(`biomem keys create NAME`). The key is checked on the server for this tab only.")
    with gr.Row(equal_height=True):
        secret = gr.Textbox(label="API key", type="password", scale=3, elem_id="bm-operator-key")
        sign_in = gr.Button("Sign in", scale=1, elem_id="bm-sign-in")
        sign_out = gr.Button("Sign out", scale=1, elem_id="bm-sign-out")
    message = gr.Markdown(elem_id="bm-operator-message")

    def signed_in(secret: str, request: gr.Request) -> tuple[str, str]:
        role = ui.operators.sign_in(secret, request)
        return f"Signed in as **{role}** in this tab.", ""

    def signed_out(request: gr.Request) -> str:
        ui.operators.sign_out(request)
        return "Signed out."

    event = sign_in.click(on(ui, "page:sign_in", signed_in), [secret], [message, secret], **PRIVATE)
    event.failure(on(ui, "page:view", lambda: ""), None, [secret], **PRIVATE)
    sign_out.click(on(ui, "page:sign_in", signed_out), None, [message], **PRIVATE)


def demo_panel(ui: Controller, load_button: gr.Button, load_message: gr.Markdown, encoder: gr.Dropdown,
               status: gr.HTML, compare: dict[str, Any]) -> None:
    """Load demo: its message, the status line and Compare's prefilled probes (Ana and a stranger) land
    in one event; Compare waits, and says so, until they have."""
    loaded = gr.State(None)

    def load_demo(encoder: str | None, progress: gr.Progress = gr.Progress()) -> dict[str, Any]:  # noqa: B008
        message = ui.load_demo(progress)
        probes = [ui.sample_capture("Ana", encoder), ui.sample_capture("Stranger", encoder)]
        return {"message": message, "probes": probes}

    def shown(done: dict[str, Any] | None) -> tuple[Any, ...]:
        if done is None:
            return "", ui.status(), gr.skip(), gr.skip()
        return done["message"], ui.status(), *done["probes"]

    action(ui, [load_button.click], "compare",
           [Control(load_button, "Load demo"), Control(compare["button"], "Compare", busy="Waiting for the demo…")],
           load_demo, [encoder], loaded, shown, [loaded], [load_message, status, *compare["probes"]],
           name="page:load_demo", show_progress_on=[load_message])
