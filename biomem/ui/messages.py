"""Engine errors as toasts a person can act on: the app's own title, one line, never a traceback
or a server path (those go to the log)."""

from __future__ import annotations

import functools
import html
import logging
from collections.abc import Callable
from typing import Any

import gradio as gr

from ..errors import (
    AlreadyEnrolledError,
    BioMemError,
    DuplicateLabelError,
    EnrolmentError,
    ForgetIncompleteError,
    InconsistentSamplesError,
    InvalidImageError,
    InvalidInputError,
    KeyUnavailableError,
    LLMError,
    ModalityMismatchError,
    ModelUnavailableError,
    MultipleFacesError,
    NoFaceError,
    NoPalmError,
    NoteNotFoundError,
    StepUpRequiredError,
    StoreCorruptError,
    TooManyAttemptsError,
    UnknownIdentityError,
)

log = logging.getLogger("biomem.ui")

# (error class, toast title, message); the first match wins, so subclasses come first.
ERRORS: list[tuple[type[BaseException], str, str]] = [
    (NoFaceError, "No face found",
     "No face was found in the probe. Face the camera in good light, or use another photo."),
    (MultipleFacesError, "More than one face",
     "The probe shows several faces, so the requester is ambiguous. One person at a time, please."),
    (NoPalmError, "No palm found", "No palm region was found in the probe: give a cropped palm image."),
    (InvalidImageError, "Not a usable image", "The file is not an image this encoder can read."),
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
SELF_EXPLAINED = (NoFaceError, MultipleFacesError, NoPalmError, InvalidImageError, UnknownIdentityError,
                  NoteNotFoundError)
LOGGED_ONLY = (LLMError, ModelUnavailableError, StoreCorruptError, KeyUnavailableError,
               ForgetIncompleteError)  # their details name servers and paths


def readable(exc: BaseException) -> tuple[str, str]:
    """(title, message) a person can act on; never a traceback, never a server path."""
    for cls, title, message in ERRORS:
        if isinstance(exc, cls):
            if isinstance(exc, LOGGED_ONLY):
                log.warning("%s: %s", exc.__class__.__name__, exc)
                return title, message
            if message and isinstance(exc, SELF_EXPLAINED):
                return title, message
            detail = str(exc).replace("image bytes", "the image")
            detail = detail[:1].upper() + detail[1:]
            return title, f"{message} ({detail})" if message and detail else (message or detail)
    return "Something went wrong", f"{exc.__class__.__name__}; the details are in the server log."


def fail(message: str, title: str) -> gr.Error:
    """A toast in the UI (an AppError for API clients) that starts with the app's title (Gradio's
    toast heading only says "Error"); text only."""
    return gr.Error(html.escape(f"{title} — {message}", quote=False), title=html.escape(title, quote=False),
                    print_exception=False)


def friendly(fn: Callable) -> Callable:
    """`fn` with engine errors turned into readable toasts; anything unexpected is logged whole."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except BioMemError as exc:
            title, message = readable(exc)
            raise fail(message, title) from None
        except Exception as exc:  # noqa: BLE001 - a visitor sees one line, the log gets the traceback
            log.exception("unexpected error in %s", getattr(fn, "__name__", fn))
            title, message = readable(exc)
            raise fail(message, title) from None
    return wrapper
