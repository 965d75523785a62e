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
