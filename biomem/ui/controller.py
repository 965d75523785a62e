"""UI events to engine calls: each handler takes the widgets' plain values and returns plain values.

Every decision (who matched, which notes may be read, what is stored or erased, attempt
limits, step-up, how long an unlocked listing lasts) is the engine's; this layer reads and deletes
probe uploads (images and recordings alike), checks that a field was filled in, knows each visitor's role
(doors.Operators: an API key signed in on the page, else the store's default) and which action each browser
tab has under way.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

import gradio as gr
import numpy as np

from modalities.images import load_image

from ..engine import demo
from ..engine.memory import BioMemory
from ..errors import (
    BioMemError,
    GroupNotFoundError,
    MixedBurstError,
    MultipleFacesError,
    NoFaceError,
    PoorCaptureError,
    TooManyAttemptsError,
)
from ..eval.importing import import_locomo
from ..identity.bursts import Burst
from ..identity.disclosure import note_view
from ..identity.gate import Probe
from ..identity.limits import client_keys
from ..settings import Settings
from . import render, uploads
from .doors import Operators
from .fields import Progress, Shown, silent, typed_text
from .homes import Households, former, sourced, sources
from .messages import fail, hint, readable
from .sample_probes import SampleProbes
from .tuning import Calibration
from .turns import Crowded, Repeated, Turns
from .voices import VOICE, voice_ready

log = logging.getLogger("biomem.ui")
UNLOCK_SECONDS = 120  # how long "My notes" stays unlocked in one browser tab: a kiosk's user walks away
OWN = "own"  # the Remember's "where" for the requester's own notes (else a household's id)
NO_HOUSEHOLD_CHOSEN = ("No such household", "The probe's person has no such household: press My households "
                       "with your probe, choose one of yours, then Remember with your probe again.")


class Controller:
    """The handlers behind the UI, over one BioMemory."""

    def __init__(self, mem: BioMemory, settings: Settings | None = None, *, admin: bool | None = None) -> None:
        self.mem = mem
        self.settings = settings = settings or Settings.from_env()
        self.admin = settings.admin if admin is None else admin
        self.operators = Operators(mem.store, admin=self.admin, settings=settings)
        self._building = threading.Lock()  # one demo build or import at a time
        self.turns = Turns()
        self.samples = SampleProbes()
        self.homes = Households(mem, self)  # the households panel (biomem.ui.homes)
        self.calibration = Calibration(mem, self.operators)  # the Calibrate tab (biomem.ui.tuning)
        self.voice = voice_ready()  # recordings beside the probes (biomem.ui.voices), when the encoder loads here

    # ---- one action at a time per tab and group (biomem.ui.turns) ---------------------------------

    def take_turn(self, request: gr.Request, group: str, action: str, click: Any = None) -> None:
        """Start `action` of `group` in this browser tab once the action under way there has been shown. The
        same action dispatched twice by Gradio (one double click) raises an invisible error: that event chain
        stops, and nothing is shown or consumed. `click`: the page's number of the click (biomem.ui.turns)."""
        try:
            number = int(click) if isinstance(click, (int, float)) and 0 < click < 2**31 else None
            self.turns.take(request.session_hash or "", group, action, number)
        except Repeated:
            raise gr.Error("This action is already under way.", visible=False, print_exception=False) from None
        except Crowded:
            raise hint("The page is busy with many visitors: click again in a moment.", "Busy") from None

    def turn_landed(self, request: gr.Request, group: str) -> bool:
        """This tab's action of `group` is being shown; True when another waits to run next (it takes the buttons)."""
        return self.turns.landed(request.session_hash or "", group)

    def give_back_turn(self, request: gr.Request, group: str) -> None:
        """The page has shown this tab's action of `group`: the next one may start."""
        self.turns.give_back(request.session_hash or "", group)

    # ---- probes ---------------------------------------------------------------------------------

    def clients(self, request: gr.Request | None) -> list[str] | None:
        """The requester's attempt-limit keys: its Gradio session and its address."""
        if request is None:
            return None
        return client_keys(request.session_hash, request.client.host if request.client else "",
                           request.headers.get("x-forwarded-for"), trust_proxy=self.settings.trust_proxy)

    def probe(self, value: Any, encoder: str | None, what: str = "probe", client: list[str] | None = None,
              voice: Any = None) -> Shown:
        """Read, delete and encode one probe upload, or fuse a webcam burst's frames (biomem.ui.bursts) into
        one probe, and the recording `voice` beside it (or alone): the probe is then {modality: Probe}, which the
        engine fuses by the store's rule. A client in cool-down costs no encoding. Returns the probe and the
        attempt-limit keys it counts against: none for a sample capture this page handed out (public, so no
        attempt of anyone's) unless a recording, the visitor's own, came with it."""
        if not uploads.upload_path(voice):
            return self.seen(value, encoder, what, client)
        try:
            heard = uploads.read_once(voice, "recording")
        except gr.Error:
            uploads.discard(value)
            raise
        if not uploads.upload_path(value) and not isinstance(value, Burst):  # a recording alone
            self.mem.limiter.check(client)
            return Shown(self.mem.probe(heard, VOICE), client)
        shown = self.seen(value, encoder, what, client)
        self.mem.limiter.check(client)
        return Shown({shown.probe.modality: shown.probe, VOICE: self.mem.probe(heard, VOICE)}, client, shown.sample)

    def seen(self, value: Any, encoder: str | None, what: str, client: list[str] | None) -> Shown:
        """One image probe (or a webcam burst) read, deleted and encoded; see `probe`."""
        if isinstance(value, Burst):
            self.mem.limiter.check(client)
            return Shown(self.fused(value, encoder or self.mem.modality), client)
        image = load_image(uploads.read_once(value, what))
        sample = self.samples.which(image)
        client = None if sample else client
        self.mem.limiter.check(client)
        return Shown(self.mem.probe(image, encoder or self.mem.modality), client, sample and sample[0])

    def fused(self, burst: Burst, encoder: str) -> Probe:
        """A burst's frames fused by the engine, its refusals said of the burst: no usable frame (the hint of
        the best one, "move closer"), or frames of different people."""
        count = f"{len(burst.frames)} frame{'s' if len(burst.frames) != 1 else ''}"
        try:
            return self.mem.probe(burst, encoder)
        except PoorCaptureError as exc:
            title, message = readable(exc)
            raise fail(f"None of the burst's {count} was clear enough. {message}", title) from None
        except NoFaceError:
            raise fail(f"No face was found in any of the burst's {count}: face the camera in good light and take "
                       "the burst again.", "No face found") from None
        except MixedBurstError:
            raise fail(f"The burst's {count} show different people: one person at a time. Hold still and take the "
                       "burst again.", "More than one person") from None
        except MultipleFacesError:
            raise fail(f"A frame of the burst's {count} shows several faces: one person at a time. Hold still and "
                       "take the burst again.", "More than one person") from None

    def step_up(self, value: Any, second: Any, encoder: str | None, client: list[str] | None,
                voice: Any = None) -> tuple[Probe | dict[str, Probe], list[str] | None]:
        """A change's fresh probe: one, or two when the person enrolled a face and a palm (the second read
        with the store's encoder of the other kind), with a recording if given (the engine never takes a voice
        alone as proof); with the attempt-limit keys they count against."""
        name = encoder or self.mem.modality
        if not uploads.upload_path(second):
            return self.probe(value, name, "fresh probe", client, voice)[:2]
        other = self.mem.other_kind(name)
        if other is None:
            uploads.discard(value, second, voice)
            raise hint("Nobody here enrolled a second kind of probe: leave the second one empty.", "No second kind")
        first = self.probe(value, name, "fresh probe", client, voice)
        again = self.probe(second, other, "second probe", client)
        parts = first.probe if isinstance(first.probe, dict) else {name: first.probe}
        return {**parts, other: again.probe}, first.client or again.client

    def sample_capture(self, person: str, encoder: str | None) -> np.ndarray:
        """A fresh capture of a sample person for the probe input (face or palm by the encoder)."""
        return self.samples.hand_out(person, encoder, demo.sample_capture(self.mem, person, encoder))

    def second_sample(self, person: str, encoder: str | None) -> np.ndarray:
        """A fresh capture of a sample person of the other kind than `encoder` (their palm beside a
        face): the second probe of someone who enrolled both."""
        other = self.mem.other_kind(encoder or self.mem.modality)
        if other is None:
            raise hint("Nobody here enrolled a second kind of probe: leave the second one empty.", "No second kind")
        return self.samples.hand_out(person, other, demo.sample_capture(self.mem, person, other))

    def resample(self, side: dict[str, Any] | None, encoder: str | None) -> np.ndarray | None:
        """A fresh capture of the sample person a Compare side's probe was (its box is not left empty), else
        None: a visitor's own photo is used once and gone."""
        person = (side or {}).get("sample")
        return self.sample_capture(person, encoder) if person else None

    # ---- the public API: ask, remember, compare -------------------------------------------------

    def answer(self, question: str, probe: Probe, client: list[str] | None) -> dict[str, Any]:
        answer = self.mem.ask(question, probe=probe, client=client)
        view = answer.as_dict()
        named = sources([g for person in answer.gate.admitted for g in self.mem.groups(identity=person)])
        return {"kind": "answer", "question": question, "answer": answer.text, "gate": view["gate"],
                "notes": [sourced(self.mem, note, named) for note in view["results"]], "gated_out": view["gated_out"],
                "omitted": answer.omitted, "prompt": render.visible(answer.prompt)}

    def ask(self, question: str, probe: Any, encoder: str | None = None, request: gr.Request | None = None,
            voice: Any = None) -> dict[str, Any]:
        """Ask as whoever the probe (and the recording `voice` beside it) shows: the gate decides which memories
        the LLM may read."""
        question = typed_text(question, "question", probe, voice)
        if not question:
            uploads.discard(probe, voice)
            raise hint("Type a question first.", "No question")
        return self.answer(question, *self.probe(probe, encoder, client=self.clients(request), voice=voice)[:2])

    def remember(self, text: str, probe: Any, encoder: str | None = None, request: gr.Request | None = None,
                 where: Any = None, hidden: Any = None, voice: Any = None) -> dict[str, Any]:
        """Store a memory for whoever the probe shows (refused when it matches nobody); `where` a household
        of theirs to write into instead (its id, as "My households" offered it) and `hidden` the ids of its
        members who must never read the note. The engine refuses a household the person is not in."""
        text = typed_text(text, "text", probe, voice)
        try:
            if not text:
                raise hint("Type what to remember first.", "Nothing to remember")
            scope, hidden_from = self.placement(where, hidden)
        except gr.Error:
            uploads.discard(probe, voice)
            raise
        proof, client, _ = self.probe(probe, encoder, client=self.clients(request), voice=voice)
        if scope is None:
            note = self.mem.add(text, probe=proof, client=client)
            return {"kind": "remember", "question": text, "owner": self.mem.store.identity(note.owner).label,
                    "note": note_view(note)}
        try:
            note = self.mem.add(text, probe=proof, scope=scope, hidden_from=hidden_from, client=client)
        except GroupNotFoundError:
            raise fail(NO_HOUSEHOLD_CHOSEN[1], NO_HOUSEHOLD_CHOSEN[0]) from None
        home = self.mem.store.group(note.owner)
        names = dict(zip(home.members, home.member_labels, strict=True))
        return {"kind": "remember", "question": text, "owner": home.label, "household": home.label,
                "author": names.get(note.author, ""), "hidden_from": [names.get(i, "") for i in note.hidden_from],
                "note": note_view(note)}

    @staticmethod
    def placement(where: Any, hidden: Any) -> tuple[int | None, list[int]]:
        """(household id or None for one's own notes, member ids to hide from) of the Remember's choices."""
        hidden = [hidden] if isinstance(hidden, (str, int)) else list(hidden or [])
        if where in (None, "", OWN):
            if hidden:
                raise hint("Choose one of your households to hide a note from some of its members.", "No household")
            return None, []
        try:
            scope, hidden_from = int(where), [int(i) for i in hidden]
        except (TypeError, ValueError, OverflowError):
            raise fail(NO_HOUSEHOLD_CHOSEN[1], NO_HOUSEHOLD_CHOSEN[0]) from None
        return scope, hidden_from

    def compare(self, question: str, probe_a: Any, probe_b: Any, encoder: str | None = None,
                request: gr.Request | None = None, voice_a: Any = None, voice_b: Any = None) -> dict[str, Any]:
        """One question, two requesters (each a probe, a recording, or both): two gate decisions, two retrieved
        sets, two answers."""
        held = (probe_a, probe_b, voice_a, voice_b)
        question = typed_text(question, "question", *held)
        if not question or not (probe_a or voice_a) or not (probe_b or voice_b):
            uploads.discard(*held)
            if not question:
                raise hint("Type a question first.", "No question")
            raise hint("Give both probes (A and B): upload, webcam, a sample person or a recording.",
                       "Two probes needed")
        client = self.clients(request)
        sides = {}
        for side, value, voice in (("a", probe_a, voice_a), ("b", probe_b, voice_b)):
            try:
                proof, counted, sample = self.probe(value, encoder, client=client, voice=voice)
                sides[side] = {**self.answer(question, proof, counted), **({"sample": sample} if sample else {})}
            except TooManyAttemptsError:
                uploads.discard(*held)
                raise
            except BioMemError as exc:
                title, message = readable(exc)
                sides[side] = {"error": title, "message": message}
        return {"question": question, **sides}

    # ---- the store --------------------------------------------------------------------------------

    def status(self) -> str:
        return render.status_html(self.mem.overview())

    def palm_encoder(self) -> str | None:
        """The demo's palm encoder when it loads here, else None (faces only)."""
        name = self.settings.palm_encoder
        return name if demo.loadable(self.mem, name) else None

    def load_demo(self, progress: Progress = silent) -> str:
        """Build the demo store (Ana, Ben, Chloe: faces, synthetic palms, everyday memories, their household)
        once; a store with the demo people but no household yet gets the household alone."""
        with self._building:
            if demo.demo_loaded(self.mem):
                return "The demo people are already here: go to **Compare** or **Chat**."
            home = (f"their household **{demo.DEMO_HOUSEHOLD}** (a Wi-Fi password for all three, a surprise "
                    "party hidden from Chloe)")
            if set(demo.demo_people(self.mem)) == set(demo.DEMO_PEOPLE):
                demo.build_demo(self.mem, household=True)
                return f"The demo people were already here; added {home}."
            palm = self.palm_encoder()
            progress(0.1, desc="Enrolling Ana, Ben and Chloe with their memories and household…")
            demo.build_demo(self.mem, palm_encoder=palm, household=True)
            progress(1.0, desc="Done")
        palms = f" and synthetic palms (`{palm}`)" if palm else " (no palm encoder here: faces only)"
        return f"Loaded {', '.join(demo.DEMO_PEOPLE)} with face photos{palms}, a few memories each and {home}."

    def import_locomo(self, path: str, conversations: int, progress: Progress = silent) -> str:
        """Import LoCoMo conversations from a server path (the page's door: admin only)."""
        with self._building:
            done = import_locomo(self.mem, (path or "").strip(), int(conversations), palm=self.palm_encoder(),
                                 progress=lambda fraction, desc: progress(fraction, desc=desc))
        return "Imported:\n" + "\n".join(
            f"- {c.label}: already imported" if c.skipped else
            f"- {c.label}: {c.turns} turns → sample person **{c.sample}** ({c.kind})" for c in done)

    # ---- enrolment and one's own notes ----------------------------------------------------------

    def enroll(self, label: str, files: list[Any] | None, capture: Any, encoder: str | None,
               progress: Progress = silent, request: gr.Request | None = None, second: list[Any] | None = None,
               voices: list[Any] | None = None) -> str:
        """Create an identity from uploaded images and/or a capture, `second`: images of another kind (a palm
        beside a face, read by `second_kind`), and `voices`: recordings of the person speaking (never without an
        image: a voice alone proves nothing); each file deleted after use. A gated attempt of the requester's
        client (biomem.identity.enrolment): refused in a cool-down before any encoding. Only the admin page
        enrols a look-alike relative of someone enrolled, whom the second kind tells apart."""
        client = self.clients(request)
        paths = [p for p in (files or []) if uploads.upload_path(p)]
        paths += [capture] if uploads.upload_path(capture) else []
        others = [p for p in (second or []) if uploads.upload_path(p)]
        spoken = [p for p in (voices or []) if uploads.upload_path(p)]
        label, name = typed_text(label, "name", files, capture, second, voices), encoder or self.mem.modality
        try:
            if not label:
                raise hint("Give a name for the new identity.", "No name")
            if not paths:
                raise hint("Give one or more images (upload or capture): recordings alone cannot enrol, since a "
                           "voice never proves who you are.", "No images")
            other = self.second_kind(name) if others else None
            if others and other is None:
                raise hint("No encoder of another kind loads here: leave the second images empty.", "No second kind")
            if spoken and not self.voice:
                raise hint("The voice encoder does not load here: leave the recordings empty.", "No voice")
            self.mem.limiter.check(client)
            kinds = {name: (paths, "Image"), **({other: (others, "Image")} if other else {}),
                     **({VOICE: (spoken, "Recording")} if spoken else {})}
            count, done = len(paths) + len(others) + len(spoken), 0
            samples: dict[str, list[Probe]] = {}
            for kind, (captures, noun) in kinds.items():
                for number, path in enumerate(captures, 1):
                    progress(done / count, desc=f"Encoding capture {done + 1} of {count}")
                    try:
                        samples.setdefault(kind, []).append(
                            self.mem.probe(uploads.read_once(path, noun.lower()), kind, quality="enrol"))
                    except BioMemError as exc:
                        title, message = readable(exc)
                        raise fail(f"{noun} {number}: {message}", title) from None
                    done += 1
        finally:
            uploads.discard(paths, others, spoken)
        progress(1.0, desc="Checking and storing templates")
        identity = self.mem.enroll(label, samples, client=client, admin=self.admin)
        made = " and ".join(f"{len(probes)} {'recording' if kind == VOICE else 'image'}(s) with `{kind}`"
                            for kind, probes in samples.items())
        return f"Enrolled **{render.esc(identity.label)}** from {made}. Add memories below, or ask in **Chat**."

    def second_kind(self, name: str) -> str | None:
        """The encoder of an enrolment's images of another kind than `name`: one enrolled here already, else
        the demo's palm encoder beside a face (None when none loads)."""
        other = self.mem.other_kind(name)
        if other is None and self.mem.encoder(name).info.kind == "face":
            other = self.palm_encoder()
        return other

    def unlock(self, probe: Any, encoder: str | None, second: Any = None, request: gr.Request | None = None,
               voice: Any = None) -> dict[str, Any]:
        """The requester's own notes, for reading (a step-up probe), and the engine session that keeps
        them readable in this tab for UNLOCK_SECONDS (its token stays on the server); every change asks
        again."""
        proof, client = self.step_up(probe, second, encoder, self.clients(request), voice)
        self.mem.verify(proof, "Unlocking your notes", client=client)
        bound = "ui:" + "|".join(self.clients(request) or [])  # this tab and its client: nobody else's
        session = self.mem.session(proof, client=client, ttl=UNLOCK_SECONDS, bound_to=bound)
        return {"token": session.token, "bound": bound, "label": session.label,
                "until": time.time() + UNLOCK_SECONDS, "rows": self.rows(session)}

    def my_notes(self, unlocked: dict[str, Any]) -> list[list[Any]] | None:
        """The unlocked person's notes as they are now (after a Remember, a delete or a forget), or None
        when their session has ended (expired, locked, or the person was forgotten)."""
        try:
            return self.rows(self.mem.sessions.get(unlocked["token"], unlocked["bound"]))
        except BioMemError:
            return None

    def rows(self, session: Any) -> list[list[Any]]:
        """The notes an unlocked session's person may read (their own and their households'), as table rows
        that say where each came from."""
        groups, people = sources(session.groups())
        notes = session.get_all()
        people.update({n.author: former(self.mem, n.author) for n in notes
                       if n.author is not None and n.author not in people})
        return render.note_rows(notes, groups, people)

    def lock(self, unlocked: dict[str, Any] | None) -> None:
        """End an unlocked listing's engine session (Lock, or its time is up)."""
        if unlocked:
            try:
                self.mem.sessions.get(unlocked["token"], unlocked["bound"]).close()
            except BioMemError:
                pass  # already ended

    @staticmethod
    def note_id(value: Any) -> int:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = 0.0
        if not math.isfinite(number) or number != int(number) or number < 1:
            raise hint("Give the id of one of your notes (first column).", "No note id")
        return int(number)

    def delete_note(self, note_id: Any, probe: Any, encoder: str | None, second: Any = None,
                    request: gr.Request | None = None, voice: Any = None) -> str:
        """Delete one of the requester's notes, proven by a fresh probe (a recording beside it never suffices)."""
        try:
            number = self.note_id(note_id)
        except gr.Error:
            uploads.discard(probe, second, voice)
            raise
        proof, client = self.step_up(probe, second, encoder, self.clients(request), voice)
        note = self.mem.delete(number, probe=proof, client=client)
        return f"Deleted note {note.id}: “{render.esc(note.content)}”."

    def forget(self, confirmed: bool, probe: Any, encoder: str | None, second: Any = None,
               request: gr.Request | None = None, voice: Any = None) -> str:
        """Erase whoever a fresh step-up probe shows, after an explicit confirmation."""
        if not confirmed:
            uploads.discard(probe, second, voice)
            raise hint("Tick the box to confirm: this erases everything of yours.", "Not confirmed")
        proof, client = self.step_up(probe, second, encoder, self.clients(request), voice)
        label = self.mem.store.identity(self.mem.verify(proof, "Forgetting you", client=client)).label
        self.mem.forget(probe=proof, client=client)
        return f"Forgot **{render.esc(label)}**: notes, links, history, templates and index entries are erased."
