"""Engine errors as a title and one line a person can act on: the same words in the web app's toasts,
the REST API's JSON errors and the MCP tools' replies; never a traceback or a server path (those
go to the log). No UI import here, so a server without the page never loads gradio."""

from __future__ import annotations

import logging

from modalities.images import FORMATS_TAKEN

from ..errors import (
    AlreadyEnrolledError,
    AmbiguousProbeError,
    AuthenticationError,
    BioMemError,
    CorruptImageError,
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

# (error class, toast title, message); the first match wins, so subclasses come first.
ERRORS: list[tuple[type[BaseException], str, str]] = [
    (NoFaceError, "No face found",
     "No face was found in the probe. Face the camera in good light, or use another photo."),
    (MixedBurstError, "Different people",
     "The frames of this capture show different people, so nothing was matched. One person at a time, please."),
    (MultipleFacesError, "More than one face",
     "The probe shows several faces, so the requester is ambiguous. One person at a time, please."),
    (PoorCaptureError, "Poor capture", POOR_CAPTURE),
    (NoPalmError, "No palm found", "No palm region was found in the probe: give a cropped palm image."),
    (ImageBombError, "Image bomb refused", "A file that claims so many pixels is refused as an image bomb: "
     "send the photo itself."),
    (ImageTooLargeError, "Image too large", "Scale the photo down or crop it, then try again."),
    (ImageTooSmallError, "Image too small", "Use a larger photo, with the face or palm in full view."),
    (UnsupportedImageFormatError, "Unsupported image format",
     "Convert it to JPEG or PNG (a phone can share or save its photos as JPEG)."),
    (CorruptImageError, "Damaged image", "The file is an image but cut short or damaged: save or upload it again."),
    (InvalidImageError, "Not a usable image",
     f"The file is not an image this encoder can read: send a {FORMATS_TAKEN} photo."),
    (ModalityMismatchError, "Wrong kind of probe", ""),
    (AmbiguousProbeError, "Could not tell who", AMBIGUOUS),
    (UnknownIdentityError, "Not recognised",
     "The probe matches nobody enrolled, so nothing was read or stored. Enrol first."),
    (NoteNotFoundError, "No such note", "None of your notes has that id."),
    # one message whatever the id: a household the requester is not in reads as one that does not exist
    (GroupNotFoundError, "No such household",
     "None of your households has that id, or that person is not a member of it."),
    (TooManyAttemptsError, "Too many attempts", ""),
    (SessionExpiredError, "Session ended", ""),
    # a demo sample person's captures are public: their memories are read-only, their faces nobody's to enrol
    (SampleReadOnlyError, "Sample person: read-only", ""),
    (AuthenticationError, "Not authorised", ""),
    (StepUpRequiredError, "Fresh probe needed", ""),
    (AlreadyEnrolledError, "Already enrolled", ""),
    (InconsistentSamplesError, "Not one person", ""),
    (DuplicateLabelError, "Name taken", ""),
    (EnrolmentRefusedError, "Not enrolled", ""),
    (SampleCaptureError, "Sample person", "Enrol with captures of yourself."),
    (EnrolmentLimitError, "Too many people for this τ", "An operator can store a higher τ calibrated at a "
     "lower false-match rate (on more people), or raise the target BIOMEM_TARGET_FPIR."),
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
    (TextTooLongError, "Too long", ""),
    (InvalidInputError, "Invalid input", ""),
    (BioMemError, "Refused", ""),
]
# entries whose line says all: the error's own text would add a decoder's internals, not a reason
SELF_EXPLAINED = (NoFaceError, MultipleFacesError, NoPalmError, CorruptImageError, InvalidImageError,
                  AmbiguousProbeError, UnknownIdentityError, NoteNotFoundError, GroupNotFoundError)
LOGGED_ONLY = (LLMError, ModelUnavailableError, StoreCorruptError, KeyUnavailableError,
               ForgetIncompleteError)  # their details name servers and paths


def readable(exc: BaseException) -> tuple[str, str]:
    """(title, message) a person can act on; never a traceback, a server path or an exception's name."""
    for cls, title, message in ERRORS:
        if isinstance(exc, cls):
            if isinstance(exc, PoorCaptureError) and exc.hint:
                title = f"{title}: {exc.hint}"  # the hint is the title: what to change, read first
            if isinstance(exc, LOGGED_ONLY):
                log.warning("%s: %s", exc.__class__.__name__, exc)
                return title, message
            if message and cls in SELF_EXPLAINED:
                return title, message
            detail = str(exc)
            detail = detail[:1].upper() + detail[1:]
            return title, f"{detail.rstrip('.')}. {message}" if message and detail else (message or detail)
    return UNEXPECTED

