"""The Enrol tab's left column and households: enrol, remember into one's own notes or a household, found,
join or leave a household."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from ...identity.enrolment import MAX_LABEL_CHARS
from .. import bursts, render, voices
from ..controller import OWN, Controller
from ..widgets import (
    QUICK,
    RAW,
    Control,
    Listing,
    action,
    burst_input,
    image_input,
    on,
    probe_input,
    second_input,
    voice_input,
    watch,
)
from .notes import listing_now

OWN_ONLY = [("My own notes", OWN)]  # the Remember's "where" until "My households" offers a requester's own


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
    recordings = voice_recordings(ui)
    button = gr.Button("Enrol", variant="primary", elem_id="bm-enrol")
    message = gr.Markdown(elem_id="bm-enrol-message")
    result = gr.State(None)

    def enrol(label: str, files: list[Any] | None, capture: Any, second: list[Any] | None, encoder: str | None,
              voice_1: Any, voice_2: Any, voice_3: Any, request: gr.Request,
              progress: gr.Progress = gr.Progress()) -> str:  # noqa: B008 - Gradio's idiom
        return ui.enroll(label, files, capture, encoder, progress, request, second, [voice_1, voice_2, voice_3])

    def enrolled(text: str | None) -> tuple[Any, ...]:
        emptied = (None,) * (3 + len(recordings))  # files, capture, second and the recordings: used, or deleted
        return (text, "", *emptied, ui.status()) if text else ("", gr.skip(), *emptied, gr.skip())

    action(ui, [button.click], "enrol", [Control(button, "Enrol")], enrol,
           [label, files, capture, second, encoder, *recordings], result, enrolled, [result],
           [message, label, files, capture, second, *recordings, status], name="page:enrol",
           show_progress_on=[message], **RAW)

    remember_panel(ui, encoder, status, listing)


def voice_recordings(ui: Controller) -> list[gr.Audio]:
    """An enrolment's recordings (voices.RECORDINGS of them), each with a meter that says how much speech it
    heard as soon as it is recorded, before the person presses Enrol."""
    gr.Markdown(f"**Your voice, optional**: {voices.RECORDINGS} short recordings, a few seconds of speech each, "
                "beside your images. A voice then says who is speaking with your probe; it never unlocks, deletes or "
                "forgets on its own.", elem_classes="bm-hint", visible=ui.voice)
    recordings = []
    with gr.Row(visible=ui.voice, elem_id="bm-enrol-voices"):
        for number in range(1, voices.RECORDINGS + 1):
            with gr.Column(min_width=200):
                audio = voice_input(ui, f"bm-enrol-voice-{number}", f"Recording {number} of {voices.RECORDINGS}")
                meter = gr.Markdown(elem_id=f"bm-enrol-meter-{number}", elem_classes="bm-hint")
            audio.change(on(ui, "page:view", voices.meter), [audio], [meter], preprocess=False, **QUICK)
            recordings.append(audio)
    return recordings


def remember_panel(ui: Controller, encoder: gr.Dropdown, status: gr.HTML, listing: Listing) -> None:
    """Remember for whoever the probe shows: into their own notes, or (after "My households" has gated them
    and offered their own households) into one of their households, hidden from some of its members."""
    gr.Markdown("### Remember something\nStored for whoever the probe matches; refused for a stranger. To share "
                "it with a household of yours: show your probe and press **My households**, choose where (and "
                "whom to hide it from), then show your probe again and press **Remember**.")
    text = gr.Textbox(label="Memory", elem_id="bm-memo")
    probe = probe_input(ui, "bm-memo-probe", "Probe", encoder, height=200)
    burst = burst_input(ui, "bm-memo-probe", probe)
    voice = voice_input(ui, "bm-memo-voice")
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
             voice: Any, request: gr.Request) -> dict[str, Any]:
        return ui.remember(text, bursts.chosen(probe, frames), encoder, request, where, hidden, voice)

    def shown(result: dict[str, Any] | None, unlocked: dict[str, Any] | None) -> tuple[Any, ...]:
        if result is None:  # the choices stay: they are still the requester's, and the engine checks again
            return "", gr.skip(), None, None, gr.skip(), *(gr.skip(),) * 3, *(gr.skip(),) * 3
        note = result["note"]
        if result.get("household"):
            away = (f", hidden from {', '.join(f'**{render.esc(n)}**' for n in result['hidden_from'])}"
                    if result["hidden_from"] else "")
            stored = (f"✎ Stored as note {note['id']} in the household **{render.esc(result['household'])}** "
                      f"by **{render.esc(result['author'])}**{away}: “{render.esc(note['content'])}”.")
        else:
            stored = (f"✎ Stored as note {note['id']} for **{render.esc(result['owner'])}**: "
                      f"“{render.esc(note['content'])}”.")
        return (stored, "", None, None, ui.status(), *listing_now(ui, unlocked), *choices(None))

    action(ui, [memo_button.click], "memo", controls, memo,
           [text, probe, burst.frames, where, hidden, encoder, voice], stored, shown, [stored, listing.unlocked],
           [memo_message, text, probe, voice, status, *listing.outputs, where, hidden, homes],
           name="page:remember", burst=burst, show_progress_on=[memo_message], **RAW)

    def households(probe: Any, frames: bursts.Frames | None, encoder: str | None, voice: Any,
                   request: gr.Request) -> dict[str, Any]:
        return ui.homes.of(bursts.chosen(probe, frames), encoder, request, voice)

    def offered(done: dict[str, Any] | None) -> tuple[Any, ...]:
        if done is None:
            return "", None, None, *choices(None)
        if not done["groups"]:
            return (f"**{render.esc(done['label'])}** belongs to no household yet: found one under **Households** "
                    "below.", None, None, *choices(None))
        names = ", ".join(f"**{render.esc(g['label'])}**" for g in done["groups"])
        return (f"Households of **{render.esc(done['label'])}**: {names}. Choose one under **Where** (your own "
                "notes are chosen until you do), then show your probe again and press **Remember**.", None, None,
                *choices(done))

    action(ui, [homes_button.click], "memo", controls, households, [probe, burst.frames, encoder, voice], found,
           offered, [found], [memo_message, probe, voice, where, hidden, homes], name="page:households", burst=burst,
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
        return ui.homes.found(label, probe, second, encoder, request)

    def join(label: str, member: Any, member_second: Any, newcomer: Any, newcomer_second: Any, encoder: str | None,
             request: gr.Request) -> str:
        return ui.homes.join(label, member, member_second, newcomer, newcomer_second, encoder, request)

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
        return ui.homes.leave(label, probe, second, encoder, request)

    action(ui, [leave_button.click], "household", controls, leave, [leave_name, leaver, leaver_second, encoder],
           left, landed(2), [left, listing.unlocked], [message, leave_name, leaver, leaver_second, *listing.outputs],
           name="page:leave_household", show_progress_on=[message], **RAW)
