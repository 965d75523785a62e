"""Bio-Memory: agentic memory for shared LLM agents, gated by the requester's biometrics."""

from .errors import (
    BioMemError,
    InvalidImageError,
    InvalidInputError,
    LLMError,
    ModalityMismatchError,
    ModelUnavailableError,
    MultipleFacesError,
    NoFaceError,
    NoPalmError,
    NoteNotFoundError,
    StoreCorruptError,
    UnknownIdentityError,
)
from .gate import GateResult, Probe
from .memory import Answer, BioMemory, SearchResult
from .store import Identity, Note

__version__ = "0.1.0"

__all__ = [
    "Answer", "BioMemError", "BioMemory", "GateResult", "Identity", "InvalidImageError",
    "InvalidInputError", "LLMError", "ModalityMismatchError", "ModelUnavailableError",
    "MultipleFacesError", "NoFaceError", "NoPalmError", "Note", "NoteNotFoundError", "Probe", "SearchResult",
    "StoreCorruptError", "UnknownIdentityError", "__version__",
]
