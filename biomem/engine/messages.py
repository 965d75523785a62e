"""Engine errors as a title and one line a person can act on: the same words in the web app's toasts,
the REST API's JSON errors and the MCP tools' replies; never a traceback or a server path (those
go to the log). No UI import here, so a server without the page never loads gradio."""

from __future__ import annotations

import logging
from typing import NamedTuple

from modalities.images import FORMATS_TAKEN

from ..errors import (
    AlreadyEnrolledError,
    AmbiguousProbeError,
    AuthenticationError,
    BioMemError,
    CorruptImageError,
    DisclosureError,
    DuplicateLabelError,
    EnrolmentError,
    EnrolmentLimitError,
    EnrolmentRefusedError,
    ForgetIncompleteError,
    GroupNotFoundError,
    ImageBombError,
    ImageTooLargeError,
    ImageTooSmallError,
    InconsistentSamplesError,
    InvalidImageError,
    InvalidInputError,
    KeyUnavailableError,
    LLMError,
    MixedBurstError,
    ModalityMismatchError,
    ModelUnavailableError,
    MultipleFacesError,
    NoFaceError,
    NoPalmError,
    NotAuthorisedError,
    NoteNotFoundError,
    PoorCaptureError,
    SampleCaptureError,
    SampleReadOnlyError,
    SessionExpiredError,
    StepUpRequiredError,
    StoreCorruptError,
    TextTooLongError,
    TooManyAttemptsError,
    UnknownIdentityError,
    UnsupportedImageFormatError,
)

log = logging.getLogger("biomem.engine.messages")

# the gate could not tell two enrolled people apart (biomem.identity.gate): said without naming anyone
AMBIGUOUS = ("Two enrolled people look too alike in this capture: take a clearer one, or give a capture of "
             "another kind with it (a palm beside a face) if you enrolled one.")

# a capture below the quality bar (modalities.quality): nothing was matched, and it is not a failed attempt
POOR_CAPTURE = "Nothing was matched, and this does not count as a failed attempt: try again."

# anything that is not an engine error (a fault, or a request no client of ours sends): what to do, never the
# exception's name or text, which go to the log with the traceback (the caller logs them)
UNEXPECTED = ("Something went wrong", "This request could not be handled (the server log says why): reload the page "
              "or send the request again, and tell the operator if it happens again.")

class Refusal(NamedTuple):
    """How an engine error reaches a person and a client: a toast's title, the line after the error's own text
    (empty: the error's text alone), and the REST API's HTTP status."""

    kind: type[BaseException]
    title: str
    message: str
    status: int


# One row per error class, the first match wins, so subclasses come first: the page, the REST API (status and
# JSON error), the MCP tools and the Python client all read this table.
REFUSALS: list[Refusal] = [Refusal(*row) for row in [
    (NoFaceError, "No face found",
     "No face was found in the probe. Face the camera in good light, or use another photo.", 422),
    (MixedBurstError, "Different people",
     "The frames of this capture show different people, so nothing was matched. One person at a time, please.", 422),
    (MultipleFacesError, "More than one face",
     "The probe shows several faces, so the requester is ambiguous. One person at a time, please.", 422),
    (PoorCaptureError, "Poor capture", POOR_CAPTURE, 422),
    (NoPalmError, "No palm found", "No palm region was found in the probe: give a cropped palm image.", 422),
    (ImageBombError, "Image bomb refused", "A file that claims so many pixels is refused as an image bomb: "
     "send the photo itself.", 422),
    (ImageTooLargeError, "Image too large", "Scale the photo down or crop it, then try again.", 422),
    (ImageTooSmallError, "Image too small", "Use a larger photo, with the face or palm in full view.", 422),
    (UnsupportedImageFormatError, "Unsupported image format",
     "Convert it to JPEG or PNG (a phone can share or save its photos as JPEG).", 422),
    (CorruptImageError, "Damaged image",
     "The file is an image but cut short or damaged: save or upload it again.", 422),
    (InvalidImageError, "Not a usable image",
     f"The file is not an image this encoder can read: send a {FORMATS_TAKEN} photo.", 422),
    (ModalityMismatchError, "Wrong kind of probe", "", 422),
    (AmbiguousProbeError, "Could not tell who", AMBIGUOUS, 422),
    (UnknownIdentityError, "Not recognised",
     "The probe matches nobody enrolled, so nothing was read or stored. Enrol first.", 403),
    (NoteNotFoundError, "No such note", "None of your notes has that id.", 404),
    (GroupNotFoundError, "No such household",
     "None of your households has that id, or that person is not a member of it.", 404),
    (TooManyAttemptsError, "Too many attempts", "", 429),
    (SessionExpiredError, "Session ended", "", 401),
    (SampleReadOnlyError, "Sample person: read-only", "", 403),
    (NotAuthorisedError, "Not authorised", "", 403),  # a key's role does not open this door
    (AuthenticationError, "Not authorised", "", 401),
    (StepUpRequiredError, "Fresh probe needed", "", 403),
    (AlreadyEnrolledError, "Already enrolled", "", 409),
    (InconsistentSamplesError, "Not one person", "", 422),
    (DuplicateLabelError, "Name taken", "", 409),
    (EnrolmentRefusedError, "Not enrolled", "", 409),
    (SampleCaptureError, "Sample person", "Enrol with captures of yourself.", 403),
    (EnrolmentLimitError, "Too many people for this τ", "An operator can store a higher τ calibrated at a "
     "lower false-match rate (on more people), or raise the target BIOMEM_TARGET_FPIR.", 409),
    (EnrolmentError, "Captures refused", "", 422),
    (ForgetIncompleteError, "Not erased yet", "Your memories and templates are deleted, but another "
     "process is still reading the store, so their last bytes are not erased yet: the next forget or a restart "
     "finishes it.", 503),
    (KeyUnavailableError, "Store locked", "The templates' key is missing or wrong; the server log says why.", 503),
    (ModelUnavailableError, "Encoder not available", "This encoder's weights are not installed on this "
     "server: choose another probe encoder.", 503),
    (LLMError, "LLM unreachable", "The language model did not answer; the gate and retrieval worked. "
     "Try again later, or check BIOMEM_LLM / OPENAI_BASE_URL / OPENAI_API_KEY.", 502),
    (StoreCorruptError, "Store unreadable", "The memory store cannot be read; the server log says why.", 500),
    (TextTooLongError, "Too long", "", 422),
    (InvalidInputError, "Invalid input", "", 422),
    (DisclosureError, "Refused", "", 500),  # the demo disclosure on a store with real enrolments
    (BioMemError, "Refused", "", 400),
]]
# entries whose line says all: the error's own text would add a decoder's internals, not a reason
SELF_EXPLAINED = (NoFaceError, MultipleFacesError, NoPalmError, CorruptImageError, InvalidImageError,
                  AmbiguousProbeError, UnknownIdentityError, NoteNotFoundError, GroupNotFoundError)
LOGGED_ONLY = (LLMError, ModelUnavailableError, StoreCorruptError, KeyUnavailableError,
               ForgetIncompleteError)  # their details name servers and paths


def readable(exc: BaseException) -> tuple[str, str]:
    """(title, message) a person can act on; never a traceback, a server path or an exception's name."""
    row = refusal_of(exc)
    if row is None:
        return UNEXPECTED
    title, message = row.title, row.message
    if isinstance(exc, PoorCaptureError) and exc.hint:
        title = f"{title}: {exc.hint}"  # the hint is the title: what to change, read first
    if isinstance(exc, LOGGED_ONLY):
        log.warning("%s: %s", exc.__class__.__name__, exc)
        return title, message
    if message and row.kind in SELF_EXPLAINED:
        return title, message
    detail = str(exc)
    detail = detail[:1].upper() + detail[1:]
    return title, f"{detail.rstrip('.')}. {message}" if message and detail else (message or detail)


def refusal_of(exc: BaseException) -> Refusal | None:
    """The row of REFUSALS an engine error matches first; None for anything that is not an engine error."""
    return next((row for row in REFUSALS if isinstance(exc, row.kind)), None)

