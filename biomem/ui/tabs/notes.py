"""The Enrol tab's right column: unlock one's own notes for a while (a step-up probe), lock them, delete a note or
forget oneself."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import gradio as gr

from .. import bursts, render
from ..controller import UNLOCK_SECONDS, Controller
from ..widgets import (
    LOCKED,
    PRIVATE,
    RAW,
    Control,
    Listing,
    action,
    burst_input,
    on,
    probe_input,
    second_input,
    voice_input,
)

LOCK_CHECK_SECONDS = 5  # how often a tab checks whether its unlocked time is up


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


def notes_column(ui: Controller, encoder: gr.Dropdown, status: gr.HTML, listing: Listing) -> gr.Button:
    """Unlock one's own notes (a step-up probe), delete a note, forget oneself; returns the Lock button."""
    gr.Markdown(f"### My notes\nShow a clear probe to see your own notes, and your households' (marked in "
                f"*from*), for {UNLOCK_SECONDS // 60} minutes in this tab: then, or when you press **Lock**, the "
                "page forgets them and every answer it showed you. Deleting a note or forgetting yourself "
                "asks for a fresh probe each time. The demo people enrolled a face and a palm: pick them in both "
                "boxes. A recording may go with the probe, but a voice alone never unlocks, deletes or forgets.")
    probe = probe_input(ui, "bm-unlock-probe", "Probe", encoder, height=200)
    burst = burst_input(ui, "bm-unlock-probe", probe)
    second = second_input(ui, "bm-unlock-second", "Second probe (the other kind)", encoder)
    voice = voice_input(ui, "bm-unlock-voice")
    with gr.Row():
        unlock_button = gr.Button("Unlock my notes", variant="primary", elem_id="bm-unlock")
        lock_button = gr.Button("Lock", elem_id="bm-lock")
    listing.message.render()
    listing.table.render()
    result = gr.State(None)
    notes_message = changes_panel(ui, encoder, status, listing)

    def unlock(probe: Any, frames: bursts.Frames | None, second: Any, encoder: str | None, voice: Any,
               request: gr.Request) -> dict[str, Any]:
        return ui.unlock(bursts.chosen(probe, frames), encoder, second, request, voice)

    def shown(session: dict[str, Any] | None, before: dict[str, Any] | None) -> tuple[Any, ...]:
        ui.lock(before)  # a new unlock, or a failed one, ends the listing shown before
        if session is None:
            return (*LOCKED, "", None, None, None)
        unlocked = {key: session[key] for key in ("token", "bound", "label", "until")}
        return (*listing_of(unlocked, session["rows"]), "", None, None, None)

    controls = [Control(unlock_button, "Unlock my notes"), Control(lock_button, "Lock")]
    action(ui, [unlock_button.click], "unlock", controls, unlock, [probe, burst.frames, second, encoder, voice],
           result, shown, [result, listing.unlocked], [*listing.outputs, notes_message, probe, second, voice],
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
    voice = voice_input(ui, "bm-confirm-voice")
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

    def delete(note: Any, probe: Any, frames: bursts.Frames | None, second: Any, encoder: str | None, voice: Any,
               request: gr.Request) -> str:
        return ui.delete_note(note, bursts.chosen(probe, frames), encoder, second, request, voice)

    def forget(confirmed: bool, probe: Any, frames: bursts.Frames | None, second: Any, encoder: str | None,
               voice: Any, request: gr.Request) -> str:
        return ui.forget(confirmed, bursts.chosen(probe, frames), encoder, second, request, voice)

    def deleted(done: str | None, unlocked: dict[str, Any] | None) -> tuple[Any, ...]:
        if done is None:
            return gr.skip(), gr.skip(), None, None, None, gr.skip(), *(gr.skip(),) * 3
        return done, "", None, None, None, ui.status(), *listing_now(ui, unlocked)

    def forgotten(done: str | None, unlocked: dict[str, Any] | None) -> tuple[Any, ...]:
        if done is None:
            return gr.skip(), gr.skip(), None, None, None, gr.skip(), *(gr.skip(),) * 3
        return done, False, None, None, None, ui.status(), *listing_now(ui, unlocked)

    outputs = [fresh, fresh_second, voice, status, *listing.outputs]
    action(ui, [delete_button.click], "change", controls, delete,
           [note_id, fresh, burst.frames, fresh_second, encoder, voice], result, deleted, [result, listing.unlocked],
           [notes_message, note_id, *outputs], name="page:delete_note", burst=burst, show_progress_on=[notes_message],
           **RAW)
    action(ui, [forget_button.click], "change", controls, forget,
           [confirm, fresh, burst.frames, fresh_second, encoder, voice], result, forgotten, [result, listing.unlocked],
           [notes_message, confirm, *outputs], name="page:forget", burst=burst, show_progress_on=[notes_message], **RAW)
    return notes_message
