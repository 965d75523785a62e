"""The Gradio page, top to bottom: header, then the Compare, Chat, Enrol and Calibrate tabs.

Each tab builds its components and wires its buttons to the Controller as actions (`action`): the
buttons go busy at once, the work writes to a hidden State (or the API's JSON) and raises for a toast,
then one last event renders everything from that State, clears every probe the work consumed
(whatever happened), clears the results a failure made stale and gives the buttons back. So what the
page says and what it holds arrive together, a second click while an action runs is ignored, and an
error is one toast, never an overlay on an input. Every event is a door of biomem.engine.access (`on` and
`action` name it): its handler checks the visitor's role first, however the event is called.
"""

from __future__ import annotations

import gradio as gr

from ..engine.memory import BioMemory
from ..settings import Settings
from . import render
from .controller import UNLOCK_SECONDS, Controller
from .style import GLOSS, HEADING, INTRO, TITLE
from .tabs.calibrate import calibrate_tab
from .tabs.chat import chat_tab
from .tabs.compare import compare_tab
from .tabs.enrol import enrol_column, households_panel
from .tabs.notes import locking, notes_column
from .tabs.operator import demo_panel, import_panel, operator_panel
from .widgets import PENDING_SECONDS, PRIVATE, Listing, on

QUEUE_SIZE = 1024  # events waiting at once, all visitors together


def header(ui: Controller) -> tuple[gr.HTML, gr.Dropdown, gr.Button, gr.Markdown]:
    gr.Markdown(HEADING, elem_id="bm-heading")
    with gr.Row(elem_id="bm-hero"):
        with gr.Column(scale=3, min_width=300):
            gr.Markdown(INTRO)
            gr.Markdown(GLOSS, elem_classes="bm-gloss", elem_id="bm-gloss")
        with gr.Column(scale=1, min_width=220, elem_id="bm-start"):  # first on a phone (style.CSS)
            load_button = gr.Button("Load demo", variant="primary", elem_id="bm-load-demo")
            load_message = gr.Markdown(elem_id="bm-load-message")
    choices, unavailable = ui.calibration.encoder_choices()
    with gr.Row(equal_height=True, elem_id="bm-top"):
        status = gr.HTML(ui.status(), elem_id="bm-status", scale=3, min_width=320)
        encoder = gr.Dropdown(choices, value=ui.mem.modality, label="Probe encoder", scale=1, min_width=220,
                              info="face or palm: how your probes are read", elem_id="bm-encoder")
    if unavailable:
        gr.Markdown(unavailable, elem_classes="bm-hint", elem_id="bm-unavailable")
    return status, encoder, load_button, load_message


def build_app(memory: BioMemory | None = None, *, settings: Settings | None = None,
              admin: bool | None = None) -> gr.Blocks:
    """The Gradio app over `memory` (default: built from `settings`, default from the environment)."""
    settings = settings or Settings.from_env()
    ui = Controller(memory if memory is not None else BioMemory.from_settings(settings), settings, admin=admin)
    with gr.Blocks(title=TITLE, analytics_enabled=False, delete_cache=(60, PENDING_SECONDS)) as page:
        status, encoder, load_button, load_message = header(ui)
        listing = Listing(gr.State(None, time_to_live=UNLOCK_SECONDS),
                          gr.Markdown("Locked.", elem_id="bm-unlock-message", render=False),
                          gr.Dataframe(headers=render.NOTE_HEADERS, interactive=False, wrap=True,
                                       column_widths=["9%", "17%", "40%", "16%", "18%"],
                                       max_height=320, elem_id="bm-my-notes", render=False))
        with gr.Tabs(elem_id="bm-tabs"):
            with gr.Tab("Compare", id="compare", elem_id="bm-tab-compare"):
                compare = compare_tab(ui, encoder, load_button, listing)
            with gr.Tab("Chat", id="chat", elem_id="bm-tab-chat"):
                chat_probe = chat_tab(ui, encoder, status, listing)
            with gr.Tab("Enrol", id="enrol", elem_id="bm-tab-enrol"):
                with gr.Row():
                    with gr.Column():
                        enrol_column(ui, encoder, status, listing)
                    with gr.Column():
                        lock_button = notes_column(ui, encoder, status, listing)
                with gr.Accordion("Households: found one, or join one", open=False, elem_id="bm-households"):
                    households_panel(ui, encoder, listing)
                with gr.Accordion("Import LoCoMo conversations (server path)", open=False, visible=ui.admin):
                    import_panel(ui, encoder, status, chat_probe)
                with gr.Accordion("Operator sign-in", open=False, elem_id="bm-operator"):
                    operator_panel(ui)
            with gr.Tab("Calibrate", id="calibrate", elem_id="bm-tab-calibrate"):
                calibrate_tab(ui, encoder, status)
        demo_panel(ui, load_button, load_message, encoder, status, compare)
        locking(ui, listing, lock_button)
        page.load(on(ui, "page:status", ui.status), None, [status], **PRIVATE)
    # Every visitor's events wait in one queue (a probe box's file events share one worker): room for a crowd,
    # bounded so a flood is refused rather than held in memory.
    page.queue(default_concurrency_limit=2, max_size=QUEUE_SIZE)
    page.biomem_app = ui  # the controller, for tests and for main()
    return page
