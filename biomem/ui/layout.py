"""The Gradio page, top to bottom: header, then the Compare, Chat, Enrol and Calibrate tabs.

Each tab builds its components and wires its events to the Controller. Handlers write to a
hidden State (or the API's JSON) and the visible panels are rendered from it on success, so an
error is one toast with the app's title and never an overlay on an input; every probe an
event consumed is cleared whatever happened, and a failure clears the results it made stale.
"""

from __future__ import annotations

import functools
import time
from datetime import datetime
from typing import Any

import gradio as gr

from ..memory import BioMemory
from ..settings import Settings, memory_from_settings
from . import render, uploads
from .controller import UNLOCK_SECONDS, Controller
from .messages import friendly
from .style import GLOSS, INTRO, TITLE

DEFAULT_QUESTION = "What is my bank card PIN?"
PENDING_SECONDS = 600  # an unused probe left in an input is deleted after this (and by Gradio's sweep)
PRIVATE = {"api_visibility": "private"}  # internal events: hidden from the API docs and from clients
RAW = {"preprocess": False}  # probe events get the raw upload: Gradio never decodes (or keeps) a probe
PROBE_PLACEHOLDER = ("Upload a photo, use the webcam, or pick a sample person below.\n"
                     "Each probe is used for one message, then deleted.")
SAMPLE_BUTTONS = ("Ana", "Ben", "Chloe", "Stranger")
LOCKED = (None, "Locked.", [], "")  # the notes listing of nobody: session, message, table, notes message


def cleared(count: int) -> Any:
    """An event function that empties `count` inputs."""
    return lambda: (None,) * count if count > 1 else None


def always(event: Any, fn: Any, outputs: list[Any]) -> None:
    """Run `fn` after `event` whether it succeeded or failed (Gradio's .then skips a failed event)."""
    event.success(fn, None, outputs, **PRIVATE)
    event.failure(fn, None, outputs, **PRIVATE)


def watch(component: gr.Image | gr.File) -> None:
    """Files replaced or abandoned in `component` are deleted (now, or when the session ends)."""
    pending = gr.State([], time_to_live=PENDING_SECONDS, delete_callback=uploads.discard_pending)
    # One worker for all of them: a session's changes run in order, so an older change can never
    # delete the file a newer one holds.
    component.change(uploads.track, [component, pending], [pending], show_progress="hidden", preprocess=False,
                     concurrency_limit=1, concurrency_id="bm-probe-files", **PRIVATE)


def image_input(elem_id: str, label: str, height: int, sources: list[str] | None = None) -> gr.Image:
    image = gr.Image(label=label, sources=sources or ["upload", "webcam"], type="filepath", image_mode=None,
                     format="png", height=height, elem_id=elem_id, webcam_options=gr.WebcamOptions(mirror=False),
                     buttons=["fullscreen"], placeholder=PROBE_PLACEHOLDER if height > 150 else None)
    watch(image)
    return image


def probe_input(ui: Controller, elem_id: str, label: str, encoder: gr.Dropdown, height: int = 220) -> gr.Image:
    """A probe image with one button per sample person (a fresh capture of them)."""
    image = image_input(elem_id, label, height)
    with gr.Row(elem_id=f"{elem_id}-samples", elem_classes="bm-samples"):
        for person in SAMPLE_BUTTONS:
            button = gr.Button(person, size="sm", min_width=0, elem_id=f"{elem_id}-{person.lower()}")
            button.click(friendly(functools.partial(ui.sample_capture, person)), [encoder], [image],
                         show_progress="minimal", **PRIVATE)
    return image


def header(ui: Controller) -> tuple[gr.HTML, gr.Dropdown, gr.Button, gr.Markdown]:
    gr.Markdown(INTRO)
    gr.Markdown(GLOSS, elem_classes="bm-gloss", elem_id="bm-gloss")
    choices, unavailable = ui.encoder_choices()
    with gr.Row(equal_height=True, elem_id="bm-top"):
        status = gr.HTML(ui.status(), elem_id="bm-status", scale=3, min_width=320)
        encoder = gr.Dropdown(choices, value=ui.mem.modality, label="Probe encoder", scale=1, min_width=220,
                              info="face or palm: how your probes are read", elem_id="bm-encoder")
        with gr.Column(scale=1, min_width=200):
            load_button = gr.Button("Load demo", variant="primary", elem_id="bm-load-demo")
            load_message = gr.Markdown(elem_id="bm-load-message")
    if unavailable:
        gr.Markdown(unavailable, elem_classes="bm-hint", elem_id="bm-unavailable")
    return status, encoder, load_button, load_message


def compare_tab(ui: Controller, encoder: gr.Dropdown) -> list[Any]:
    """The one-minute story; returns [probe A, probe B, panel A, panel B, chart] for Load demo."""
    gr.Markdown("One question, two people at the same agent. Each side is gated by its own probe: two "
                "decisions, two sets of memories, two answers.", elem_classes="bm-hint")
    with gr.Row(equal_height=True):
        question = gr.Textbox(DEFAULT_QUESTION, label="Question", scale=4, elem_id="bm-cmp-question")
        button = gr.Button("Compare", variant="primary", scale=1, elem_id="bm-cmp-button")
    with gr.Row():
        with gr.Column():
            probe_a = probe_input(ui, "bm-cmp-probe-a", "Requester A — probe", encoder, height=200)
            panel_a = gr.HTML(render.panel_html(None, True), elem_id="bm-cmp-panel-a")
        with gr.Column():
            probe_b = probe_input(ui, "bm-cmp-probe-b", "Requester B — probe", encoder, height=200)
            panel_b = gr.HTML(render.panel_html(None, True), elem_id="bm-cmp-panel-b")
    chart = gr.HTML("", elem_id="bm-cmp-chart")
    with gr.Accordion("Raw result (JSON, as the compare API returns it)", open=False):
        raw = gr.JSON(elem_id="bm-cmp-json")

    def compare(question: str, probe_a: Any, probe_b: Any, encoder: str | None, request: gr.Request) -> dict[str, Any]:
        """One question asked as two requesters: both gate decisions, retrieved notes and answers."""
        return ui.compare(question, probe_a, probe_b, encoder, request)

    def shown(result: dict[str, Any] | None) -> tuple[str, str, str]:
        result = result or {}
        return (render.panel_html(result.get("a"), True), render.panel_html(result.get("b"), True),
                render.compare_chart(result))

    event = button.click(friendly(compare), [question, probe_a, probe_b, encoder], [raw], api_name="compare",
                         show_progress_on=[panel_a, panel_b], **RAW)
    event.success(shown, [raw], [panel_a, panel_b, chart], **PRIVATE)
    event.failure(lambda: shown(None), None, [panel_a, panel_b, chart], **PRIVATE)
    always(event, cleared(2), [probe_a, probe_b])
    return [probe_a, probe_b, panel_a, panel_b, chart]


def chat_tab(ui: Controller, encoder: gr.Dropdown, status: gr.HTML) -> gr.Image:
    with gr.Row():
        with gr.Column(scale=3):
            chatbot = gr.Chatbot(label="Shared agent", height=380, elem_id="bm-chatbot",
                                 placeholder="Ask something with a probe: the gate picks whose memories the "
                                             "agent may use. Each message says who asked.")
            with gr.Row(equal_height=True):
                question = gr.Textbox(placeholder="Ask, or type something to remember…", show_label=False,
                                      scale=4, elem_id="bm-question")
                ask_button = gr.Button("Ask", variant="primary", scale=1, min_width=80, elem_id="bm-ask")
                remember_button = gr.Button("Remember", scale=1, min_width=80, elem_id="bm-remember")
            probe = probe_input(ui, "bm-chat-probe", "Who is asking? Probe for this message", encoder)
        with gr.Column(scale=2):
            panel = gr.HTML(render.panel_html(None), elem_id="bm-chat-panel")
    with gr.Accordion("What the LLM saw: the exact prompt", open=False):
        prompt = gr.Textbox(lines=8, show_label=False, interactive=False, elem_id="bm-prompt")
    with gr.Accordion("Raw result (JSON, as the ask / remember API returns it)", open=False):
        raw = gr.JSON(elem_id="bm-chat-json")

    def ask(question: str, probe: Any, encoder: str | None, request: gr.Request) -> dict[str, Any]:
        """Ask the shared agent as whoever `probe` shows; the gate decides which memories it may read."""
        return ui.ask(question, probe, encoder, request)

    def remember(text: str, probe: Any, encoder: str | None, request: gr.Request) -> dict[str, Any]:
        """Store `text` for whoever `probe` shows (refused for a stranger)."""
        return ui.remember(text, probe, encoder, request)

    def shown(result: dict[str, Any], history: list[dict[str, Any]] | None) -> tuple[Any, ...]:
        history = [*(history or []), *render.chat_messages(result)]
        if result["kind"] == "remember":
            return history, render.panel_html(None), "", ""
        return history, render.panel_html(result), result["prompt"], ""

    for event in (gr.on([ask_button.click, question.submit], friendly(ask), [question, probe, encoder], [raw],
                        api_name="ask", show_progress_on=[panel], **RAW),
                  remember_button.click(friendly(remember), [question, probe, encoder], [raw],
                                        api_name="remember", show_progress_on=[panel], **RAW)):
        event.success(shown, [raw, chatbot], [chatbot, panel, prompt, question], **PRIVATE)
        event.failure(lambda: (render.panel_html(None), ""), None, [panel, prompt], **PRIVATE)
        always(event, cleared(1), [probe])
        event.success(ui.status, None, [status], **PRIVATE)
    return probe


def enrol_column(ui: Controller, encoder: gr.Dropdown, status: gr.HTML) -> None:
    gr.Markdown("### New identity\nOne or more face photos or palm images of one person (the probe encoder "
                "at the top decides which). The images are deleted once encoded; only the templates are kept.")
    label = gr.Textbox(label="Name", elem_id="bm-enrol-name")
    files = gr.File(label="Images", file_count="multiple", file_types=["image"], type="filepath",
                    elem_id="bm-enrol-files")
    watch(files)
    capture = image_input("bm-enrol-capture", "…and/or a capture", 200, ["webcam", "upload"])
    button = gr.Button("Enrol", variant="primary", elem_id="bm-enrol")
    message = gr.Markdown(elem_id="bm-enrol-message")
    result = gr.State(None)

    def enrol(label: str, files: list[Any] | None, capture: Any, encoder: str | None, request: gr.Request,
              progress: gr.Progress = gr.Progress()) -> str:  # noqa: B008 - Gradio's idiom
        return ui.enroll(label, files, capture, encoder, progress, request)

    event = button.click(friendly(enrol), [label, files, capture, encoder], [result],
                         show_progress_on=[message], **PRIVATE, **RAW)
    event.success(lambda text: (text, ""), [result], [message, label], **PRIVATE)
    event.failure(lambda: "", None, [message], **PRIVATE)
    always(event, cleared(2), [files, capture])
    event.success(ui.status, None, [status], **PRIVATE)

    gr.Markdown("### Remember something\nStored for whoever the probe matches; refused for a stranger.")
    text = gr.Textbox(label="Memory", elem_id="bm-memo")
    probe = probe_input(ui, "bm-memo-probe", "Probe", encoder, height=180)
    memo_button = gr.Button("Remember", elem_id="bm-memo-button")
    memo_message = gr.Markdown(elem_id="bm-memo-message")
    stored = gr.State(None)

    def memo(text: str, probe: Any, encoder: str | None, request: gr.Request) -> dict[str, Any]:
        return ui.remember(text, probe, encoder, request)

    def shown(result: dict[str, Any]) -> tuple[str, str]:
        return (f"✎ Stored as note {result['note']['id']} for **{render.esc(result['owner'])}**: "
                f"“{render.esc(result['note']['content'])}”.", "")

    event = memo_button.click(friendly(memo), [text, probe, encoder], [stored], show_progress_on=[memo_message],
                              **PRIVATE, **RAW)
    event.success(shown, [stored], [memo_message, text], **PRIVATE)
    event.failure(lambda: "", None, [memo_message], **PRIVATE)
    always(event, cleared(1), [probe])
    event.success(ui.status, None, [status], **PRIVATE)


def notes_column(ui: Controller, encoder: gr.Dropdown, status: gr.HTML) -> None:
    gr.Markdown(f"### My notes\nShow a clear probe to see your own notes for {UNLOCK_SECONDS // 60} minutes in "
                "this tab. Deleting a note or forgetting yourself asks for a fresh probe each time.")
    unlocked = gr.State(None, time_to_live=UNLOCK_SECONDS)
    timer = gr.Timer(15)  # hides an unlocked listing once its time is up
    probe = probe_input(ui, "bm-unlock-probe", "Probe", encoder, height=180)
    second = image_input("bm-unlock-second", "Second probe, if you enrolled a face and a palm (the other kind)", 120)
    with gr.Row():
        unlock_button = gr.Button("Unlock my notes", variant="primary", elem_id="bm-unlock")
        lock_button = gr.Button("Lock", elem_id="bm-lock")
    message = gr.Markdown("Locked.", elem_id="bm-unlock-message")
    table = gr.Dataframe(headers=["id", "time", "memory", "tags"], interactive=False, wrap=True, max_height=320,
                         elem_id="bm-my-notes")
    listing = [unlocked, message, table, changes_panel(ui, encoder, status, [unlocked, message, table])]
    result = gr.State(None)

    def unlock(probe: Any, second: Any, encoder: str | None, request: gr.Request) -> dict[str, Any]:
        return ui.unlock(probe, encoder, second, request)

    def show_unlocked(session: dict[str, Any]) -> tuple[Any, ...]:
        return ({"identity": session["identity"], "until": session["until"]},
                f"Showing the notes of **{render.esc(session['label'])}** ({len(session['rows'])}) until "
                f"{datetime.fromtimestamp(session['until']):%H:%M:%S}.", session["rows"], "")

    def lock_when_due(session: dict[str, Any] | None) -> tuple[Any, ...]:
        return LOCKED if session and session["until"] < time.time() else (gr.skip(),) * 4

    event = unlock_button.click(friendly(unlock), [probe, second, encoder], [result], show_progress_on=[message],
                                **PRIVATE, **RAW)
    event.success(show_unlocked, [result], listing, **PRIVATE)
    event.failure(lambda: LOCKED, None, listing, **PRIVATE)
    always(event, cleared(2), [probe, second])
    lock_button.click(lambda: LOCKED, None, listing, **PRIVATE)
    timer.tick(lock_when_due, [unlocked], listing, show_progress="hidden", **PRIVATE)


def changes_panel(ui: Controller, encoder: gr.Dropdown, status: gr.HTML, view: list[Any]) -> gr.Markdown:
    """Delete a note or forget oneself, each proven by a fresh probe (never by the unlock); `view` is
    [unlocked session, its message, the notes table]. Returns the panel's message."""
    fresh = probe_input(ui, "bm-confirm-probe", "Fresh probe to delete or forget", encoder, height=160)
    fresh_second = image_input("bm-confirm-second", "Second fresh probe, if you enrolled a face and a palm", 120)
    with gr.Row(equal_height=True):
        note_id = gr.Number(None, label="Note id", precision=0, minimum=1, scale=1, elem_id="bm-note-id")
        delete_button = gr.Button("Delete note", variant="secondary", scale=1, elem_id="bm-delete")
    with gr.Accordion("Forget me", open=False):
        gr.Markdown("Erases whoever the fresh probe shows: every note, link, history entry, template and index "
                    "entry. There is no undo.")
        confirm = gr.Checkbox(label="I understand: erase everything of mine", elem_id="bm-forget-ok")
        forget_button = gr.Button("Forget me", variant="stop", elem_id="bm-forget")
    notes_message = gr.Markdown(elem_id="bm-notes-message")
    result, table = gr.State(None), view[2]

    def delete(note: Any, probe: Any, second: Any, encoder: str | None, request: gr.Request) -> tuple[str, list]:
        return ui.delete_note(note, probe, encoder, second, request)

    event = delete_button.click(friendly(delete), [note_id, fresh, fresh_second, encoder], [result],
                                show_progress_on=[notes_message], **PRIVATE, **RAW)
    event.success(lambda done: (done[0], done[1], None), [result], [notes_message, table, note_id], **PRIVATE)
    always(event, cleared(2), [fresh, fresh_second])
    event.success(ui.status, None, [status], **PRIVATE)

    def forget(confirmed: bool, probe: Any, second: Any, encoder: str | None, request: gr.Request) -> str:
        return ui.forget(confirmed, probe, encoder, second, request)

    event = forget_button.click(friendly(forget), [confirm, fresh, fresh_second, encoder], [result],
                                show_progress_on=[notes_message], **PRIVATE, **RAW)
    event.success(lambda done: (*LOCKED[:3], done, False), [result], [*view, notes_message, confirm], **PRIVATE)
    always(event, cleared(2), [fresh, fresh_second])
    event.success(ui.status, None, [status], **PRIVATE)
    return notes_message


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

    def run(path: str, count: float, progress: gr.Progress = gr.Progress()) -> str:  # noqa: B008
        return ui.import_locomo(path, int(count), progress)

    button.click(friendly(run), [path, count], [message], **PRIVATE).success(ui.status, None, [status], **PRIVATE)
    sample_button.click(friendly(ui.sample_capture), [person, encoder], [chat_probe], **PRIVATE)


def calibrate_tab(ui: Controller, encoder: gr.Dropdown, status: gr.HTML) -> None:
    gr.Markdown("How alike are two captures of one person (genuine) and captures of two people (impostor)? The "
                "gate admits similarity ≥ τ; the paper takes τ where the two densities cross, the security choice "
                "is τ at a target false-match rate. The encoder is the **probe encoder** chosen at the top.")
    registry = gr.Dataframe(ui.encoder_table(), headers=["encoder", "kind", "dim", "default τ", "τ in this store",
                            "loads here", "weights", "licence"], interactive=False, label="Encoder registry",
                            elem_id="bm-registry")
    report = gr.State(None)
    with gr.Row(equal_height=True):
        source = gr.Radio([("Sample people (shipped faces / synthetic palms)", "samples"),
                           ("A folder on the server: DIR/<person>/<images>", "folder")], value="samples",
                          label="Scores from", scale=3, interactive=ui.admin)
        folder = gr.Textbox(label="Folder", scale=2, visible=ui.admin)
        button = gr.Button("Compute histograms and DET", variant="primary", scale=1, elem_id="bm-calibrate")
    plot = gr.Image(label="Genuine vs impostor scores and DET curve, with τ", type="numpy", format="png",
                    interactive=False, elem_id="bm-cal-plot")
    table = gr.Markdown(elem_id="bm-cal-table")
    with gr.Row(visible=ui.admin):
        store_intersection = gr.Button("Store τ (intersection, the paper's)")
        store_fmr = gr.Button("Store τ (at FMR ≤ 1e-3)")
    message = gr.Markdown()

    def calibrate(encoder: str | None, source: str, folder: str,
                  progress: gr.Progress = gr.Progress()) -> tuple[Any, ...]:  # noqa: B008
        done = ui.calibrate(encoder, source, folder, progress)
        return (done, *ui.calibration_view(done))

    button.click(friendly(calibrate), [encoder, source, folder], [report, plot, table], **PRIVATE)
    for store, which in ((store_intersection, "intersection"), (store_fmr, "fmr")):
        event = store.click(friendly(functools.partial(store_tau, ui, which=which)), [report], [message], **PRIVATE)
        event.success(ui.encoder_table, None, [registry], **PRIVATE).then(ui.status, None, [status], **PRIVATE)


def store_tau(ui: Controller, report: Any, *, which: str) -> str:
    return ui.store_tau(report, which)


def build_app(memory: BioMemory | None = None, *, settings: Settings | None = None,
              admin: bool | None = None) -> gr.Blocks:
    """The Gradio app over `memory` (default: built from `settings`, default from the environment)."""
    settings = settings or Settings.from_env()
    ui = Controller(memory if memory is not None else memory_from_settings(settings), settings, admin=admin)
    with gr.Blocks(title=TITLE, analytics_enabled=False, delete_cache=(60, PENDING_SECONDS)) as page:
        status, encoder, load_button, load_message = header(ui)
        with gr.Tabs(elem_id="bm-tabs"):
            with gr.Tab("Compare", id="compare", elem_id="bm-tab-compare"):
                compare = compare_tab(ui, encoder)
            with gr.Tab("Chat", id="chat", elem_id="bm-tab-chat"):
                chat_probe = chat_tab(ui, encoder, status)
            with gr.Tab("Enrol", id="enrol", elem_id="bm-tab-enrol"):
                with gr.Row():
                    with gr.Column():
                        enrol_column(ui, encoder, status)
                    with gr.Column():
                        notes_column(ui, encoder, status)
                with gr.Accordion("Import LoCoMo conversations (server path)", open=False, visible=ui.admin):
                    import_panel(ui, encoder, status, chat_probe)
            with gr.Tab("Calibrate", id="calibrate", elem_id="bm-tab-calibrate"):
                calibrate_tab(ui, encoder, status)

        def load_demo(progress: gr.Progress = gr.Progress()) -> str:  # noqa: B008
            return ui.load_demo(progress)

        def prefill(encoder: str | None) -> tuple[Any, ...]:
            """Compare works out of the box: A is Ana, B a stranger (fresh captures), no stale results."""
            empty = render.panel_html(None, True)
            return ui.sample_capture("Ana", encoder), ui.sample_capture("Stranger", encoder), empty, empty, ""

        loaded = load_button.click(friendly(load_demo), None, [load_message], **PRIVATE)
        loaded.success(ui.status, None, [status], **PRIVATE)
        loaded.success(friendly(prefill), [encoder], compare, **PRIVATE)
        page.load(ui.status, None, [status], **PRIVATE)
    page.queue(default_concurrency_limit=2, max_size=64)
    page.biomem_app = ui  # the controller, for tests and for main()
    return page
