"""What the store hands out (Identity, Note) and the codecs between them and SQLite values."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ..errors import InvalidInputError

# A note row as Note.from_row reads it.
NOTE_COLUMNS = "id, owner_id, content, timestamp, keywords, tags, context, author_id, metadata"
# A group's label_key (a person's is biomem.stores.labels.label_key of the label): it never takes a person's name
# (labels hold no control character), and two households may share a name (a store-wide unique name would tell a
# stranger that a household exists).
GROUP_KEY_PREFIX = "\x1fgroup:"


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
    """An owner of notes: an enrolled person (with templates), or a group of people (kind "group": no
    templates, never matched by a probe, its notes read by its members)."""

    id: int
    label: str
    sample: bool = False  # a demo/sample person (may be shown under the "demo" disclosure)
    kind: str = "person"


@dataclass
class Group:
    """A household or team: an owner of shared notes whose members' live probes reach them."""

    id: int
    label: str
    members: list[int] = field(default_factory=list)  # identity ids, in the order they joined
    member_labels: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "members": self.members, "member_labels": self.member_labels}


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
    author: int | None = None  # who wrote it (None: an operator's import into a group)
    metadata: dict[str, Any] = field(default_factory=dict)
    hidden_from: list[int] = field(default_factory=list)  # members of its group who never retrieve it

    @property
    def scope(self) -> int | None:
        """None for a person's own note, else the id of the group it belongs to."""
        return None if self.author == self.owner else self.owner

    @classmethod
    def from_row(cls, row: tuple, links: list[int], hidden_from: list[int] | None = None) -> Note:
        """The note of a row of NOTE_COLUMNS, with the ids it links to and the members it is hidden from."""
        metadata = row[8] if isinstance(row[8], dict) else json.loads(row[8] or "{}")
        return cls(id=row[0], owner=row[1], content=row[2], timestamp=row[3], keywords=json.loads(row[4]),
                   tags=json.loads(row[5]), context=row[6], links=links, author=row[7], metadata=metadata,
                   hidden_from=hidden_from or [])

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "owner": self.owner, "memory": self.content, "content": self.content,
            "timestamp": self.timestamp, "keywords": self.keywords, "tags": self.tags,
            "context": self.context, "links": self.links, "scope": self.scope, "author": self.author,
            "metadata": self.metadata, "hidden_from": self.hidden_from,
        }

    def snapshot(self) -> dict[str, Any]:
        """The fields history records before and after a change."""
        return snapshot(vars(self))


SNAPSHOT_FIELDS = ("content", "timestamp", "keywords", "tags", "context", "metadata")


def snapshot(note: dict[str, Any]) -> dict[str, Any]:
    """The fields of a note (or a note to insert) that history records: what it says, not who may read it."""
    return {name: note[name] for name in SNAPSHOT_FIELDS if name in note}


def authorship(owner_id: int, note: dict[str, Any]) -> tuple[int | None, str]:
    """(author id, metadata as JSON) of a note to insert: by default the owner wrote it."""
    return note.get("author", owner_id), metadata_json(note.get("metadata") or {})


def metadata_json(metadata: dict[str, Any]) -> str:
    """A note's metadata as the stores keep and copy it: keys sorted, so that a copy between an SQLite file and
    PostgreSQL (whose jsonb orders keys its own way) has the same bytes, and the same checksum, on both sides."""
    return json.dumps(metadata, sort_keys=True, ensure_ascii=False)


# A history row as history_row writes it, in this column order.
HISTORY_COLUMNS = "owner_id, note_id, event, before, after, at, actor_id, cause_id"


def history_row(owner_id: int, note_id: int, event: str, before: dict | None, after: dict | None,
                actor: int | None = None, cause: int | None = None) -> list[Any]:
    """The HISTORY_COLUMNS values of one event: what the note said before and after (snapshots), now."""
    return [owner_id, note_id, event, json.dumps(snapshot(before)) if before else None,
            json.dumps(snapshot(after)) if after else None, now_iso(), actor, cause]


def add_events(note: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None, dict[str, Any]]]:
    """(event, before, after) of an inserted note's history: its "add" as its own analysis made it and, when
    evolution strengthened its tags (note["own_tags"]), an "evolve" it caused itself, taken back with what it read
    (biomem.notes.agent.MemoryAgent.take_back)."""
    if note.get("own_tags") is None:
        return [("add", None, note)]
    own = {**note, "tags": note["own_tags"]}
    return [("add", None, own), ("evolve", own, note)]


def history_events(rows: list[tuple]) -> list[dict[str, Any]]:
    """History rows (id, note_id, event, before, after, at, actor_id) as the engine returns them."""
    return [{"id": r[0], "note_id": r[1], "event": r[2], "before": json.loads(r[3]) if r[3] else None,
             "after": json.loads(r[4]) if r[4] else None, "at": r[5], "actor": r[6]} for r in rows]
