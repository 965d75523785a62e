"""Typed errors: every refusal the engine makes has its own class and a message a person can act on."""


class BioMemError(Exception):
    """Base class of every error Bio-Memory raises on purpose."""


class InvalidInputError(BioMemError, ValueError):
    """Input that cannot be used at all: empty text, wrong type, unknown option."""


class InvalidImageError(InvalidInputError):
    """A file or array that is not a decodable image, or one too small or too large to use."""


class NoFaceError(InvalidInputError):
    """The probe image holds no detectable face."""


class NoPalmError(InvalidInputError):
    """The image holds no usable palm region (blank, flat, or not a palm ROI)."""


class MultipleFacesError(InvalidInputError):
    """The probe image holds several faces: the requester is ambiguous, so we refuse."""


class ModalityMismatchError(InvalidInputError):
    """A probe or template of one modality was given where another modality is expected."""


class UnknownIdentityError(BioMemError, LookupError):
    """The probe matched no enrolled identity, or an identity id does not exist."""


class NoteNotFoundError(BioMemError, LookupError):
    """No note with that id among the requester's notes.

    Another owner's note id raises this same error on purpose: a non-owner learns nothing,
    not even that the id exists.
    """


class ModelUnavailableError(BioMemError, RuntimeError):
    """A model or weight file cannot be found locally and cannot be downloaded."""


class StoreCorruptError(BioMemError, RuntimeError):
    """The database file is not a Bio-Memory store (or is damaged); it is left untouched."""


class LLMError(BioMemError, RuntimeError):
    """An LLM backend could not be reached or configured."""


class UnknownModalityError(InvalidInputError, LookupError):
    """No encoder of that name is registered (built-in, entry point or register())."""


class EnrolmentError(BioMemError, ValueError):
    """An enrolment or added capture that would let one person pose as another; nothing was written."""


class AlreadyEnrolledError(EnrolmentError):
    """The samples match someone already enrolled (never says whom)."""


class InconsistentSamplesError(EnrolmentError):
    """The samples of one enrolment do not all show the same person."""


class DuplicateLabelError(EnrolmentError):
    """Another identity already has this label (labels are unique, case-insensitive)."""


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
