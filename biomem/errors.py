"""Typed errors: every refusal the engine makes has its own class and a message a person can act on.

The encoders' errors live in `modalities.errors` (so that `modalities` imports nothing from
`biomem`) and are re-exported here: `from biomem.errors import NoFaceError` works as before.
"""

from modalities.errors import (  # noqa: F401  (re-exported)
    AudioTooLongError,
    BioMemError,
    CorruptImageError,
    ImageBombError,
    ImageTooLargeError,
    ImageTooSmallError,
    InvalidAudioError,
    InvalidImageError,
    InvalidInputError,
    ModelUnavailableError,
    MultipleFacesError,
    NoFaceError,
    NoPalmError,
    PluginError,
    PoorCaptureError,
    TooLittleSpeechError,
    UnknownEncoderError,
    UnknownModalityError,
    UnsupportedAudioFormatError,
    UnsupportedImageFormatError,
    WrongModalityError,
)


class MixedBurstError(MultipleFacesError):
    """The frames of a burst show different people: one person at a time, so nothing is matched."""


class ModalityMismatchError(InvalidInputError):
    """A probe or template of one modality was given where another modality is expected."""


class UnknownIdentityError(BioMemError, LookupError):
    """The probe matched no enrolled identity, or an identity id does not exist."""


class AmbiguousProbeError(UnknownIdentityError):
    """The probe is as close to two enrolled people as the gate can tell apart (within the margin δ):
    nobody is admitted and nothing is read or written; the error names nobody."""


class NoteNotFoundError(BioMemError, LookupError):
    """No note with that id among the requester's notes.

    Another owner's note id raises this same error on purpose: a non-owner learns nothing,
    not even that the id exists.
    """


class GroupNotFoundError(BioMemError, LookupError):
    """No group with that id among the requester's groups (or that member in it).

    A group the requester is not in raises this same error: a non-member learns nothing of a
    group, not even that it exists.
    """


class StoreCorruptError(BioMemError, RuntimeError):
    """The database file is not a Bio-Memory store (or is damaged); it is left untouched."""


class LLMError(BioMemError, RuntimeError):
    """An LLM backend could not be reached or configured."""


class EnrolmentError(BioMemError, ValueError):
    """An enrolment or added capture that would let one person pose as another; nothing was written."""


class AlreadyEnrolledError(EnrolmentError):
    """The samples match someone already enrolled (never says whom)."""


class LookAlikeError(AlreadyEnrolledError):
    """The captures are within the gate's margin of someone enrolled (a look-alike relative, or that person): by
    them alone the gate could never tell the two apart. An operator enrols a look-alike with a capture of another
    kind that does tell them apart (biomem.identity.enrolment.check_distinct)."""


class InconsistentSamplesError(EnrolmentError):
    """The samples of one enrolment do not all show the same person."""


class DuplicateLabelError(EnrolmentError):
    """Another identity already has this label, or one that looks like it (biomem.stores.labels: NFKC, case, the
    Unicode TS #39 skeleton)."""


class EnrolmentRefusedError(EnrolmentError):
    """A requester's enrolment whose label is taken or whose samples match someone enrolled; which of
    the two is said to the operator and admins only (biomem.identity.enrolment)."""


class SampleCaptureError(EnrolmentError):
    """A requester's enrolment, or captures a requester adds, showing one of the demo's sample people: anyone can
    show their captures, so none of them is anybody's own (biomem.identity.enrolment.Reserved)."""


class EnrolmentLimitError(EnrolmentError):
    """One more person would take the store past the size its τ guards: the expected false-positive
    identification rate (a stranger taken for someone) would exceed the operator's target FPIR."""


class TextTooLongError(InvalidInputError):
    """A memory or a question longer than the engine takes (biomem.engine.checks' MAX_NOTE_CHARS and
    MAX_QUESTION_CHARS); nothing was stored."""


class StepUpRequiredError(BioMemError, PermissionError):
    """A destructive or broad action needs a fresh probe that clears the stricter step-up τ
    (of every modality the identity enrolled)."""


class TooManyAttemptsError(BioMemError, PermissionError):
    """Too many probes from this client matched nobody: refused without encoding, for a cool-down."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class KeyUnavailableError(BioMemError, RuntimeError):
    """The key that seals this store's templates is missing or wrong; nothing was read or written."""


class ForgetIncompleteError(BioMemError, RuntimeError):
    """forget() could not erase every byte in time (a reader held the WAL); the rows are gone,
    the caller must retry before telling the person their data is erased."""


class DisclosureError(BioMemError, ValueError):
    """The disclosure setting would reveal real people (demo mode on a store with real enrolments)."""


class SessionExpiredError(BioMemError, PermissionError):
    """A requester session expired, was closed, or its person was forgotten: show a probe again."""


class AuthenticationError(BioMemError, PermissionError):
    """A service call without a valid API key, or with a key whose role does not allow it."""


class NotAuthorisedError(AuthenticationError):
    """A known caller (or the public page) whose role does not open this door (biomem.engine.access)."""


class SampleReadOnlyError(NotAuthorisedError):
    """A change proven by a probe of one of the demo's sample people: anyone can show their captures, so such a
    probe proves nothing and their memories and households are read-only to it (biomem.engine.access)."""
