"""What the store hands out (Identity, Note) and the codecs between them and SQLite values."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ..errors import InvalidInputError

# A note row as Note.from_row reads it.
NOTE_COLUMNS = "id, owner_id, content, timestamp, keywords, tags, context"


def now_iso() -> str:
    """Current UTC time, ISO 8601, seconds precision."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


def check_id(value: object, what: str = "note") -> int:
    """A row id as a positive int; InvalidInputError for anything else (bools, floats, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 < int(value) < 2**63:
        raise InvalidInputError(f"a {what} id is a positive integer, got {value!r}")
    return int(value)


@dataclass
class Identity:
    """An enrolled person: the owner of notes and templates."""

    id: int
    label: str
    sample: bool = False  # a demo/sample person (may be shown under the "demo" disclosure)


@dataclass
class Note:
    """One memory of one owner (A-Mem's note plus its owner)."""

    id: int
    owner: int
    content: str
    timestamp: str
    keywords: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    context: str = ""
    links: list[int] = field(default_factory=list)

    @classmethod
    def from_row(cls, row: tuple, links: list[int]) -> Note:
        """The note of a row of NOTE_COLUMNS, with the ids it links to."""
        return cls(id=row[0], owner=row[1], content=row[2], timestamp=row[3],
                   keywords=json.loads(row[4]), tags=json.loads(row[5]), context=row[6], links=links)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "owner": self.owner, "memory": self.content, "content": self.content,
            "timestamp": self.timestamp, "keywords": self.keywords, "tags": self.tags,
            "context": self.context, "links": self.links,
        }

    def snapshot(self) -> dict[str, Any]:
        """The fields history records before and after a change."""
        return {"content": self.content, "timestamp": self.timestamp, "keywords": self.keywords,
                "tags": self.tags, "context": self.context}
