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

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import gradio as gr

from ..engine.memory import BioMemory
from ..identity.enrolment import MAX_LABEL_CHARS
from ..settings import Settings
from . import bursts, render, uploads
from .controller import OWN, UNLOCK_SECONDS, Controller
from .doors import door
from .messages import friendly
from .style import GLOSS, HEADING, INTRO, TITLE
from .turns import CLICK_ORDER

DEFAULT_QUESTION = "What is my bank card PIN?"
# Compare's demo questions (button id, question): one person's own note, then the demo household's notes.
DEMO_QUESTIONS = (("pin", DEFAULT_QUESTION), ("wifi", "What is the Wi-Fi password?"),
                  ("party", "When is the surprise party?"))
OWN_ONLY = [("My own notes", OWN)]  # the Remember's "where" until "My households" offers a requester's own
QUEUE_SIZE = 1024  # events waiting at once, all visitors together
LOCK_CHECK_SECONDS = 5  # how often a tab checks whether its unlocked time is up
PENDING_SECONDS = 600  # an unused probe left in an input is deleted after this (and by Gradio's sweep)
PRIVATE = {"api_visibility": "private"}  # internal events: hidden from the API docs and from clients
RAW = {"preprocess": False}  # probe events get the raw upload: Gradio never decodes (or keeps) a probe
PROBE_PLACEHOLDER = "Upload, use the webcam, or pick a sample person below.\nUsed for one message, then deleted."
SECOND_PLACEHOLDER = "Only if you enrolled a face and a palm:\nthe other kind (a palm beside a face)."
SAMPLE_BUTTONS = ("Ana", "Ben", "Chloe", "Stranger")
QUICK = {"show_progress": "hidden", "concurrency_limit": None, **PRIVATE}  # an action's first and last events


@dataclass(frozen=True)
class Control:
    """A button an action holds while it runs: disabled, with `busy` as its label if given."""

    button: gr.Button
    label: str
    busy: str | None = None


@dataclass(frozen=True)
class BurstBox:
    """A probe box's webcam burst (biomem.ui.bursts): its streaming camera, this tab's frames (kept on the
    server) and the line that says how many frames it holds. An action that takes the box's probe takes
    its burst first, and its last event says what became of it."""

    camera: gr.Image
    frames: gr.State
    status: gr.Markdown


@dataclass(frozen=True)
class Listing:
    """The "My notes" listing: the unlocked session (kept on the server), its line and its table. Made
    before the tabs, so a Remember in any tab can refresh it in its last event. `private` lists what else
    shows a person's memories or households, with its empty value: Lock (and the end of the unlocked
    time) empties all of it, for whoever steps up to the device next."""

    unlocked: gr.State
    message: gr.Markdown
    table: gr.Dataframe
    private: list[tuple[Any, Any]] = field(default_factory=list)

    @property
    def outputs(self) -> list[Any]:
        return [self.unlocked, self.message, self.table]


LOCKED = (None, "Locked.", [])  # the listing of nobody: session, message, table


def on(ui: Controller, name: str, fn: Callable) -> Callable:
    """`fn` as the page event `name` of biomem.engine.access, with engine errors as readable toasts."""
    return friendly(door(ui.operators, name, fn))


def action(ui: Controller, triggers: Sequence[Any], group: str, controls: Sequence[Control], work: Callable,
           inputs: list[Any], result: Any, finish: Callable, finish_inputs: list[Any], finish_outputs: list[Any],
           *, name: str, burst: BurstBox | None = None, **work_options: Any) -> None:
    """Wire one visitor action: it takes its turn in `group` (biomem.ui.turns: another action of the group
    under way in this tab is shown first, then this one runs), `controls` go busy and `result` is emptied,
    `work` writes `result` (or raises: a toast), and then `finish` renders `finish_outputs` from
    `finish_inputs` (`result` None: the work failed) in the same last event that gives the controls back
    (or leaves them to the action waiting next), says what became of the `burst` the work took (its frames
    are among `inputs`) and empties `result` again: nothing the work returned stays in the session. The turn
    ends once the page has shown all that. `name` is the work's door in biomem.engine.access."""
    buttons = [c.button for c in controls]
    held = [burst.frames] if burst else []
    # The last event reads the work's result on the server: a visible result (the API's JSON) is written to a
    # State beside it, since the browser may start that event before it has taken the JSON in.
    carried = result if isinstance(result, gr.State) else gr.State(None)
    written = [carried] if carried is result else [result, carried]
    inputs_of_end = [carried if component is result else component for component in finish_inputs]

    def begin(click: Any, request: gr.Request) -> tuple[Any, ...]:
        ui.take_turn(request, group, name, click)
        return (None, *(gr.update(interactive=False, value=c.busy or c.label) for c in controls))

    def end(request: gr.Request, *values: Any) -> tuple[Any, ...]:
        next_waits = ui.turn_landed(request, group)
        shown = finish(*values[:len(values) - len(held)])
        said = [frames.status() for frames in values[len(values) - len(held):]]
        given = (gr.skip() if next_waits else gr.update(interactive=True, value=c.label) for c in controls)
        return (*shown, *said, None, *given)

    def shown(request: gr.Request) -> None:
        ui.give_back_turn(request, group)

    click = gr.Number(visible=False)  # the click's number in its tab, set in the browser (turns.CLICK_ORDER)
    started = gr.on(list(triggers), on(ui, "page:view", begin), [click], [result, *buttons], js=CLICK_ORDER,
                    **QUICK)
    public = "api_name" in work_options  # ask, remember and compare: the public API
    door = on(ui, name, work)
    worked = started.success(door if carried is result else twice(door), inputs, written,
                             **({} if public else PRIVATE), **work_options)
    for landed in (worked.success, worked.failure):
        ended = landed(on(ui, "page:view", end), [*inputs_of_end, *held],
                       [*finish_outputs, *([burst.status] if burst else []), carried, *buttons], **QUICK)
        ended.then(on(ui, "page:view", shown), None, None, **QUICK)


def twice(fn: Callable) -> Callable:
    """`fn` whose value is returned twice: for a visible output and for the State beside it."""
    @functools.wraps(fn)
    def both(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        value = fn(*args, **kwargs)
        return value, value
    return both


def watch(ui: Controller, component: gr.Image | gr.File) -> None:
    """Files replaced or abandoned in `component` are deleted (now, or when the session ends)."""
    pending = gr.State([], time_to_live=PENDING_SECONDS, delete_callback=uploads.discard_pending)
    # One worker for all of them: a session's changes run in order, so an older change can never
    # delete the file a newer one holds.
    component.change(on(ui, "page:view", uploads.track), [component, pending], [pending], show_progress="hidden",
                     preprocess=False, concurrency_limit=1, concurrency_id="bm-probe-files", **PRIVATE)


def image_input(ui: Controller, elem_id: str, label: str, height: int, sources: list[str] | None = None,
                placeholder: str | None = PROBE_PLACEHOLDER) -> gr.Image:
    image = gr.Image(label=label, sources=sources or ["upload", "webcam"], type="filepath", image_mode=None,
                     format="png", height=height, elem_id=elem_id, elem_classes="bm-probe",
                     webcam_options=gr.WebcamOptions(mirror=False), buttons=["fullscreen"], placeholder=placeholder)
    watch(ui, image)
    return image


def samples_row(ui: Controller, elem_id: str, capture: Callable[[str, str | None], Any], encoder: gr.Dropdown,
                image: gr.Image) -> None:
    """One button per sample person, putting a fresh capture of them in `image`."""
    with gr.Row(elem_id=f"{elem_id}-samples", elem_classes="bm-samples"):
        for person in SAMPLE_BUTTONS:
            button = gr.Button(person, size="sm", min_width=0, elem_id=f"{elem_id}-{person.lower()}")
            button.click(on(ui, "page:sample", functools.partial(capture, person)), [encoder], [image],
                         show_progress="minimal", **PRIVATE)


def probe_input(ui: Controller, elem_id: str, label: str, encoder: gr.Dropdown, height: int = 220) -> gr.Image:
    """A probe image with one button per sample person (a fresh capture of them)."""
    image = image_input(ui, elem_id, label, height)
    samples_row(ui, elem_id, ui.sample_capture, encoder, image)
    return image


def burst_input(ui: Controller, elem_id: str, image: gr.Image) -> BurstBox:
    """The webcam burst of the probe box `image`: a live camera, "Take 3 frames" (which empties `image`:
    the burst is the probe now) and "Clear"; an image put in `image` afterwards replaces the burst (see
    biomem.ui.bursts: the latest probe wins, whatever order the events run in)."""
    frames = gr.State(bursts.Frames(), time_to_live=bursts.BURST_SECONDS, delete_callback=bursts.forget)
    with gr.Accordion(f"Webcam burst: hold still while the page takes {bursts.BURST_FRAMES} frames", open=False,
                      elem_id=f"{elem_id}-burst", elem_classes="bm-burst"):
        camera = gr.Image(label="Live camera", sources=["webcam"], streaming=True, type="filepath", height=200,
                          elem_id=f"{elem_id}-camera", elem_classes="bm-probe", buttons=[],
                          webcam_options=gr.WebcamOptions(mirror=False))
        with gr.Row(equal_height=True):
            take = gr.Button(f"Take {bursts.BURST_FRAMES} frames", size="sm", elem_id=f"{elem_id}-take")
            drop = gr.Button("Clear", size="sm", elem_id=f"{elem_id}-drop")
        status = gr.Markdown(bursts.NO_BURST, elem_id=f"{elem_id}-frames", elem_classes="bm-hint")

    def streamed(frame: Any, held: bursts.Frames) -> tuple[Any, None]:
        """One frame of the live camera: kept if a burst is being taken, else dropped; the camera's value is
        written back empty, so the session's copy of it holds no frame. Anything but a camera frame ends the
        stream at once (unseen), instead of leaving it waiting for the next."""
        image = bursts.frame_bytes(frame)
        if image is None:
            raise gr.Error("Not a camera frame.", visible=False, print_exception=False)
        count = held.add(image)
        return (gr.skip() if count is None else held.status()), None

    def armed(held: bursts.Frames, showing: Any) -> tuple[Any, ...]:
        held.arm(emptied=uploads.upload_path(showing))
        return held, held.status(), None  # (written back: the state's time to live counts from now)

    def cleared(held: bursts.Frames) -> str:
        held.clear()
        return held.status()

    def replaced(value: Any, held: bursts.Frames) -> Any:
        """An image arrived in the box (or it was emptied: by a message, or by taking a burst)."""
        return held.status() if held.replaced_by(uploads.upload_path(value)) else gr.skip()

    camera.stream(on(ui, "page:view", streamed), [camera, frames], [status, camera], preprocess=False,
                  stream_every=bursts.STREAM_EVERY, **QUICK)
    take.click(on(ui, "page:view", armed), [frames, image], [frames, status, image], preprocess=False, **QUICK)
    drop.click(on(ui, "page:view", cleared), [frames], [status], **QUICK)
    image.change(on(ui, "page:view", replaced), [image, frames], [status], preprocess=False, **QUICK)
    return BurstBox(camera, frames, status)


def second_input(ui: Controller, elem_id: str, label: str, encoder: gr.Dropdown) -> gr.Image:
    """The second probe of a step-up (the other kind: a palm beside a face), with sample buttons that
    give a sample person's capture of that kind, so a demo person (face and palm) can prove themselves."""
    image = image_input(ui, elem_id, label, 180, placeholder=SECOND_PLACEHOLDER)
    samples_row(ui, elem_id, ui.second_sample, encoder, image)
    return image


def header(ui: Controller) -> tuple[gr.HTML, gr.Dropdown, gr.Button, gr.Markdown]:
    gr.Markdown(HEADING, elem_id="bm-heading")
    with gr.Row(elem_id="bm-hero"):
        with gr.Column(scale=3, min_width=300):
            gr.Markdown(INTRO)
            gr.Markdown(GLOSS, elem_classes="bm-gloss", elem_id="bm-gloss")
        with gr.Column(scale=1, min_width=220, elem_id="bm-start"):  # first on a phone (style.CSS)
            load_button = gr.Button("Load demo", variant="primary", elem_id="bm-load-demo")
            load_message = gr.Markdown(elem_id="bm-load-message")
    choices, unavailable = ui.encoder_choices()
    with gr.Row(equal_height=True, elem_id="bm-top"):
        status = gr.HTML(ui.status(), elem_id="bm-status", scale=3, min_width=320)
        encoder = gr.Dropdown(choices, value=ui.mem.modality, label="Probe encoder", scale=1, min_width=220,
                              info="face or palm: how your probes are read", elem_id="bm-encoder")
    if unavailable:
        gr.Markdown(unavailable, elem_classes="bm-hint", elem_id="bm-unavailable")
    return status, encoder, load_button, load_message


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
            panel_a = gr.HTML(render.panel_html(None, True), elem_id="bm-cmp-panel-a")
        with gr.Column():
            probe_b = probe_input(ui, "bm-cmp-probe-b", "Requester B — probe", encoder, height=200)
            panel_b = gr.HTML(render.panel_html(None, True), elem_id="bm-cmp-panel-b")
    chart = gr.HTML("", elem_id="bm-cmp-chart")
    with gr.Accordion("Raw result (JSON, as the compare API returns it)", open=False):
        raw = gr.JSON(elem_id="bm-cmp-json")

    empty = render.panel_html(None, True)
    listing.private.extend([(panel_a, empty), (panel_b, empty), (chart, ""), (raw, None)])

    def compare(question: str, probe_a: Any, probe_b: Any, encoder: str | None, request: gr.Request) -> dict[str, Any]:
        """One question asked as two requesters: both gate decisions, retrieved notes and answers."""
        return ui.compare(question, probe_a, probe_b, encoder, request)

    def shown(result: dict[str, Any] | None, encoder: str | None) -> tuple[Any, ...]:
        result = result or {}
        return (render.panel_html(result.get("a"), True), render.panel_html(result.get("b"), True),
                render.compare_chart(result), *(ui.resample(result.get(side), encoder) for side in "ab"))

    # Load demo fills these probes: it may not run while a compare does, nor a compare while it loads.
    controls = [Control(button, "Compare"), Control(load_button, "Load demo")]
    action(ui, [button.click, question.submit], "compare", controls, compare, [question, probe_a, probe_b, encoder],
           raw, shown, [raw, encoder], [panel_a, panel_b, chart, probe_a, probe_b], name="page:compare",
           api_name="compare",
           show_progress_on=[panel_a, panel_b], **RAW)
    return {"button": button, "probes": [probe_a, probe_b], "shown": [panel_a, panel_b, chart]}


def same(value: Any) -> Any:
    """`value` itself: a button that puts a fixed value in an input."""
    return value


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
        with gr.Column(scale=2):
            panel = gr.HTML(render.panel_html(None), elem_id="bm-chat-panel")
    with gr.Accordion("What the LLM saw: the exact prompt", open=False):
        prompt = gr.Textbox(lines=8, show_label=False, interactive=False, elem_id="bm-prompt")
    with gr.Accordion("Raw result (JSON, as the ask / remember API returns it)", open=False):
        raw = gr.JSON(elem_id="bm-chat-json")

    def ask(question: str, probe: Any, frames: bursts.Frames | None, encoder: str | None,
            request: gr.Request) -> dict[str, Any]:
        """Ask the shared agent as whoever `probe` shows; the gate decides which memories it may read."""
        return ui.ask(question, bursts.chosen(probe, frames), encoder, request)

    def remember(text: str, probe: Any, frames: bursts.Frames | None, encoder: str | None,
                 request: gr.Request) -> dict[str, Any]:
        """Store `text` for whoever `probe` shows (refused for a stranger)."""
        return ui.remember(text, bursts.chosen(probe, frames), encoder, request)

    def shown(result: dict[str, Any] | None, history: list[dict[str, Any]] | None,
              unlocked: dict[str, Any] | None) -> tuple[Any, ...]:
        if result is None:
            return gr.skip(), render.panel_html(None), "", gr.skip(), None, gr.skip(), *(gr.skip(),) * 3
        history = [*(history or []), *render.chat_messages(result)]
        if result["kind"] == "remember":
            return (history, render.panel_html(None), "", "", None, ui.status(), *listing_now(ui, unlocked))
        return history, render.panel_html(result), result["prompt"], "", None, ui.status(), *(gr.skip(),) * 3

    listing.private.extend([(chatbot, []), (panel, render.panel_html(None)), (prompt, ""), (raw, None)])
    controls = [Control(ask_button, "Ask"), Control(remember_button, "Remember")]
    outputs = [chatbot, panel, prompt, question, probe, status, *listing.outputs]
    for triggers, work, name in (([ask_button.click, question.submit], ask, "ask"),
                                 ([remember_button.click], remember, "remember")):
        action(ui, triggers, "chat", controls, work, [question, probe, burst.frames, encoder], raw, shown,
               [raw, chatbot, listing.unlocked], outputs, name=f"page:{name}", burst=burst, api_name=name,
               show_progress_on=[panel], **RAW)
    return probe


def listing_now(ui: Controller, unlocked: dict[str, Any] | None) -> tuple[Any, ...]:
    """[session, message, table] of "My notes" as the notes are now: untouched when nothing is unlocked,
    locked when the unlocked person's session has ended."""
    if not unlocked:
        return (gr.skip(),) * 3
    rows = ui.my_notes(unlocked)
    return LOCKED if rows is None else listing_of(unlocked, rows)


def listing_of(unlocked: dict[str, Any], rows: list[list[Any]]) -> tuple[Any, ...]:
    """[session, message, table] of "My notes" showing `rows` of the unlocked person."""
    message = (f"Showing the notes of **{render.esc(unlocked['label'])}** ({len(rows)}). This page locks them "
               f"at {datetime.fromtimestamp(unlocked['until']):%H:%M:%S} ({UNLOCK_SECONDS // 60} minutes after "
               "unlocking), or when you press **Lock**.")
    return unlocked, message, rows


def enrol_column(ui: Controller, encoder: gr.Dropdown, status: gr.HTML, listing: Listing) -> None:
    gr.Markdown("### New identity\nOne or more face photos or palm images of one person (the probe encoder "
                "at the top decides which). The images are deleted once encoded; only the templates are kept.")
    label = gr.Textbox(label="Name", max_length=MAX_LABEL_CHARS, elem_id="bm-enrol-name")
    files = gr.File(label="Images", file_count="multiple", file_types=["image"], type="filepath",
                    elem_id="bm-enrol-files")
    watch(ui, files)
    capture = image_input(ui, "bm-enrol-capture", "…and/or a capture", 220, ["webcam", "upload"], placeholder=None)
    second = gr.File(label="Images of another kind (a palm beside a face), optional: how an operator enrols a "
                     "look-alike relative, whom the face alone cannot tell apart from someone enrolled",
                     file_count="multiple", file_types=["image"], type="filepath", elem_id="bm-enrol-second")
    watch(ui, second)
    button = gr.Button("Enrol", variant="primary", elem_id="bm-enrol")
    message = gr.Markdown(elem_id="bm-enrol-message")
    result = gr.State(None)

    def enrol(label: str, files: list[Any] | None, capture: Any, second: list[Any] | None, encoder: str | None,
              request: gr.Request, progress: gr.Progress = gr.Progress()) -> str:  # noqa: B008 - Gradio's idiom
        return ui.enroll(label, files, capture, encoder, progress, request, second)

    def enrolled(text: str | None) -> tuple[Any, ...]:
        return (text, "", None, None, None, ui.status()) if text else ("", gr.skip(), None, None, None, gr.skip())

    action(ui, [button.click], "enrol", [Control(button, "Enrol")], enrol, [label, files, capture, second, encoder],
           result, enrolled, [result], [message, label, files, capture, second, status], name="page:enrol",
           show_progress_on=[message], **RAW)

    remember_panel(ui, encoder, status, listing)


def remember_panel(ui: Controller, encoder: gr.Dropdown, status: gr.HTML, listing: Listing) -> None:
    """Remember for whoever the probe shows: into their own notes, or (after "My households" has gated them
    and offered their own households) into one of their households, hidden from some of its members."""
    gr.Markdown("### Remember something\nStored for whoever the probe matches; refused for a stranger. To share "
                "it with a household of yours: show your probe and press **My households**, choose where (and "
                "whom to hide it from), then show your probe again and press **Remember**.")
    text = gr.Textbox(label="Memory", elem_id="bm-memo")
    probe = probe_input(ui, "bm-memo-probe", "Probe", encoder, height=200)
    burst = burst_input(ui, "bm-memo-probe", probe)
    with gr.Row(equal_height=True):
        where = gr.Dropdown(OWN_ONLY, value=OWN, label="Where", scale=2, min_width=160, elem_id="bm-memo-where")
        hidden = gr.CheckboxGroup([], label="Hide it from", info="members of the chosen household", scale=3,
                                  elem_id="bm-memo-hidden")
    with gr.Row():
        memo_button = gr.Button("Remember", elem_id="bm-memo-button")
        homes_button = gr.Button("My households", elem_id="bm-memo-households")
    memo_message = gr.Markdown(elem_id="bm-memo-message")
    stored, found = gr.State(None), gr.State(None)
    homes = gr.State(None)  # whom "My households" admitted, and their households: the choices (server-side)
    listing.private.extend([(memo_message, ""), *zip((where, hidden, homes), choices(None))])
    controls = [Control(memo_button, "Remember"), Control(homes_button, "My households")]

    def memo(text: str, probe: Any, frames: bursts.Frames | None, where: Any, hidden: Any, encoder: str | None,
             request: gr.Request) -> dict[str, Any]:
        return ui.remember(text, bursts.chosen(probe, frames), encoder, request, where, hidden)

    def shown(result: dict[str, Any] | None, unlocked: dict[str, Any] | None) -> tuple[Any, ...]:
        if result is None:  # the choices stay: they are still the requester's, and the engine checks again
            return "", gr.skip(), None, gr.skip(), *(gr.skip(),) * 3, *(gr.skip(),) * 3
        note = result["note"]
        if result.get("household"):
            away = (f", hidden from {', '.join(f'**{render.esc(n)}**' for n in result['hidden_from'])}"
                    if result["hidden_from"] else "")
            stored = (f"✎ Stored as note {note['id']} in the household **{render.esc(result['household'])}** "
                      f"by **{render.esc(result['author'])}**{away}: “{render.esc(note['content'])}”.")
        else:
            stored = (f"✎ Stored as note {note['id']} for **{render.esc(result['owner'])}**: "
                      f"“{render.esc(note['content'])}”.")
        return (stored, "", None, ui.status(), *listing_now(ui, unlocked), *choices(None))

    action(ui, [memo_button.click], "memo", controls, memo, [text, probe, burst.frames, where, hidden, encoder],
           stored, shown, [stored, listing.unlocked],
           [memo_message, text, probe, status, *listing.outputs, where, hidden, homes],
           name="page:remember", burst=burst, show_progress_on=[memo_message], **RAW)

    def households(probe: Any, frames: bursts.Frames | None, encoder: str | None,
                   request: gr.Request) -> dict[str, Any]:
        return ui.households(bursts.chosen(probe, frames), encoder, request)

    def offered(done: dict[str, Any] | None) -> tuple[Any, ...]:
        if done is None:
            return "", None, *choices(None)
        if not done["groups"]:
            return (f"**{render.esc(done['label'])}** belongs to no household yet: found one under **Households** "
                    "below.", None, *choices(None))
        names = ", ".join(f"**{render.esc(g['label'])}**" for g in done["groups"])
        return (f"Households of **{render.esc(done['label'])}**: {names}. Choose one under **Where** (your own "
                "notes are chosen until you do), then show your probe again and press **Remember**.", None,
                *choices(done))

    action(ui, [homes_button.click], "memo", controls, households, [probe, burst.frames, encoder], found, offered,
           [found], [memo_message, probe, where, hidden, homes], name="page:households", burst=burst,
           show_progress_on=[memo_message], **RAW)
    where.input(on(ui, "page:view", hide_choices), [where, homes], [hidden], **QUICK)


def choices(homes: dict[str, Any] | None) -> tuple[Any, ...]:
    """[where, hidden, homes] of the Remember: one's own notes only, or also the households `homes` offers
    (one's own notes still chosen: a household is a choice the person makes, nobody hidden)."""
    offered = OWN_ONLY + [(f"Household: {g['label']}", str(g["id"])) for g in (homes or {}).get("groups", [])]
    return gr.update(choices=offered, value=OWN), gr.update(choices=[], value=[]), homes or None


def hide_choices(where: Any, homes: dict[str, Any] | None) -> Any:
    """The "hide it from" choices: the chosen household's members but the requester, nobody ticked."""
    group = next((g for g in (homes or {}).get("groups", []) if str(g["id"]) == str(where)), None)
    if group is None:
        return gr.update(choices=[], value=[])
    return gr.update(choices=[(name, str(i)) for i, name in group["members"] if i != homes["person"]], value=[])


def households_panel(ui: Controller, encoder: gr.Dropdown, listing: Listing) -> None:
    """Found a household (its founder's fresh probes) or join one (a member's and the newcomer's fresh probes,
    both shown): nobody is put into a household without showing up."""
    gr.Markdown("A household shares some notes among its members: each reads them with their own probe, a note "
                "can be hidden from some of them, and nobody outside learns anything of it, not even its name. "
                "Founding and joining ask for fresh probes, as deleting does (the demo people: face and palm).")
    with gr.Row():
        with gr.Column(min_width=280):
            gr.Markdown("#### Found a household")
            name = gr.Textbox(label="Household name", elem_id="bm-found-name")
            founder = probe_input(ui, "bm-found-probe", "Founder — fresh probe", encoder)
            founder_second = second_input(ui, "bm-found-second", "Founder — second probe (the other kind)", encoder)
            found_button = gr.Button("Found household", variant="primary", elem_id="bm-found")
        with gr.Column(scale=2, min_width=280):
            gr.Markdown("#### Join a household\nA member brings the newcomer in: both show their probes.")
            join_name = gr.Textbox(label="Household name (one of the member's)", elem_id="bm-join-name")
            with gr.Row():
                with gr.Column(min_width=240):
                    member = probe_input(ui, "bm-join-member", "A member — fresh probe", encoder)
                    member_second = second_input(ui, "bm-join-member-second", "A member — second probe", encoder)
                with gr.Column(min_width=240):
                    newcomer = probe_input(ui, "bm-join-newcomer", "The newcomer — fresh probe", encoder)
                    newcomer_second = second_input(ui, "bm-join-newcomer-second", "The newcomer — second probe",
                                                   encoder)
            join_button = gr.Button("Join household", variant="primary", elem_id="bm-join")
    with gr.Accordion("Leave a household", open=False, elem_id="bm-leave"):
        gr.Markdown("Its notes stop reaching you; what you wrote there stays with its members. The last member to "
                    "leave takes the household and its notes with them.", elem_classes="bm-hint")
        with gr.Row():
            with gr.Column(min_width=240):
                leave_name = gr.Textbox(label="Household name (one of yours)", elem_id="bm-leave-name")
                leave_button = gr.Button("Leave household", variant="stop", elem_id="bm-leave-button")
            with gr.Column(min_width=240):
                leaver = probe_input(ui, "bm-leave-probe", "You — fresh probe", encoder)
                leaver_second = second_input(ui, "bm-leave-second", "You — second probe (the other kind)", encoder)
    message = gr.Markdown(elem_id="bm-households-message")
    founded, joined, left = gr.State(None), gr.State(None), gr.State(None)
    controls = [Control(found_button, "Found household"), Control(join_button, "Join household"),
                Control(leave_button, "Leave household")]

    def found(label: str, probe: Any, second: Any, encoder: str | None, request: gr.Request) -> str:
        return ui.found_household(label, probe, second, encoder, request)

    def join(label: str, member: Any, member_second: Any, newcomer: Any, newcomer_second: Any, encoder: str | None,
             request: gr.Request) -> str:
        return ui.join_household(label, member, member_second, newcomer, newcomer_second, encoder, request)

    def landed(probes: int) -> Callable[..., tuple[Any, ...]]:
        def shown(done: str | None, unlocked: dict[str, Any] | None) -> tuple[Any, ...]:
            if done is None:
                return "", gr.skip(), *(None,) * probes, *(gr.skip(),) * 3
            return done, "", *(None,) * probes, *listing_now(ui, unlocked)
        return shown

    action(ui, [found_button.click], "household", controls, found, [name, founder, founder_second, encoder], founded,
           landed(2), [founded, listing.unlocked], [message, name, founder, founder_second, *listing.outputs],
           name="page:found_household", show_progress_on=[message], **RAW)
    action(ui, [join_button.click], "household", controls, join,
           [join_name, member, member_second, newcomer, newcomer_second, encoder], joined, landed(4),
           [joined, listing.unlocked],
           [message, join_name, member, member_second, newcomer, newcomer_second, *listing.outputs],
           name="page:join_household", show_progress_on=[message], **RAW)

    def leave(label: str, probe: Any, second: Any, encoder: str | None, request: gr.Request) -> str:
        return ui.leave_household(label, probe, second, encoder, request)

    action(ui, [leave_button.click], "household", controls, leave, [leave_name, leaver, leaver_second, encoder],
           left, landed(2), [left, listing.unlocked], [message, leave_name, leaver, leaver_second, *listing.outputs],
           name="page:leave_household", show_progress_on=[message], **RAW)


def notes_column(ui: Controller, encoder: gr.Dropdown, status: gr.HTML, listing: Listing) -> gr.Button:
    """Unlock one's own notes (a step-up probe), delete a note, forget oneself; returns the Lock button."""
    gr.Markdown(f"### My notes\nShow a clear probe to see your own notes, and your households' (marked in "
                f"*from*), for {UNLOCK_SECONDS // 60} minutes in this tab: then, or when you press **Lock**, the "
                "page forgets them and every answer it showed you. Deleting a note or forgetting yourself "
                "asks for a fresh probe each time. The demo people enrolled a face and a palm: pick them in both "
                "boxes.")
    probe = probe_input(ui, "bm-unlock-probe", "Probe", encoder, height=200)
    burst = burst_input(ui, "bm-unlock-probe", probe)
    second = second_input(ui, "bm-unlock-second", "Second probe (the other kind)", encoder)
    with gr.Row():
        unlock_button = gr.Button("Unlock my notes", variant="primary", elem_id="bm-unlock")
        lock_button = gr.Button("Lock", elem_id="bm-lock")
    listing.message.render()
    listing.table.render()
    result = gr.State(None)
    notes_message = changes_panel(ui, encoder, status, listing)

    def unlock(probe: Any, frames: bursts.Frames | None, second: Any, encoder: str | None,
               request: gr.Request) -> dict[str, Any]:
        return ui.unlock(bursts.chosen(probe, frames), encoder, second, request)

    def shown(session: dict[str, Any] | None, before: dict[str, Any] | None) -> tuple[Any, ...]:
        ui.lock(before)  # a new unlock, or a failed one, ends the listing shown before
        if session is None:
            return (*LOCKED, "", None, None)
        unlocked = {key: session[key] for key in ("token", "bound", "label", "until")}
        return (*listing_of(unlocked, session["rows"]), "", None, None)

    controls = [Control(unlock_button, "Unlock my notes"), Control(lock_button, "Lock")]
    action(ui, [unlock_button.click], "unlock", controls, unlock, [probe, burst.frames, second, encoder], result,
           shown, [result, listing.unlocked], [*listing.outputs, notes_message, probe, second],
           name="page:unlock", burst=burst, show_progress_on=[listing.message], **RAW)
    listing.private.append((notes_message, ""))
    return lock_button


def locking(ui: Controller, listing: Listing, lock_button: gr.Button) -> None:
    """Lock, and the end of the unlocked time (a timer checks every few seconds): the engine session ends and
    everything `listing.private` holds is emptied. Wired once every tab has added its private outputs."""
    timer = gr.Timer(LOCK_CHECK_SECONDS)
    private = [component for component, _ in listing.private]
    emptied = tuple(value for _, value in listing.private)

    def lock(unlocked: dict[str, Any] | None) -> tuple[Any, ...]:
        ui.lock(unlocked)
        return (*LOCKED, *emptied)

    def lock_when_due(unlocked: dict[str, Any] | None) -> tuple[Any, ...]:
        due = unlocked and unlocked["until"] < time.time()
        return lock(unlocked) if due else (gr.skip(),) * (len(LOCKED) + len(emptied))

    outputs = [*listing.outputs, *private]
    lock_button.click(on(ui, "page:view", lock), [listing.unlocked], outputs, **PRIVATE)
    timer.tick(on(ui, "page:view", lock_when_due), [listing.unlocked], outputs, show_progress="hidden", **PRIVATE)


def changes_panel(ui: Controller, encoder: gr.Dropdown, status: gr.HTML, listing: Listing) -> gr.Markdown:
    """Delete a note or forget oneself, each proven by a fresh probe (never by the unlock); the listing
    shows the unlocked person's notes as they are afterwards. Returns the panel's message."""
    fresh = probe_input(ui, "bm-confirm-probe", "Fresh probe to delete or forget", encoder, height=200)
    burst = burst_input(ui, "bm-confirm-probe", fresh)
    fresh_second = second_input(ui, "bm-confirm-second", "Second fresh probe (the other kind)", encoder)
    with gr.Row(equal_height=True):
        note_id = gr.Textbox(label="Note id", placeholder="from the first column", scale=1, elem_id="bm-note-id")
        delete_button = gr.Button("Delete note", variant="secondary", scale=1, elem_id="bm-delete")
    with gr.Accordion("Forget me", open=False):
        gr.Markdown("Erases whoever the fresh probe shows: every note, link, history entry, template and index "
                    "entry. There is no undo.")
        confirm = gr.Checkbox(label="I understand: erase everything of mine", elem_id="bm-forget-ok")
        forget_button = gr.Button("Forget me", variant="stop", elem_id="bm-forget")
    notes_message = gr.Markdown(elem_id="bm-notes-message")
    result = gr.State(None)
    controls = [Control(delete_button, "Delete note"), Control(forget_button, "Forget me")]

    def delete(note: Any, probe: Any, frames: bursts.Frames | None, second: Any, encoder: str | None,
               request: gr.Request) -> str:
        return ui.delete_note(note, bursts.chosen(probe, frames), encoder, second, request)

    def forget(confirmed: bool, probe: Any, frames: bursts.Frames | None, second: Any, encoder: str | None,
               request: gr.Request) -> str:
        return ui.forget(confirmed, bursts.chosen(probe, frames), encoder, second, request)

    def deleted(done: str | None, unlocked: dict[str, Any] | None) -> tuple[Any, ...]:
        if done is None:
            return gr.skip(), gr.skip(), None, None, gr.skip(), *(gr.skip(),) * 3
        return done, "", None, None, ui.status(), *listing_now(ui, unlocked)

    def forgotten(done: str | None, unlocked: dict[str, Any] | None) -> tuple[Any, ...]:
        if done is None:
            return gr.skip(), gr.skip(), None, None, gr.skip(), *(gr.skip(),) * 3
        return done, False, None, None, ui.status(), *listing_now(ui, unlocked)

    outputs = [fresh, fresh_second, status, *listing.outputs]
    action(ui, [delete_button.click], "change", controls, delete,
           [note_id, fresh, burst.frames, fresh_second, encoder], result, deleted, [result, listing.unlocked],
           [notes_message, note_id, *outputs], name="page:delete_note", burst=burst, show_progress_on=[notes_message],
           **RAW)
    action(ui, [forget_button.click], "change", controls, forget, [confirm, fresh, burst.frames, fresh_second, encoder],
           result, forgotten, [result, listing.unlocked], [notes_message, confirm, *outputs], name="page:forget",
           burst=burst, show_progress_on=[notes_message], **RAW)
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
    result = gr.State(None)

    def run(path: str, count: float, progress: gr.Progress = gr.Progress()) -> str:  # noqa: B008
        return ui.import_locomo(path, int(count), progress)

    def shown(done: str | None) -> tuple[Any, ...]:
        return (done, ui.status()) if done else ("", gr.skip())

    action(ui, [button.click], "import", [Control(button, "Import")], run, [path, count], result, shown, [result],
           [message, status], name="page:import_locomo", show_progress_on=[message])
    sample_button.click(on(ui, "page:sample", ui.sample_capture), [person, encoder], [chat_probe], **PRIVATE)


def calibrate_tab(ui: Controller, encoder: gr.Dropdown, status: gr.HTML) -> None:
    gr.Markdown("How alike are two captures of one person (genuine) and captures of two people (impostor)? The "
                "gate admits similarity ≥ τ; the paper takes τ where the two densities cross, the security choice "
                "is τ at a target false-match rate. The encoder is the **probe encoder** chosen at the top.")
    registry = gr.Dataframe(ui.encoder_table(), headers=["encoder", "kind", "dim", "default τ", "τ in this store",
                            "loads here", "weights", "licence"], interactive=False, label="Encoder registry",
                            elem_id="bm-registry")
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
        done = ui.calibrate(encoder, source, folder, progress, request)
        return {"report": done, "view": ui.calibration_view(done), "guards": guarded()}

    def shown(done: dict[str, Any] | None) -> tuple[Any, ...]:
        return (done["report"], *done["view"], done["guards"]) if done else (gr.skip(),) * 4

    action(ui, [button.click], "calibrate", [Control(button, "Compute histograms and DET")], calibrate,
           [encoder, source, folder], calibrated, shown, [calibrated], [report, plot, table, guards],
           name="page:calibrate_samples", show_progress_on=[plot])

    def tau_stored(done: str | None) -> tuple[Any, ...]:
        return (done, ui.encoder_table(), ui.status(), guarded()) if done else (gr.skip(),) * 4

    controls = [Control(store_intersection, "Store τ (intersection, the paper's)"),
                Control(store_fmr, "Store τ (at FMR ≤ 1e-3)")]
    for store, which in ((store_intersection, "intersection"), (store_fmr, "fmr")):
        action(ui, [store.click], "tau", controls, functools.partial(store_tau, ui, which=which), [report], stored,
               tau_stored, [stored], [message, registry, status, guards], name="page:store_tau")


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


def store_tau(ui: Controller, report: Any, *, which: str) -> str:
    return ui.store_tau(report, which)


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
