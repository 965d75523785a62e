"""Bio-Memory: agentic memory for shared LLM agents, gated by the requester's biometrics.

The engine's classes load on first use (PEP 562), so `import biomem.errors` from an
encoder module stays cheap and never imports the text stack.
"""

from importlib import import_module
from typing import Any

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

__version__ = "0.1.0"

_LAZY = {
    "BioMemory": ".engine.memory", "Answer": ".engine.results", "SearchResult": ".engine.results",
    "AsyncBioMemory": ".engine.aio", "Session": ".engine.sessions",
    "GateResult": ".identity.gate", "Probe": ".identity.gate", "Burst": ".identity.bursts",
    "Identity": ".stores.records", "Note": ".stores.records",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'biomem' has no attribute {name!r}")


__all__ = [
    "Answer", "AsyncBioMemory", "BioMemError", "BioMemory", "Burst", "GateResult", "Identity", "InvalidImageError",
    "InvalidInputError", "LLMError", "ModalityMismatchError", "ModelUnavailableError",
    "MultipleFacesError", "NoFaceError", "NoPalmError", "Note", "NoteNotFoundError", "Probe",
    "SearchResult", "Session", "StoreCorruptError", "UnknownIdentityError", "__version__",
]
