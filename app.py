"""Bio-Memory's web demo: one agent, several people, each with their own memories.

    python app.py                      # http://localhost:7860 (BIOMEM_DB, BIOMEM_ENCODER, ... below)

The same question asked by two people gets two different memory contexts, and a stranger
gets none. This file only wires a Gradio UI to `biomem`: every decision (who matched,
which notes may be read, what is stored or erased) is the engine's.

Configuration (environment):

    BIOMEM_DB            database file (default ./biomem.db)
    BIOMEM_ENCODER       default biometric encoder of a new store (default face-arcface-s)
    BIOMEM_LLM           offline | openai:<model> (OPENAI_BASE_URL, OPENAI_API_KEY) | hf:<model>
    BIOMEM_POLICY        gate policy: best (default) | all
    BIOMEM_TAU           τ per encoder stored at start-up, e.g. "face-arcface-s=0.43,palm-compcode=0.30"
    BIOMEM_PALM_ENCODER  palm encoder of the demo's synthetic palms (default palm-compcode)
    BIOMEM_LOAD_DEMO     1: build the demo store at start-up when the store is empty (default on a
                         Hugging Face Space, off elsewhere)
    BIOMEM_ADMIN         1: allow server-side actions (import from a path, calibrate a folder,
                         store τ); off unless set, on every launch path
    BIOMEM_DISCLOSURE    private (default) | demo (default on a Space, with the sample people):
                         what a requester learns about others, see biomem.disclosure
    BIOMEM_ATTEMPTS      attempt limits, "MISSES/WINDOW[/COOLDOWN]" seconds (default 20/600/60) | off
    BIOMEM_TRUST_PROXY   1: take the client address from X-Forwarded-For (default on a Space)
    BIOMEM_KEY           template key (else the key file, see biomem.sealing)
    BIOMEM_LOCOMO        default path offered for the LoCoMo import
    GRADIO_SERVER_NAME   bind address (default 127.0.0.1; 0.0.0.0 on a Space and in the Dockerfile)
    GRADIO_SERVER_PORT   HTTP port (then PORT, default 7860)

Privacy: Gradio analytics and Hugging Face telemetry are off; the run history is off; each
probe (an uploaded, captured or sample image) is read once, deleted from Gradio's cache and
never stored; only the `ask`, `remember` and `compare` endpoints are public API. Every probe
event takes the raw upload (no Gradio decoding first), so a file Gradio would reject is
still deleted, and every error clears the images it used.
"""

from __future__ import annotations

import os

# Before gradio or huggingface_hub is imported: both read these at import time.
os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("GRADIO_RUN_HISTORY", "False")  # launch() passes run_history=False too

import functools  # noqa: E402
import html  # noqa: E402
import logging  # noqa: E402
import secrets  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from datetime import datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402
from unittest import mock  # noqa: E402

import gradio as gr  # noqa: E402
import numpy as np  # noqa: E402
from gradio.utils import get_upload_folder  # noqa: E402
from PIL import Image  # noqa: E402

import modalities  # noqa: E402
from biomem import BioMemory, Probe  # noqa: E402
from biomem.disclosure import note_view  # noqa: E402
from biomem.demo import (  # noqa: E402
    DEMO_PALM_SEEDS,
    DEMO_PEOPLE,
    STRANGER_PALM_SEED,
    build_demo,
    demo_capture,
    demo_palm,
    usable_capture,
)
from biomem.demo import STRANGER as DEMO_STRANGER  # noqa: E402
from biomem.errors import (  # noqa: E402
    AlreadyEnrolledError,
    BioMemError,
    DisclosureError,
    DuplicateLabelError,
    EnrolmentError,
    ForgetIncompleteError,
    InconsistentSamplesError,
    InvalidImageError,
    InvalidInputError,
    LLMError,
    ModalityMismatchError,
    ModelUnavailableError,
    MultipleFacesError,
    NoFaceError,
    NoPalmError,
    NoteNotFoundError,
    KeyUnavailableError,
    StepUpRequiredError,
    StoreCorruptError,
    TooManyAttemptsError,
    UnknownIdentityError,
)

log = logging.getLogger("biomem.app")

TITLE = "Bio-Memory"
DEFAULT_QUESTION = "What is my bank card PIN?"
UNLOCK_SECONDS = 300  # how long "My notes" stays unlocked for one browser session
PENDING_SECONDS = 600  # an unused probe left in an input is deleted after this (and Gradio's sweep)
MAX_SCORE_ROWS = 8  # identities listed in a gate panel (the rest are summarised)
PALM_ENCODER = os.environ.get("BIOMEM_PALM_ENCODER", "palm-compcode")

# Sample people a visitor can "be" without a camera: a face from the insightface package
# (biomem.samples.face_crops index) and a synthetic palm (modalities.palmsynth identity seed).
# Ana, Ben and Chloe are the demo store's people (biomem.demo.DEMO_PEOPLE, in order); the
# stranger is never enrolled; the LoCoMo samples are given to imported conversations.
SAMPLE_PEOPLE: dict[str, tuple[int | None, int]] = {
    **{label: (face, DEMO_PALM_SEEDS[label]) for face, label in enumerate(DEMO_PEOPLE)},
    "Stranger": (DEMO_STRANGER, STRANGER_PALM_SEED),
}
LOCOMO_FACES = (3, 4, 5)  # sample faces left for imported conversations (palms have no limit)
LOCOMO_PALM_BASE = 100


def locomo_sample(index: int) -> str:
    return f"LoCoMo {index + 1}"


for _i in range(10):
    SAMPLE_PEOPLE[locomo_sample(_i)] = (LOCOMO_FACES[_i] if _i < len(LOCOMO_FACES) else None,
                                        LOCOMO_PALM_BASE + _i)

# ---- readable errors ------------------------------------------------------------------------------

_ERRORS: list[tuple[type[BaseException], str, str]] = [
    (NoFaceError, "No face found",
     "No face was found in the probe. Face the camera in good light, or use another photo."),
    (MultipleFacesError, "More than one face",
     "The probe shows several faces, so the requester is ambiguous. One person at a time, please."),
    (NoPalmError, "No palm found", "No palm region was found in the probe: give a cropped palm image."),
    (InvalidImageError, "Not a usable image", "The probe cannot be used as an image."),
    (ModalityMismatchError, "Wrong kind of probe", ""),
    (UnknownIdentityError, "Not recognised",
     "The probe matches nobody enrolled, so nothing was read or stored. Enrol first (Enrol tab)."),
    (NoteNotFoundError, "No such note", "None of your notes has that id."),
    (TooManyAttemptsError, "Too many attempts", ""),
    (StepUpRequiredError, "Fresh probe needed", ""),
    (AlreadyEnrolledError, "Already enrolled", ""),
    (InconsistentSamplesError, "Not one person", ""),
    (DuplicateLabelError, "Name taken", ""),
    (EnrolmentError, "Captures refused", ""),
    (ForgetIncompleteError, "Not erased yet", "Your memories and templates are deleted, but another "
     "process is still reading the store, so their last bytes are not erased yet: the next forget or a restart "
     "finishes it."),
    (KeyUnavailableError, "Store locked", "The templates' key is missing or wrong; the server log says why."),
    (ModelUnavailableError, "Encoder not available", "This encoder's weights are not installed on this "
     "server: choose another probe encoder."),
    (LLMError, "LLM unreachable", "The language model did not answer; the gate and retrieval worked. "
     "Try again later, or check BIOMEM_LLM / OPENAI_BASE_URL / OPENAI_API_KEY."),
    (StoreCorruptError, "Store unreadable", "The memory store cannot be read; the server log says why."),
    (InvalidInputError, "Invalid input", ""),
    (BioMemError, "Refused", ""),
]


_SELF_EXPLAINED = (NoFaceError, MultipleFacesError, NoPalmError, UnknownIdentityError, NoteNotFoundError)
_LOGGED_ONLY = (LLMError, ModelUnavailableError, StoreCorruptError, KeyUnavailableError, ForgetIncompleteError)  # their details name servers and paths


def readable(exc: BaseException) -> tuple[str, str]:
    """(title, message) a person can act on; never a traceback, never a server path."""
    for cls, title, message in _ERRORS:
        if isinstance(exc, cls):
            if isinstance(exc, _LOGGED_ONLY):
                log.warning("%s: %s", exc.__class__.__name__, exc)  # endpoints and paths stay in the log
                return title, message
            if message and isinstance(exc, _SELF_EXPLAINED):
                return title, message
            detail = str(exc).replace("image bytes", "the image")
            return title, f"{message} ({detail})" if message and detail else (message or detail)
    return "Something went wrong", f"{exc.__class__.__name__}; the details are in the server log."


def fail(message: str, title: str = "Error") -> gr.Error:
    """A gr.Error shown as a toast in the UI (an AppError for API clients); text only, no traceback."""
    return gr.Error(html.escape(message, quote=False), title=title, print_exception=False)


def _friendly(fn: Callable) -> Callable:
    """Turn engine errors into gr.Error (a readable toast in the UI, an AppError for clients)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except BioMemError as exc:
            title, message = readable(exc)
            raise fail(message, title=title) from None
        except Exception as exc:  # noqa: BLE001 - a visitor sees one line, the log gets the traceback
            log.exception("unexpected error in %s", getattr(fn, "__name__", fn))
            title, message = readable(exc)
            raise fail(message, title=title) from None
    return wrapper


# ---- formatting helpers (no memory logic) -------------------------------------------------------

def when(timestamp: str | None) -> str:
    """'2024-03-02T09:15:00' -> '2 Mar 2024, 09:15'."""
    if not timestamp:
        return ""
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp
    return f"{moment.day} {moment:%b %Y, %H:%M}"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def gate_html(gate: dict[str, Any] | None) -> str:
    """The gate's decision as disclosed: who matched (or "no match"), and under the demo
    disclosure each sample person's cosine against τ."""
    if not gate:
        return "<div class='bm-empty'>The gate's decision appears here after a question.</div>"
    scores = gate.get("scores")
    if gate["matched"]:
        who = ", ".join(_e(a["label"]) for a in gate["admitted"])
        head = (f"<div class='bm-verdict bm-ok'>✓ Matched <b>{who}</b> — only their memories "
                f"may be read</div>")
    else:
        head = "<div class='bm-verdict bm-no'>✗ No match — nobody's memories are read</div>"
    if scores is None:  # the private disclosure: nothing about anyone else
        if not gate["matched"]:
            return head
        own = gate["admitted"][0]["score"]
        return head + (f"<div class='bm-meta'>similarity {own:.2f} ≥ τ {gate['threshold']:.2f} with encoder "
                       f"<code>{_e(gate['modality'])}</code>; other people are never shown</div>")
    if not scores:
        return head + "<div class='bm-empty'>No sample person is enrolled with this encoder.</div>"
    tau = gate["threshold"]
    low = min(min(s["score"] for s in scores), tau) - 0.02
    span = max(1.0 - low, 1e-6)
    pos = lambda v: max(0.0, min(100.0, 100.0 * (v - low) / span))  # noqa: E731
    rows = []
    for s in scores[:MAX_SCORE_ROWS]:
        cls = "bm-in" if s["admitted"] else ("bm-above" if s["score"] >= tau else "bm-out")
        mark = "admitted" if s["admitted"] else ("≥ τ" if s["score"] >= tau else "&lt; τ")
        rows.append(
            f"<tr class='{cls}'><td class='bm-who'>{_e(s['label'])}</td>"
            f"<td class='bm-num'>{s['score']:.2f}</td>"
            f"<td class='bm-barcell'><div class='bm-bar'><div class='bm-fill' style='width:{pos(s['score']):.1f}%'>"
            f"</div><div class='bm-tau' style='left:{pos(tau):.1f}%'></div></div></td>"
            f"<td class='bm-mark'>{mark}</td></tr>")
    more = len(scores) - MAX_SCORE_ROWS
    if more > 0:
        rows.append(f"<tr><td colspan='4' class='bm-more'>… and {more} more below</td></tr>")
    return (head + f"<div class='bm-meta'>encoder <code>{_e(gate['modality'])}</code> · τ = {tau:.2f}"
            f" (red line) · policy <code>{_e(gate['policy'])}</code> · sample people only</div>"
            "<table class='bm-scores'><tr><th>enrolled</th><th>cosine</th><th>vs τ</th><th></th></tr>"
            + "".join(rows) + "</table>")


def notes_html(result: dict[str, Any] | None) -> str:
    """The gated-in notes the LLM was allowed to read, with their scores and times."""
    if not result:
        return "<div class='bm-empty'>The memories the LLM may read appear here.</div>"
    notes = result["notes"]
    if not notes:
        return ("<div class='bm-empty'>No memory entered the context: "
                + ("the gate admitted nobody." if not result["gate"]["matched"]
                   else "the matched person has no memories yet.") + "</div>")
    rows = "".join(
        f"<tr><td class='bm-num'>{n['score']:.2f}</td><td class='bm-time'>{_e(when(n['timestamp']))}</td>"
        f"<td>{_e(n['content'])}</td></tr>" for n in notes)
    return ("<table class='bm-notes'><tr><th>score</th><th>time</th><th>memory</th></tr>"
            + rows + "</table>")


def gated_out_html(result: dict[str, Any] | None) -> str:
    """The notes that stayed out, as disclosed: a total, per sample owner under "demo"."""
    if not result:
        return "<div class='bm-empty'>Notes the gate kept out are summarised here (never shown).</div>"
    out = result["gated_out"]
    if out is None:
        return "<div class='bm-empty'>Nothing about other people is shown to an unmatched requester.</div>"
    total = out["total"]
    text = (f"<div class='bm-meta'>{total} {'note' if total == 1 else 'notes'} of other people stayed out "
            "of retrieval; their content is never shown.</div>")
    owners = out.get("owners")
    if not owners:
        return text
    rows = "".join(
        f"<tr><td class='bm-who'>{_e(o['label'])}</td><td class='bm-num'>{o['count']}</td>"
        f"<td class='bm-time'>{_e(when(o['latest']))}</td></tr>" for o in owners)
    return (text + "<table class='bm-notes'><tr><th>sample owner</th><th>notes</th><th>latest</th></tr>"
            + rows + "</table>")


def chat_caption(result: dict[str, Any]) -> str:
    gate = result["gate"]
    if not gate["matched"]:
        return "Gate: **no match** · no memory read"
    own = gate["admitted"][0]["score"]
    used, out = len(result["notes"]), result["gated_out"]["total"]
    return (f"Gate: **{gate['label']}** (similarity {own:.2f} ≥ τ {gate['threshold']:.2f}) · {used} "
            f"{'memory' if used == 1 else 'memories'} read · {out} kept out")


CSS = """
.bm-verdict {font-size: 1.05em; padding: 8px 10px; border-radius: 8px; margin-bottom: 6px;}
.bm-ok {background: rgba(34,160,90,.14); border: 1px solid rgba(34,160,90,.45);}
.bm-no {background: rgba(210,60,60,.12); border: 1px solid rgba(210,60,60,.45);}
.bm-meta {font-size: .85em; opacity: .8; margin: 4px 0 6px;}
.bm-empty {font-size: .9em; opacity: .7; padding: 6px 2px;}
.bm-panel table.bm-scores, .bm-panel table.bm-notes {width: 100%; border-collapse: collapse;
  font-size: .9em; margin: 0; border: none !important;}
.bm-panel table tr {border: none !important;}
.bm-panel table th, .bm-panel table td {border: none !important; text-align: left; padding: 3px 6px;
  border-bottom: 1px solid var(--border-color-primary) !important; vertical-align: top;}
.bm-panel table th {font-weight: 600; opacity: .7; font-size: .92em;}
.bm-num {font-variant-numeric: tabular-nums; white-space: nowrap;}
.bm-time {white-space: nowrap; opacity: .8;}
.bm-who {white-space: nowrap; font-weight: 600;}
.bm-barcell {width: 45%;}
.bm-bar {position: relative; height: 12px; border-radius: 6px; background: rgba(128,128,128,.18);
  margin-top: 3px;}
.bm-fill {height: 100%; border-radius: 6px; background: rgba(128,128,128,.55);}
.bm-in .bm-fill {background: rgb(34,160,90);}
.bm-above .bm-fill {background: rgb(220,160,40);}
.bm-tau {position: absolute; top: -3px; bottom: -3px; width: 2px; background: rgb(210,60,60);}
.bm-mark {font-size: .85em; opacity: .8; white-space: nowrap;}
.bm-more {font-size: .85em; opacity: .7;}
.bm-status {font-size: .92em; line-height: 1.6; padding: 10px 12px; border-radius: 8px;
  border: 1px solid var(--border-color-primary); background: var(--background-fill-secondary); height: 100%;}
"""

THEME = gr.themes.Soft(  # system fonts: no request to a font CDN from the visitor's browser
    font=["ui-sans-serif", "system-ui", "Segoe UI", "Roboto", "Helvetica", "Arial", "sans-serif"],
    font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"])

INTRO = """\
# Bio-Memory — one agent, many people, each with their own memories
Every memory belongs to a face or palmprint. When someone asks, their probe is matched first (the
**gate**); only the matched person's memories may reach the LLM — **a stranger gets none**.
Try it: **Load demo**, then **Compare** the same question as Ana and as a stranger, then **Chat**
with a probe per message (upload, webcam or a sample person). Probe images are used once, then deleted.
"""


# ---- the app --------------------------------------------------------------------------------------

def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in ("1", "true", "yes", "on")


def memory_from_env(**overrides: Any) -> BioMemory:
    """A BioMemory from BIOMEM_DB, BIOMEM_ENCODER, BIOMEM_LLM, BIOMEM_POLICY, BIOMEM_DISCLOSURE
    (default "demo" on a Space, else "private") and BIOMEM_TAU.

    `overrides` go to BioMemory as they are (tests pass the session's loaded models). A
    "demo" disclosure on a store that holds real enrolments falls back to "private".
    """
    on_space = os.environ.get("SPACE_ID") is not None
    options: dict[str, Any] = {"encoder": os.environ.get("BIOMEM_ENCODER") or None,
                               "llm": os.environ.get("BIOMEM_LLM") or None,
                               "policy": os.environ.get("BIOMEM_POLICY", "best"),
                               "disclosure": os.environ.get("BIOMEM_DISCLOSURE") or ("demo" if on_space else "private"),
                               **overrides}
    path = os.environ.get("BIOMEM_DB", "biomem.db")
    try:
        mem = BioMemory(path, **options)
    except DisclosureError as exc:
        log.warning("%s: serving with the private disclosure", exc)
        mem = BioMemory(path, **{**options, "disclosure": "private"})
    for item in filter(None, (p.strip() for p in os.environ.get("BIOMEM_TAU", "").split(","))):
        name, sep, tau = item.partition("=")
        if not sep:
            name, tau = mem.modality, item
        mem.set_threshold(float(tau), name.strip(), source="env BIOMEM_TAU")
    return mem


def client_keys(request: gr.Request | None) -> list[str] | None:
    """The requester's keys for attempt limits: the Gradio session and the client address.

    Behind a proxy (a Space, or BIOMEM_TRUST_PROXY=1) the address is the last hop the proxy
    appended to X-Forwarded-For; a client-supplied left part is never trusted.
    """
    if request is None:
        return None
    address = request.client.host if request.client else ""
    if _env_flag("BIOMEM_TRUST_PROXY", os.environ.get("SPACE_ID") is not None):
        forwarded = [h.strip() for h in (request.headers.get("x-forwarded-for") or "").split(",") if h.strip()]
        address = forwarded[-1] if forwarded else address
    return [f"session:{request.session_hash}", f"address:{address}"]


def upload_path(value: Any) -> str | None:
    """The cache path of an upload: a raw FileData payload (events run with preprocess=False),
    a path string (in-process callers), or None."""
    if isinstance(value, dict):
        value = value.get("path")
    return str(value) if value else None


class BioMemoryApp:
    """The handlers behind the UI; each takes plain values and returns plain values."""

    def __init__(self, mem: BioMemory, *, admin: bool | None = None) -> None:
        self.mem = mem
        self.admin = _env_flag("BIOMEM_ADMIN", False) if admin is None else admin
        self._building = threading.Lock()

    # ---- probes: read once, deleted from Gradio's cache, never stored -----------------------

    @staticmethod
    def in_cache(path: str | os.PathLike) -> Path | None:
        """The resolved file if it lies inside Gradio's upload folder, else None."""
        cache = Path(get_upload_folder()).resolve()
        file = Path(path).resolve()
        return file if cache in file.parents else None

    def discard(self, path: Any) -> None:
        """Delete an uploaded/captured file, only if it lies in Gradio's cache folder."""
        file = self.in_cache(upload_path(path)) if upload_path(path) else None
        if file is None:
            return
        file.unlink(missing_ok=True)
        parent, cache = file.parent, Path(get_upload_folder()).resolve()
        if parent != cache:
            try:
                parent.rmdir()  # Gradio keeps each upload in its own folder
            except OSError:
                pass

    def discard_many(self, *values: Any) -> None:
        """Delete every upload among `values` (single payloads or lists of them)."""
        for value in values:
            for item in value if isinstance(value, list) else [value]:
                self.discard(item)

    def track(self, value: Any, pending: list[str] | None) -> list[str]:
        """A probe input changed: delete the files it held before that were never used."""
        items = value if isinstance(value, list) else [value]
        current = [p for p in (upload_path(v) for v in items) if p]
        for path in pending or []:
            if path not in current:
                self.discard(path)
        return current

    def discard_all(self, pending: list[str] | None) -> None:
        """The session ended (tab closed, or idle): delete the probe files it still held."""
        for path in pending or []:
            self.discard(path)

    def read_probe(self, value: Any, what: str = "probe") -> bytes:
        """The bytes of an uploaded probe; the file is gone when this returns, whatever happens."""
        path = upload_path(value)
        if not path:
            raise fail(f"Give a {what} first: upload a photo, use the webcam, or pick a sample person.",
                       title="No probe")
        try:
            file = self.in_cache(path)
            if file is None:  # a raw payload may name any path: only uploads are read
                raise fail("The probe must be an uploaded image.", title="Not an upload")
            return file.read_bytes()
        except OSError:
            raise fail("The probe image is no longer available: capture or upload it again.",
                       title="Probe expired") from None
        finally:
            self.discard(path)

    def probe(self, value: Any, encoder: str | None, what: str = "probe",
              client: list[str] | None = None) -> Probe:
        """Read, discard and encode one probe image (a client in cool-down costs no encoding)."""
        try:
            self.mem.limiter.check(client)
        except BioMemError:
            self.discard(value)
            raise
        data = self.read_probe(value, what)
        return self.mem.probe(data, encoder or self.mem.modality)

    def sample_capture(self, person: str, encoder: str | None) -> np.ndarray:
        """A fresh capture of a sample person, as a face photo or a palm ROI (by the encoder's kind)."""
        face, palm = SAMPLE_PEOPLE[person]
        seeds = [secrets.randbelow(39) + 2 for _ in range(8)]  # captures 0 and 1 are the demo's enrolment samples
        if self.kind(encoder) == "palm":
            return demo_palm(palm, seeds[0])
        if face is None:
            raise fail(f"{person} has a sample palm but no sample face: choose a palm encoder.",
                       title="No sample face")
        return usable_capture(self.mem.encoder(encoder or self.mem.modality), face, seeds)

    def kind(self, encoder: str | None) -> str:
        try:
            return modalities.info(encoder or self.mem.modality).kind
        except KeyError:
            return "other"

    # ---- results as plain dicts (the public API's output, under the disclosure policy) -------

    def answer_dict(self, question: str, probe: Probe, client: list[str] | None) -> dict[str, Any]:
        answer = self.mem.ask(question, probe=probe, client=client)
        view = answer.as_dict()
        return {"kind": "answer", "question": question, "answer": answer.text, "gate": view["gate"],
                "notes": view["results"], "gated_out": view["gated_out"], "prompt": answer.prompt}

    # ---- public API: ask, remember, compare ---------------------------------------------------

    def ask(self, question: str, probe: Any, encoder: str | None = None,
            request: gr.Request | None = None) -> dict[str, Any]:
        """Ask as whoever the probe shows: the gate decides which memories the LLM may read."""
        question = (question or "").strip()
        if not question:
            self.discard(probe)
            raise fail("Type a question first.", title="No question")
        client = client_keys(request)
        return self.answer_dict(question, self.probe(probe, encoder, client=client), client)

    def remember(self, text: str, probe: Any, encoder: str | None = None,
                 request: gr.Request | None = None) -> dict[str, Any]:
        """Store a memory for whoever the probe shows (refused when it matches nobody)."""
        text = (text or "").strip()
        if not text:
            self.discard(probe)
            raise fail("Type what to remember first.", title="Nothing to remember")
        client = client_keys(request)
        note = self.mem.add(text, probe=self.probe(probe, encoder, client=client), client=client)
        return {"kind": "remember", "question": text, "owner": self.mem.store.identity(note.owner).label,
                "note": note_view(note)}

    def compare(self, question: str, probe_a: Any, probe_b: Any, encoder: str | None = None,
                request: gr.Request | None = None) -> dict[str, Any]:
        """One question, two requesters: two gate decisions, two retrieved sets, two answers."""
        question = (question or "").strip()
        if not question or not probe_a or not probe_b:
            self.discard_many(probe_a, probe_b)
            if not question:
                raise fail("Type a question first.", title="No question")
            raise fail("Give both probes (A and B): upload, webcam, or a sample person.",
                       title="Two probes needed")
        client = client_keys(request)
        sides = {}
        for side, path in (("a", probe_a), ("b", probe_b)):
            try:
                sides[side] = self.answer_dict(question, self.probe(path, encoder, client=client), client)
            except TooManyAttemptsError:
                self.discard_many(probe_a, probe_b)
                raise
            except BioMemError as exc:
                title, message = readable(exc)
                sides[side] = {"error": title, "message": message}
        return {"question": question, **sides}

    # ---- store-wide actions -------------------------------------------------------------------

    def status(self) -> str:
        """The store at a glance: totals; under the demo disclosure also the sample people."""
        people = self.mem.identities()
        total = self.mem.store.note_total()
        listing = ""
        if self.mem.disclosure == "demo":
            counts = {owner: count for owner, (count, _) in self.mem.store.note_summary().items()}
            shown = [p for p in people if p.sample]
            listing = ", ".join(f"{_e(p.label)} ({counts.get(p.id, 0)})" for p in shown[:12])
            if len(shown) > 12:
                listing += f", … {len(shown) - 12} more"
        modality = self.mem.modality
        return (f"<div class='bm-status'><b>Store:</b> {len(people)} people · {total} "
                f"memories{': ' + listing if listing else ''}<br><b>Default encoder</b> <code>{_e(modality)}</code>"
                f" (τ {self.mem.threshold(modality):.2f}) · <b>LLM</b> <code>{_e(self.mem.llm.name)}</code>"
                f" · <b>gate policy</b> <code>{_e(self.mem.policy)}</code></div>")

    def demo_loaded(self) -> bool:
        return set(DEMO_PEOPLE) <= {i.label for i in self.mem.identities()}

    def palm_encoder(self) -> str | None:
        """The demo's palm encoder when it can be loaded here, else None."""
        try:
            self.mem.encoder(PALM_ENCODER)
        except (KeyError, ImportError, BioMemError, OSError) as exc:
            log.info("no palms in the demo: %s unavailable (%s)", PALM_ENCODER, exc)
            return None
        return PALM_ENCODER

    def load_demo(self, progress: Callable[..., Any] | None = None) -> str:
        """Build the demo store (Ana, Ben, Chloe: faces, synthetic palms, everyday memories) once."""
        progress = progress or (lambda *a, **k: None)
        with self._building:
            if self.demo_loaded():
                return "The demo people are already here: go to **Compare** or **Chat**."
            palm = self.palm_encoder()
            progress(0.1, desc="Enrolling Ana, Ben and Chloe with their memories…")
            build_demo(self.mem, palm_encoder=palm)
            progress(1.0, desc="Done")
        people = ", ".join(DEMO_PEOPLE)
        palms = f" and synthetic palms (`{palm}`)" if palm else " (no palm encoder here: faces only)"
        return f"Loaded {people} with face photos{palms} and a few memories each."

    def import_locomo(self, path: str, conversations: int,
                      progress: Callable[..., Any] | None = None) -> str:
        """Import LoCoMo conversations (one identity each, a sample palm or face as biometric)."""
        progress = progress or (lambda *a, **k: None)
        if not self.admin:
            raise fail("Imports from a server path are disabled here (set BIOMEM_ADMIN=1).",
                       title="Not allowed")
        file = Path((path or "").strip()).expanduser()
        if file.suffix.lower() != ".json" or not file.is_file():
            raise fail("Give the path of LoCoMo's locomo10.json on the server.", title="No LoCoMo file")
        from biomem.eval.locomo import load_locomo

        progress(0.0, desc="Reading the LoCoMo file…")
        try:
            loaded = load_locomo(file)[:max(1, int(conversations))]
        except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
            raise fail(f"Not a LoCoMo file ({exc.__class__.__name__}).", title="Unreadable file") from None
        convs = [(f"{c.sample_id} ({' & '.join(dict.fromkeys(t.speaker for t in c.turns))})",
                  [t.note for t in c.turns], [t.date for t in c.turns]) for c in loaded]
        palm = self.palm_encoder()
        if palm is None and len(convs) > len(LOCOMO_FACES):
            raise fail(f"Without a palm encoder only {len(LOCOMO_FACES)} conversations get a sample "
                       "face; import fewer.", title="Too many conversations")
        existing = {i.label for i in self.mem.identities()}
        total = sum(len(texts) for _, texts, _ in convs) or 1
        done, lines = 0, []
        with self._building:
            for index, (label, texts, stamps) in enumerate(convs):
                if label in existing:
                    lines.append(f"- {label}: already imported")
                    done += len(texts)
                    continue
                face, seed = SAMPLE_PEOPLE[locomo_sample(index)]
                if palm:
                    identity = self.mem.enroll(label, [demo_palm(seed, 0), demo_palm(seed, 1)], palm, sample=True)
                else:
                    identity = self.mem.enroll(label, [demo_capture(face, 0), demo_capture(face, 1)], sample=True)
                for start in range(0, len(texts), 128):
                    progress(done / total, desc=f"{label}: turn {start + 1} of {len(texts)}")
                    self.mem.add_many(texts[start:start + 128], identity=identity.id,
                                      timestamps=stamps[start:start + 128])
                    done += len(texts[start:start + 128])
                lines.append(f"- {label}: {len(texts)} turns → sample person **{locomo_sample(index)}** "
                             f"({'palm' if palm else 'face'})")
        progress(1.0, desc="Done")
        return "Imported:\n" + "\n".join(lines)

    # ---- enrolment and one's own notes --------------------------------------------------------
    # The engine decides (one person per enrolment, nobody enrolled twice, unique names, a
    # fresh step-up probe for every change); these handlers only move files and words.

    def enroll(self, label: str, files: list[Any] | None, capture: Any, encoder: str | None,
               progress: Callable[..., Any] | None = None) -> str:
        """Create an identity from uploaded images and/or a capture; each file deleted after use."""
        progress = progress or (lambda *a, **k: None)
        paths = [p for p in (files or []) if upload_path(p)] + ([capture] if upload_path(capture) else [])
        label = (label or "").strip()
        try:
            if not label:
                raise fail("Give a name for the new identity.", title="No name")
            if not paths:
                raise fail("Give one or more images (upload or capture).", title="No images")
            name = encoder or self.mem.modality
            probes = []
            for n, path in enumerate(paths):
                progress(n / len(paths), desc=f"Encoding image {n + 1} of {len(paths)}")
                try:
                    probes.append(self.mem.probe(self.read_probe(path, "image"), name))
                except BioMemError as exc:
                    title, message = readable(exc)
                    raise fail(f"Image {n + 1}: {message}", title=title) from None
        finally:
            self.discard_many(*paths)
        progress(1.0, desc="Checking and storing templates")
        identity = self.mem.enroll(label, probes, modality=name)
        return (f"Enrolled **{_e(identity.label)}** from {len(probes)} image(s) with `{name}`. "
                "Add memories below, or ask in **Chat**.")

    def unlock(self, probe: Any, encoder: str | None, second: Any = None,
               request: gr.Request | None = None) -> dict[str, Any]:
        """Show the requester's own notes (a step-up probe). The view is for reading only:
        every change asks for a fresh probe again."""
        client = client_keys(request)
        p = self.fresh_probe(probe, second, encoder, client)
        owner = self.mem.verify(p, "Unlocking your notes", client=client)
        notes = self.mem.get_all(probe=p, client=client)
        return {"identity": owner, "label": self.mem.store.identity(owner).label,
                "until": time.time() + UNLOCK_SECONDS, "rows": note_rows(notes)}

    def fresh_probe(self, probe: Any, second: Any, encoder: str | None,
                    client: list[str] | None) -> Probe | dict[str, Probe]:
        """The step-up proof of a change: one probe, or two when the person enrolled a face and
        a palm (the second is read with the store's encoder of the other kind)."""
        name = encoder or self.mem.modality
        if not upload_path(second):
            return self.probe(probe, name, "fresh probe", client)
        kind = self.kind(name)
        other = next((m for m in self.mem.store.modalities() if m != name and self.kind(m) != kind), None)
        if other is None:
            self.discard_many(probe, second)
            raise fail("Nobody here enrolled a second kind of probe: leave the second one empty.",
                       title="No second kind")
        first = self.probe(probe, name, "fresh probe", client)
        return {name: first, other: self.probe(second, other, "second probe", client)}

    @staticmethod
    def note_id(value: Any) -> int:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = 0.0
        if number != int(number) or number < 1:
            raise fail("Give the id of one of your notes (first column).", title="No note id")
        return int(number)

    def delete_note(self, note_id: Any, probe: Any, encoder: str | None, second: Any = None,
                    request: gr.Request | None = None) -> tuple[str, list[list[Any]]]:
        """Delete one of the requester's notes, proven by a fresh probe; returns the new listing."""
        try:
            number = self.note_id(note_id)
        except gr.Error:
            self.discard_many(probe, second)
            raise
        client = client_keys(request)
        p = self.fresh_probe(probe, second, encoder, client)
        note = self.mem.delete(number, probe=p, client=client)
        return f"Deleted note {note.id}: “{_e(note.content)}”.", note_rows(self.mem.get_all(probe=p))

    def forget(self, confirmed: bool, probe: Any, encoder: str | None, second: Any = None,
               request: gr.Request | None = None) -> str:
        """Erase whoever a fresh step-up probe shows, after an explicit confirmation."""
        if not confirmed:
            self.discard_many(probe, second)
            raise fail("Tick the box to confirm: this erases everything of yours.", title="Not confirmed")
        client = client_keys(request)
        p = self.fresh_probe(probe, second, encoder, client)
        label = self.mem.store.identity(self.mem.verify(p, "Forgetting you", client=client)).label
        self.mem.forget(probe=p, client=client)
        return (f"Forgot **{_e(label)}**: notes, links, history, templates and index "
                "entries are erased.")

    # ---- calibration --------------------------------------------------------------------------

    def encoder_table(self) -> list[list[Any]]:
        """The registry: every encoder's metadata (no weights loaded) and this store's τ."""
        rows = []
        for name in modalities.names():
            try:
                info = modalities.info(name)
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the page
                rows.append([name, "?", "", "", "", f"unavailable ({exc.__class__.__name__})", ""])
                continue
            rows.append([name, info.kind, info.dim, round(info.default_threshold, 4),
                         round(self.mem.threshold(name), 4), info.weights, info.license])
        return rows

    def calibrate(self, encoder: str | None, source: str, folder: str = "",
                  progress: Callable[..., Any] | None = None) -> Any:
        """Genuine/impostor scores of `encoder` on sample people (or a server folder): a CalibrationReport."""
        from dataclasses import replace

        from biomem.calibrate import calibrate_folder

        progress = progress or (lambda *a, **k: None)
        name = encoder or self.mem.modality
        enc = self.mem.encoder(name)
        if source == "folder":
            if not self.admin:
                raise fail("Folder calibration is disabled here (set BIOMEM_ADMIN=1).", title="Not allowed")
            progress(0.1, desc=f"Encoding the images under {folder} with {name}…")
            return calibrate_folder(enc, Path((folder or "").strip()).expanduser())
        kind = enc.info.kind
        with tempfile.TemporaryDirectory(prefix="biomem-calibrate-") as tmp:
            progress(0.05, desc=f"Making sample {kind} captures…")
            if kind == "palm":
                from modalities.palmsynth import write_dataset

                write_dataset(tmp, CALIBRATION_PALMS, CALIBRATION_CAPTURES, seed=CALIBRATION_PALM_SEED)
            elif kind == "face":
                from biomem.samples import face_crops

                for person in range(len(face_crops())):
                    folder_path = Path(tmp) / f"person_{person}"
                    folder_path.mkdir()
                    for capture in range(CALIBRATION_CAPTURES):
                        Image.fromarray(demo_capture(person, capture)).save(folder_path / f"{capture}.png")
            else:
                raise fail(f"No sample data for a `{kind}` encoder: use a folder.", title="No samples")
            count = sum(1 for _ in Path(tmp).glob("*/*.png"))
            progress(0.2, desc=f"Encoding {count} sample images with {name}…")
            report = calibrate_folder(enc, tmp)
        return replace(report, data_dir=f"sample {kind}s ({report.identities} people × {CALIBRATION_CAPTURES} captures)")

    def calibration_view(self, report: Any) -> tuple[np.ndarray, str]:
        """(histogram image, markdown) of a report, with this store's current τ."""
        with tempfile.TemporaryDirectory(prefix="biomem-plot-") as tmp:
            plot = np.asarray(Image.open(report.plot(Path(tmp) / "scores.png")).convert("RGB"))
        current = self.mem.threshold(report.modality)
        text = (report.table() + f"\n\nThis store's τ for `{report.modality}`: **{current:.4f}** "
                "(the gate admits cos ≥ τ).")
        return plot, text

    def store_tau(self, report: Any, which: str) -> str:
        if not self.admin:
            raise fail("Storing τ is disabled here (set BIOMEM_ADMIN=1).", title="Not allowed")
        if report is None:
            raise fail("Run a calibration first.", title="No calibration")
        from biomem.calibrate import save

        tau = save(report, self.mem, which=which)
        return f"Stored τ = {tau:.4f} for `{report.modality}` ({which}); the gate uses it from now on."


CALIBRATION_CAPTURES = 6
CALIBRATION_PALMS = 20
CALIBRATION_PALM_SEED = 1000


# ---- panels (pure formatting) ---------------------------------------------------------------------

def note_rows(notes: list[Any]) -> list[list[Any]]:
    """The requester's notes as table rows: id, time, memory, tags."""
    return [[n.id, when(n.timestamp), n.content, ", ".join(n.tags)] for n in notes]


def panel_html(result: dict[str, Any] | None, with_answer: bool = False) -> str:
    """One requester's view: (answer,) gate decision, memories read, notes kept out."""
    parts = []
    if with_answer:
        if result and "error" in result:
            body = f"⚠ <b>{_e(result['error'])}</b> — {_e(result['message'])}"
        elif result:
            body = _e(result["answer"])
        else:
            body = "<span class='bm-empty'>The answer appears here.</span>"
        parts.append(f"<div class='bm-label'>Answer</div><div class='bm-answer'>{body}</div>")
    ok = result if result and "error" not in result else None
    parts += ["<div class='bm-label'>Gate decision</div>", gate_html(ok["gate"] if ok else None),
              "<div class='bm-label'>Memories the LLM may read (gated in)</div>", notes_html(ok),
              "<div class='bm-label'>Kept out by the gate (owner, count, latest — never content)</div>",
              gated_out_html(ok)]
    return "<div class='bm-panel'>" + "".join(parts) + "</div>"


def render_chat(result: dict[str, Any], history: list[dict[str, Any]] | None) -> tuple[Any, ...]:
    """The chat after one ask/remember: both messages, the panel, the prompt; clears the box."""
    history = list(history or [])
    if result.get("kind") == "remember":
        note = result["note"]
        tags = f" (tags: {', '.join(note['tags'])})" if note["tags"] else ""
        history += [{"role": "user", "content": f"Remember: {result['question']}"},
                    {"role": "assistant", "content": f"Noted for **{result['owner']}**{tags}. Only a "
                     f"probe of {result['owner']} can bring it back."}]
        return history, gr.skip(), gr.skip(), ""
    history += [{"role": "user", "content": result["question"]},
                {"role": "assistant", "content": f"{result['answer']}\n\n*{chat_caption(result)}*"}]
    return history, panel_html(result), result["prompt"], ""


def render_compare(result: dict[str, Any]) -> tuple[str, str]:
    return panel_html(result.get("a"), True), panel_html(result.get("b"), True)


CSS += """
.bm-panel {display: flex; flex-direction: column; gap: 2px;}
.bm-label {font-size: .78em; text-transform: uppercase; letter-spacing: .04em; opacity: .65;
  margin-top: 10px; font-weight: 600;}
.bm-answer {font-size: 1.1em; padding: 8px 10px; border-radius: 8px;
  background: var(--background-fill-secondary); border: 1px solid var(--border-color-primary);}
.bm-hint {font-size: .85em; opacity: .75;}
#bm-samples-a button, #bm-samples-b button, .bm-samples button {min-width: 0 !important;}
"""


# ---- the Gradio UI ----------------------------------------------------------------------------------

PRIVATE = {"api_visibility": "private"}  # internal events: hidden from the API docs and from clients
PROBE_PLACEHOLDER = ("Upload a photo, use the webcam, or pick a sample person below.\n"
                     "Each probe is used for one message, then deleted.")


def build_app(memory: BioMemory | None = None, *, admin: bool | None = None) -> gr.Blocks:
    """The Gradio app over `memory` (default: configured from the environment)."""
    mem = memory if memory is not None else memory_from_env()
    ui = BioMemoryApp(mem, admin=admin)

    def watch(component: gr.Image | gr.File) -> None:
        """Files replaced or abandoned in `component` are deleted (now, or when the session ends)."""
        pending = gr.State([], time_to_live=PENDING_SECONDS, delete_callback=ui.discard_all)
        # One worker for all of them: a session's changes are then handled in order, so an older
        # change can never delete the file a newer one holds.
        component.change(ui.track, [component, pending], [pending], show_progress="hidden", preprocess=False,
                         concurrency_limit=1, concurrency_id="bm-probe-files", **PRIVATE)

    def probe_input(elem_id: str, label: str, encoder: gr.Dropdown, height: int = 220) -> gr.Image:
        image = gr.Image(label=label, sources=["upload", "webcam"], type="filepath", image_mode=None,
                         format="png", height=height, elem_id=elem_id, placeholder=PROBE_PLACEHOLDER,
                         webcam_options=gr.WebcamOptions(mirror=False), buttons=["fullscreen"])
        watch(image)
        with gr.Row(elem_id=f"{elem_id}-samples", elem_classes="bm-samples"):
            for person in ("Ana", "Ben", "Chloe", "Stranger"):
                button = gr.Button(person, size="sm", min_width=0, elem_id=f"{elem_id}-{person.lower()}")
                button.click(_friendly(functools.partial(ui.sample_capture, person)), [encoder], [image],
                             show_progress="minimal", **PRIVATE)
        return image

    with gr.Blocks(title=TITLE, analytics_enabled=False, delete_cache=(60, PENDING_SECONDS)) as demo:
        gr.Markdown(INTRO)
        with gr.Row(equal_height=True):
            status = gr.HTML(ui.status(), elem_id="bm-status", scale=3, min_width=320)
            encoder = gr.Dropdown(modalities.names(), value=mem.modality, label="Probe encoder",
                                  info="face or palm: how your probes are read", scale=1,
                                  min_width=220, elem_id="bm-encoder")
            with gr.Column(scale=1, min_width=200):
                load_button = gr.Button("Load demo", variant="primary", elem_id="bm-load-demo")
                load_message = gr.Markdown(elem_id="bm-load-message")

        with gr.Tabs(elem_id="bm-tabs"):
            # -- Compare: the one-minute story ----------------------------------------------------
            with gr.Tab("Compare", id="compare", elem_id="bm-tab-compare"):
                gr.Markdown("One question, two people at the same agent. Each side is gated by its own "
                            "probe: two decisions, two sets of memories, two answers.", elem_classes="bm-hint")
                with gr.Row(equal_height=True):
                    cmp_question = gr.Textbox(DEFAULT_QUESTION, label="Question", scale=4, elem_id="bm-cmp-question")
                    cmp_button = gr.Button("Compare", variant="primary", scale=1, elem_id="bm-cmp-button")
                with gr.Row():
                    with gr.Column():
                        probe_a = probe_input("bm-cmp-probe-a", "Requester A — probe", encoder, height=200)
                        panel_a = gr.HTML(panel_html(None, True), elem_id="bm-cmp-panel-a")
                    with gr.Column():
                        probe_b = probe_input("bm-cmp-probe-b", "Requester B — probe", encoder, height=200)
                        panel_b = gr.HTML(panel_html(None, True), elem_id="bm-cmp-panel-b")
                with gr.Accordion("Raw result (JSON, as the compare API returns it)", open=False):
                    cmp_json = gr.JSON(elem_id="bm-cmp-json")

            # -- Chat: a probe per message ---------------------------------------------------------
            with gr.Tab("Chat", id="chat", elem_id="bm-tab-chat"):
                with gr.Row():
                    with gr.Column(scale=3):
                        chatbot = gr.Chatbot(label="Shared agent", height=380, elem_id="bm-chatbot",
                                             placeholder="Ask something with a probe: the gate picks whose "
                                                         "memories the agent may use.")
                        with gr.Row(equal_height=True):
                            question = gr.Textbox(placeholder="Ask, or type something to remember…",
                                                  show_label=False, scale=4, elem_id="bm-question")
                            ask_button = gr.Button("Ask", variant="primary", scale=1, min_width=80,
                                                   elem_id="bm-ask")
                            remember_button = gr.Button("Remember", scale=1, min_width=80, elem_id="bm-remember")
                        chat_probe = probe_input("bm-chat-probe", "Who is asking? Probe for this message", encoder)
                    with gr.Column(scale=2):
                        chat_panel = gr.HTML(panel_html(None), elem_id="bm-chat-panel")
                with gr.Accordion("What the LLM saw: the exact prompt", open=False):
                    prompt_box = gr.Textbox(lines=8, show_label=False, interactive=False, elem_id="bm-prompt")
                with gr.Accordion("Raw result (JSON, as the ask / remember API returns it)", open=False):
                    chat_json = gr.JSON(elem_id="bm-chat-json")

            # -- Enrol and remember ----------------------------------------------------------------
            with gr.Tab("Enrol & remember", id="enrol", elem_id="bm-tab-enrol"):
                unlocked = gr.State(None, time_to_live=UNLOCK_SECONDS)
                lock_timer = gr.Timer(15)  # hides an unlocked listing once its time is up
                with gr.Row():
                    with gr.Column():
                        gr.Markdown("### New identity\nOne or more face photos or palm images of one person "
                                    "(the probe encoder at the top decides which). The images are deleted "
                                    "once encoded; only the templates are kept.")
                        enrol_label = gr.Textbox(label="Name", elem_id="bm-enrol-name")
                        enrol_files = gr.File(label="Images", file_count="multiple", file_types=["image"],
                                              type="filepath", elem_id="bm-enrol-files")
                        enrol_capture = gr.Image(label="…and/or a capture", sources=["webcam", "upload"],
                                                 type="filepath", image_mode=None, format="png", height=200,
                                                 webcam_options=gr.WebcamOptions(mirror=False),
                                                 elem_id="bm-enrol-capture")
                        watch(enrol_files), watch(enrol_capture)
                        enrol_button = gr.Button("Enrol", variant="primary", elem_id="bm-enrol")
                        enrol_message = gr.Markdown(elem_id="bm-enrol-message")
                        gr.Markdown("### Remember something\nStored for whoever the probe matches; "
                                    "refused for a stranger.")
                        memo_text = gr.Textbox(label="Memory", elem_id="bm-memo")
                        memo_probe = probe_input("bm-memo-probe", "Probe", encoder, height=180)
                        memo_button = gr.Button("Remember", elem_id="bm-memo-button")
                        memo_message = gr.Markdown(elem_id="bm-memo-message")
                    with gr.Column():
                        gr.Markdown(f"### My notes\nShow a clear probe to see your own notes for "
                                    f"{UNLOCK_SECONDS // 60} minutes in this tab. Deleting a note or "
                                    "forgetting yourself asks for a fresh probe each time.")
                        unlock_probe = probe_input("bm-unlock-probe", "Probe", encoder, height=180)
                        unlock_second = gr.Image(label="Second probe, if you enrolled a face and a palm "
                                                 "(the other kind)", sources=["upload", "webcam"],
                                                 type="filepath", image_mode=None, format="png", height=120,
                                                 elem_id="bm-unlock-second")
                        watch(unlock_second)
                        with gr.Row():
                            unlock_button = gr.Button("Unlock my notes", variant="primary", elem_id="bm-unlock")
                            lock_button = gr.Button("Lock", elem_id="bm-lock")
                        unlock_message = gr.Markdown("Locked.", elem_id="bm-unlock-message")
                        my_notes = gr.Dataframe(headers=["id", "time", "memory", "tags"], interactive=False,
                                                wrap=True, max_height=320, elem_id="bm-my-notes")
                        confirm_probe = probe_input("bm-confirm-probe", "Fresh probe to delete or forget",
                                                    encoder, height=160)
                        confirm_second = gr.Image(label="Second fresh probe, if you enrolled a face and a "
                                                  "palm", sources=["upload", "webcam"], type="filepath",
                                                  image_mode=None, format="png", height=120,
                                                  elem_id="bm-confirm-second")
                        watch(confirm_second)
                        with gr.Row(equal_height=True):
                            note_id = gr.Number(None, label="Note id", precision=0, minimum=1, scale=1,
                                                elem_id="bm-note-id")
                            delete_button = gr.Button("Delete note", variant="secondary", scale=1,
                                                      elem_id="bm-delete")
                        with gr.Accordion("Forget me", open=False):
                            gr.Markdown("Erases whoever the fresh probe shows: every note, link, history "
                                        "entry, template and index entry. There is no undo.")
                            forget_ok = gr.Checkbox(label="I understand: erase everything of mine",
                                                    elem_id="bm-forget-ok")
                            forget_button = gr.Button("Forget me", variant="stop", elem_id="bm-forget")
                        notes_message = gr.Markdown(elem_id="bm-notes-message")
                with gr.Accordion("Import LoCoMo conversations (server path)", open=False, visible=ui.admin):
                    gr.Markdown("Each conversation becomes one identity with a sample palm (or a sample face "
                                "without a palm encoder); probe it with the sample person *LoCoMo n* "
                                "below. About 10 s per conversation on two cores.")
                    with gr.Row(equal_height=True):
                        locomo_path = gr.Textbox(os.environ.get("BIOMEM_LOCOMO", ""), label="locomo10.json path",
                                                 scale=3, elem_id="bm-locomo-path")
                        locomo_count = gr.Slider(1, 10, value=2, step=1, label="Conversations", scale=1)
                        locomo_button = gr.Button("Import", scale=1, elem_id="bm-locomo-import")
                    with gr.Row(equal_height=True):
                        locomo_sample_pick = gr.Dropdown([locomo_sample(i) for i in range(10)],
                                                         value=locomo_sample(0), label="Sample person", scale=2)
                        locomo_sample_button = gr.Button("Put a capture in the Chat probe", scale=1)
                    locomo_message = gr.Markdown(elem_id="bm-locomo-message")

            # -- Calibrate -------------------------------------------------------------------------
            with gr.Tab("Calibrate", id="calibrate", elem_id="bm-tab-calibrate"):
                gr.Markdown("How far apart are two captures of one person (genuine) and captures of two "
                            "people (impostor)? The gate admits cos ≥ τ; the paper takes τ where the two "
                            "densities cross, the security choice is τ at a target false-match rate. "
                            "The encoder is the **probe encoder** chosen at the top.")
                registry = gr.Dataframe(ui.encoder_table(), headers=["encoder", "kind", "dim", "default τ",
                                        "τ in this store", "weights", "licence"], interactive=False,
                                        label="Encoder registry", elem_id="bm-registry")
                calibration = gr.State(None)
                with gr.Row(equal_height=True):
                    cal_source = gr.Radio([("Sample people (shipped faces / synthetic palms)", "samples"),
                                           ("A folder on the server: DIR/<person>/<images>", "folder")],
                                          value="samples", label="Scores from", scale=3,
                                          interactive=ui.admin)
                    cal_folder = gr.Textbox(label="Folder", scale=2, visible=ui.admin)
                    cal_button = gr.Button("Compute histograms and DET", variant="primary", scale=1,
                                           elem_id="bm-calibrate")
                cal_plot = gr.Image(label="Genuine vs impostor scores and DET curve, with τ", type="numpy",
                                    format="png", interactive=False, elem_id="bm-cal-plot")
                cal_table = gr.Markdown(elem_id="bm-cal-table")
                with gr.Row(visible=ui.admin):
                    store_intersection = gr.Button("Store τ (intersection, the paper's)")
                    store_fmr = gr.Button("Store τ (at FMR ≤ 1e-3)")
                cal_message = gr.Markdown()

        # ---- events: the public API first ------------------------------------------------------
        # Probe events take the raw upload (preprocess=False): Gradio never decodes a probe, so
        # nothing it could reject stays in its cache; the handler reads, deletes, then encodes.
        RAW = {"preprocess": False}

        def ask(question: str, probe: Any, encoder: str | None, request: gr.Request) -> dict[str, Any]:
            """Ask the shared agent as whoever `probe` shows; the gate decides which memories it may read."""
            return ui.ask(question, probe, encoder, request)

        def remember(text: str, probe: Any, encoder: str | None, request: gr.Request) -> dict[str, Any]:
            """Store `text` for whoever `probe` shows (refused for a stranger)."""
            return ui.remember(text, probe, encoder, request)

        def compare(question: str, probe_a: Any, probe_b: Any, encoder: str | None,
                    request: gr.Request) -> dict[str, Any]:
            """One question asked as two requesters: both gate decisions, retrieved notes and answers."""
            return ui.compare(question, probe_a, probe_b, encoder, request)

        asked = gr.on([ask_button.click, question.submit], _friendly(ask), [question, chat_probe, encoder],
                      [chat_json], api_name="ask", show_progress_on=[chat_panel], **RAW)
        asked.success(render_chat, [chat_json, chatbot], [chatbot, chat_panel, prompt_box, question], **PRIVATE)
        asked.then(lambda: None, None, [chat_probe], **PRIVATE)  # a probe is taken per message

        remembered = remember_button.click(_friendly(remember), [question, chat_probe, encoder], [chat_json],
                                           api_name="remember", show_progress_on=[chat_panel], **RAW)
        remembered.success(render_chat, [chat_json, chatbot], [chatbot, chat_panel, prompt_box, question],
                           **PRIVATE).then(ui.status, None, [status], **PRIVATE)
        remembered.then(lambda: None, None, [chat_probe], **PRIVATE)

        compared = cmp_button.click(_friendly(compare), [cmp_question, probe_a, probe_b, encoder], [cmp_json],
                                    api_name="compare", show_progress_on=[panel_a, panel_b], **RAW)
        compared.success(render_compare, [cmp_json], [panel_a, panel_b], **PRIVATE)
        compared.then(lambda: (None, None), None, [probe_a, probe_b], **PRIVATE)

        # ---- internal events (private) -----------------------------------------------------------
        def load_demo(progress: gr.Progress = gr.Progress()) -> str:  # noqa: B008 - Gradio's idiom
            return ui.load_demo(progress)

        def prefill(encoder: str | None) -> tuple[Any, Any]:
            """Compare works out of the box: A is Ana, B a stranger (fresh sample captures)."""
            if not ui.demo_loaded():
                return gr.skip(), gr.skip()
            return ui.sample_capture("Ana", encoder), ui.sample_capture("Stranger", encoder)

        loaded = load_button.click(_friendly(load_demo), None, [load_message], **PRIVATE)
        loaded.then(ui.status, None, [status], **PRIVATE)
        loaded.success(_friendly(prefill), [encoder], [probe_a, probe_b], **PRIVATE)
        demo.load(ui.status, None, [status], **PRIVATE)

        def enrol(label: str, files: list[Any] | None, capture: Any, encoder: str | None,
                  progress: gr.Progress = gr.Progress()) -> str:  # noqa: B008
            return ui.enroll(label, files, capture, encoder, progress)

        enrolled = enrol_button.click(_friendly(enrol), [enrol_label, enrol_files, enrol_capture, encoder],
                                      [enrol_message], **PRIVATE, **RAW)
        enrolled.then(lambda: (None, None), None, [enrol_files, enrol_capture], **PRIVATE)
        enrolled.then(ui.status, None, [status], **PRIVATE)

        def memo(text: str, probe: Any, encoder: str | None, request: gr.Request) -> tuple[str, str]:
            result = ui.remember(text, probe, encoder, request)
            return f"Stored for **{_e(result['owner'])}**: “{_e(result['note']['content'])}”.", ""

        memoed = memo_button.click(_friendly(memo), [memo_text, memo_probe, encoder], [memo_message, memo_text],
                                   **PRIVATE, **RAW)
        memoed.then(lambda: None, None, [memo_probe], **PRIVATE)
        memoed.then(ui.status, None, [status], **PRIVATE)

        def do_unlock(probe: Any, second: Any, encoder: str | None, request: gr.Request) -> tuple[Any, ...]:
            session = ui.unlock(probe, encoder, second, request)
            return ({"identity": session["identity"], "until": session["until"]},
                    f"Showing the notes of **{_e(session['label'])}** ({len(session['rows'])}) until "
                    f"{datetime.fromtimestamp(session['until']):%H:%M:%S}.", session["rows"])

        def do_lock() -> tuple[Any, ...]:
            return None, "Locked.", [], ""

        def lock_when_due(session: dict[str, Any] | None) -> tuple[Any, ...]:
            if session and session["until"] < time.time():
                return None, "Locked (time is up).", [], ""
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()

        unlocked_event = unlock_button.click(_friendly(do_unlock), [unlock_probe, unlock_second, encoder],
                                             [unlocked, unlock_message, my_notes], **PRIVATE, **RAW)
        unlocked_event.then(lambda: (None, None), None, [unlock_probe, unlock_second], **PRIVATE)
        lock_button.click(do_lock, None, [unlocked, unlock_message, my_notes, notes_message], **PRIVATE)
        lock_timer.tick(lock_when_due, [unlocked], [unlocked, unlock_message, my_notes, notes_message],
                        show_progress="hidden", **PRIVATE)

        def do_delete(note: Any, probe: Any, second: Any, encoder: str | None,
                      request: gr.Request) -> tuple[Any, ...]:
            message, rows = ui.delete_note(note, probe, encoder, second, request)
            return message, rows, None

        deleted = delete_button.click(_friendly(do_delete), [note_id, confirm_probe, confirm_second, encoder],
                                      [notes_message, my_notes, note_id], **PRIVATE, **RAW)
        deleted.then(lambda: (None, None), None, [confirm_probe, confirm_second], **PRIVATE)
        deleted.then(ui.status, None, [status], **PRIVATE)

        def do_forget(confirmed: bool, probe: Any, second: Any, encoder: str | None,
                      request: gr.Request) -> tuple[Any, ...]:
            message = ui.forget(confirmed, probe, encoder, second, request)
            return None, "Locked.", [], message, False

        forgotten = forget_button.click(_friendly(do_forget), [forget_ok, confirm_probe, confirm_second, encoder],
                                        [unlocked, unlock_message, my_notes, notes_message, forget_ok],
                                        **PRIVATE, **RAW)
        forgotten.then(lambda: (None, None), None, [confirm_probe, confirm_second], **PRIVATE)
        forgotten.then(ui.status, None, [status], **PRIVATE)

        def do_import(path: str, count: float, progress: gr.Progress = gr.Progress()) -> str:  # noqa: B008
            return ui.import_locomo(path, int(count), progress)

        imported = locomo_button.click(_friendly(do_import), [locomo_path, locomo_count], [locomo_message],
                                       **PRIVATE)
        imported.then(ui.status, None, [status], **PRIVATE)
        locomo_sample_button.click(_friendly(lambda person, enc: ui.sample_capture(person, enc)),
                                   [locomo_sample_pick, encoder], [chat_probe], **PRIVATE)

        def do_calibrate(encoder: str | None, source: str, folder: str,
                         progress: gr.Progress = gr.Progress()) -> tuple[Any, ...]:  # noqa: B008
            report = ui.calibrate(encoder, source, folder, progress)
            plot, text = ui.calibration_view(report)
            return report, plot, text

        cal_button.click(_friendly(do_calibrate), [encoder, cal_source, cal_folder],
                         [calibration, cal_plot, cal_table], **PRIVATE)
        for button, which in ((store_intersection, "intersection"), (store_fmr, "fmr")):
            stored = button.click(_friendly(functools.partial(_store_tau, ui, which=which)), [calibration],
                                  [cal_message], **PRIVATE)
            stored.then(ui.encoder_table, None, [registry], **PRIVATE).then(ui.status, None, [status], **PRIVATE)

    demo.queue(default_concurrency_limit=2, max_size=64)
    demo.biomem_app = ui  # the handlers, for tests and for main()
    return demo


def _store_tau(ui: BioMemoryApp, report: Any, *, which: str) -> str:
    return ui.store_tau(report, which)


# ---- launching ------------------------------------------------------------------------------------

def launch(demo: gr.Blocks, **overrides: Any) -> Any:
    """demo.launch() with this app's privacy and look: no run history, no monitoring, no MCP, no share."""
    on_space = os.environ.get("SPACE_ID") is not None
    options: dict[str, Any] = dict(
        server_name=os.environ.get("GRADIO_SERVER_NAME") or ("0.0.0.0" if on_space else "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT") or os.environ.get("PORT") or "7860"),
        share=False, run_history=False, enable_monitoring=False, mcp_server=False, ssr_mode=False,
        pwa=False, show_error=False, footer_links=["api", "gradio", "settings"], max_file_size="10mb",
        theme=THEME, css=CSS)
    options.update(overrides)
    return demo.launch(**options)


@contextmanager
def served(mem: BioMemory, cache: Path, **build: Any) -> Iterator[tuple[str, gr.Blocks]]:
    """(url, demo) of the app over `mem` on a free 127.0.0.1 port, Gradio's uploads in `cache`;
    closed afterwards. For tests and benchmarks that drive the public page."""
    from biomem.llamacpp import free_port

    with mock.patch.dict(os.environ, {"GRADIO_TEMP_DIR": str(cache)}):
        demo = build_app(mem, **build)
        try:
            _, url, _ = launch(demo, server_name="127.0.0.1", server_port=free_port(),
                               prevent_thread_lock=True, quiet=True)
            yield url, demo
        finally:
            demo.close()


def main() -> None:
    """`python app.py`: configure from the environment, optionally build the demo, serve on $PORT."""
    logging.basicConfig(level=os.environ.get("BIOMEM_LOG", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # Gradio's own start-up probes
    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    except ImportError:
        pass
    demo = build_app()
    ui: BioMemoryApp = demo.biomem_app
    if _env_flag("BIOMEM_LOAD_DEMO", os.environ.get("SPACE_ID") is not None) and not ui.mem.identities():
        log.info("%s", ui.load_demo())
    launch(demo)


if __name__ == "__main__":
    main()
