"""The page's building blocks: probe boxes (an image, sample buttons, a webcam burst, a recording), the state the
"My notes" listing keeps, and `action`, which wires a button to the Controller through its door
(biomem.engine.access)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from . import bursts, uploads
from .controller import Controller
from .doors import door
from .messages import friendly
from .turns import CLICK_ORDER

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


def watch(ui: Controller, component: gr.Image | gr.File | gr.Audio) -> None:
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


def voice_input(ui: Controller, elem_id: str,
                label: str = "Who is speaking? Optional: a few seconds of speech, used once") -> gr.Audio:
    """A recording beside a probe box (microphone or a WAV upload), read once and deleted like an image; hidden
    when the voice encoder does not load here (it then never holds anything)."""
    audio = gr.Audio(label=label, sources=["microphone", "upload"], type="filepath", format="wav",
                     elem_id=elem_id, elem_classes="bm-voice", visible=ui.voice, buttons=[])
    watch(ui, audio)
    return audio


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
