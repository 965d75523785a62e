"""The storage interface both stores implement (MemoryStore, made of the role protocols StoreCore, NoteStore,
IdentityStore, ThresholdStore, AttemptStore and KeyStore; SearchIndex), the tables they hold, and what they
share: sealed templates, and telling an SQLite location from a PostgreSQL one. Above this interface
(gate, agent, engine, surfaces) nothing knows which store it has."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from ..errors import InvalidInputError
from ..settings import Settings
from ..vocabulary import AttemptLimits
from .derivations import Event
from .filters import Filter
from .records import Group, Identity, Note
from .sealing import Sealer, load_key

POSTGRES_SCHEMES = ("postgresql", "postgres")

# Every table a store holds, parents first (the order rows are copied in), with its columns in the
# order export_rows gives them and import_rows takes them.
COLUMNS = {
    "meta": ("key", "value"),
    "identities": ("id", "label", "label_key", "created", "generation", "sample", "kind"),
    "members": ("group_id", "identity_id", "added"),
    "templates": ("id", "identity_id", "modality", "embedding", "created"),
    "notes": ("id", "owner_id", "content", "timestamp", "keywords", "tags", "context", "embedding", "author_id",
              "metadata"),
    "hidden": ("owner_id", "note_id", "identity_id"),
    "links": ("owner_id", "source_id", "target_id"),
    "sources": ("owner_id", "note_id", "source_id"),
    "history": ("id", "owner_id", "note_id", "event", "before", "after", "at", "actor_id", "cause_id"),
    "thresholds": ("modality", "tau", "source", "tau_strict", "strict_source", "updated", "delta", "delta_source"),
    "api_keys": ("id", "name", "role", "digest", "prefix", "created", "revoked"),
}
TABLES = tuple(COLUMNS)
KEYS = {**{table: columns[0] for table, columns in COLUMNS.items()}, "links": "source_id, target_id",
        "sources": "note_id, source_id",
        "members": "group_id, identity_id", "hidden": "note_id, identity_id"}
# A stored threshold -> (its value column, its provenance column): τ, the step-up τ, the ambiguity margin δ.
THRESHOLD_COLUMNS = {"tau": ("tau", "source"), "tau_strict": ("tau_strict", "strict_source"),
                     "delta": ("delta", "delta_source")}
# Tables whose ids come from a never-reused counter: a copy carries the counter over too.
COUNTED = ("identities", "templates", "notes", "history", "api_keys")
# Meta rows a store keeps by itself: a copy leaves them to the target.
OWN_META = ("note_total", "schema_version")


@dataclass(frozen=True)
class Within:
    """What a search may rank inside one partition: the notes matching `where` (a caller's filter), none of
    `excluded` (hidden from the requester), and only `only` when given (one audience of a group's notes).
    The search applies it before its top-K, so K notes come back when K qualify."""

    where: Filter | None = None
    excluded: frozenset[int] = frozenset()
    only: frozenset[int] | None = None


class SearchIndex(Protocol):
    """Per-owner semantic search over one store's notes (biomem.stores.partitions, biomem.stores.pg.search)."""

    def search(self, owner_id: int, query: np.ndarray, k: int,
               within: Within | None = None) -> list[tuple[int, float]]: ...
    def size(self, owner_id: int) -> int: ...
    def added(self, owner_id: int, note_ids: list[int], vectors: np.ndarray, generation: int) -> None: ...
    def updated(self, owner_id: int, note_id: int, vector: np.ndarray, generation: int) -> None: ...
    def deleted(self, owner_id: int, note_id: int, generation: int) -> None: ...
    def drop(self, owner_id: int) -> None: ...
    def flush(self) -> None: ...


class StoreCore(Protocol):
    """The base role: where the store is, its key, its lifecycle, meta rows, stats and the rows a copy moves."""

    location: str  # where it is, for messages (no password)
    sealer: Sealer  # seals templates, keys digests (biomem.stores.sealing)
    erasure_pending: bool

    @property
    def store_id(self) -> str: ...  # random id made at creation: derived files are stamped with it

    def transaction(self) -> AbstractContextManager[Any]: ...
    def close(self) -> None: ...
    def checkpoint(self, timeout: float = 10.0) -> None: ...
    def search_index(self, dim: int, *, hnsw_threshold: int | None = None) -> SearchIndex: ...
    def get_meta(self, key: str, default: str | None = None) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def counts(self) -> dict[str, int]: ...
    # copying between stores (biomem.stores.copying): rows as COLUMNS orders them, embeddings as float32
    # bytes, sample as 0/1, ids kept
    def export_rows(self, table: str) -> Iterator[tuple]: ...
    def import_rows(self, table: str, rows: Iterable[tuple]) -> None: ...
    def id_floor(self, table: str) -> int: ...
    def set_id_floor(self, table: str, floor: int) -> None: ...


class NoteStore(Protocol):
    """Notes, links, history, derivations, vectors and listings. Every call is keyed by the note's owner."""

    def generation(self, owner_id: int) -> int: ...
    def insert_notes(self, owner_id: int, notes: list[dict[str, Any]],
                     vectors: np.ndarray) -> tuple[list[int], int]: ...  # with each note's "links" (ids of the
    # owner's notes; one deleted meanwhile is skipped), all in one transaction
    def get_note(self, owner_id: int, note_id: int) -> Note: ...
    def get_notes(self, owner_id: int, note_ids: Iterable[int]) -> list[Note]: ...
    def get_notes_among(self, owners: Sequence[int], note_ids: Iterable[int]) -> list[Note]: ...
    def all_notes(self, owner_id: int) -> list[Note]: ...
    def find_note(self, owners: Sequence[int], note_id: int) -> Note: ...
    def list_notes(self, owners: Sequence[int], *, where: Filter | None = None, excluded: Collection[int] = (),
                   offset: int = 0, limit: int | None = None) -> tuple[list[Note], int]: ...
    def note_ids_where(self, owner_id: int, where: Filter) -> np.ndarray: ...
    def hidden_notes(self, people: Sequence[int], owners: Sequence[int]) -> set[int]: ...
    def circles(self, owner_id: int) -> dict[int, tuple[int | None, frozenset[int]]]: ...
    def note_vectors(self, owner_id: int) -> tuple[np.ndarray, np.ndarray | None, int]: ...
    def update_note(self, owner_id: int, note_id: int, event: str, vector: np.ndarray | None = None,
                    actor: int | None = None, cause: int | None = None, **fields: Any) -> tuple[Note, int]: ...
    def evolved_by(self, owner_id: int, cause_id: int) -> dict[int, int]: ...  # note -> its evolve row by cause
    def derivations(self, owner_id: int, note_id: int) -> tuple[list[Event], dict[int, list[int]]]: ...  # the
    # owner's add/evolve/update events from the note's add on, and the sources of later notes (stores.derivations)
    def unevolve(self, owner_id: int, note_id: int, since: int, until: int | None, context: str, tags: list[str],
                 vector: np.ndarray) -> tuple[Note, int]: ...  # undo evolution from row since (agent.undo_evolution)
    def delete_note(self, owner_id: int, note_id: int, *, keep_history: bool = False,
                    actor: int | None = None) -> tuple[Note, int]: ...
    def add_links(self, owner_id: int, source_id: int, target_ids: Iterable[int]) -> None: ...
    def history(self, owner_id: int, note_id: int) -> list[dict[str, Any]]: ...
    def note_total(self) -> int: ...
    def note_summary(self, owners: Sequence[int] | None = None) -> dict[int, tuple[int, str]]: ...


class IdentityStore(Protocol):
    """Enrolled people and their sealed templates, groups (owners of shared notes, never matched:
    biomem.engine.groups) and their members, and forgetting an identity."""

    def add_identity(self, label: str, modality: str, templates: np.ndarray, *, sample: bool = False) -> Identity: ...
    def add_templates(self, identity_id: int, modality: str, templates: np.ndarray) -> None: ...
    def templates_version(self) -> str: ...
    def identity(self, identity_id: int) -> Identity: ...  # a person or a group
    def person(self, identity_id: int) -> Identity: ...  # an enrolled person only
    def identities(self) -> list[Identity]: ...  # enrolled people
    def add_group(self, label: str, members: Sequence[int] = ()) -> Identity: ...
    def add_member(self, group_id: int, identity_id: int) -> bool: ...
    def remove_member(self, group_id: int, identity_id: int) -> list[int]: ...  # ids of the notes erased
    def group(self, group_id: int) -> Group: ...
    def groups_of(self, identity_id: int) -> list[Group]: ...
    def group_ids(self, identity_id: int) -> list[int]: ...
    def all_groups(self) -> list[Group]: ...
    def templates(self, modality: str) -> tuple[np.ndarray, np.ndarray]: ...
    def modalities(self, identity_id: int | None = None) -> list[str]: ...
    def delete_identity(self, identity_id: int) -> list[int]: ...  # other owners whose notes changed
    def rekey(self, key: bytes) -> None: ...


class ThresholdStore(Protocol):
    """Each modality's stored τ, step-up τ and the gate's ambiguity margin δ, with their provenance."""

    def threshold(self, modality: str, *, step_up: bool = False) -> tuple[float, str] | None: ...
    def calibrated(self) -> list[str]: ...
    def set_threshold(self, modality: str, tau: float, source: str, *, step_up: bool = False,
                      column: str | None = None) -> None: ...
    def margin(self, modality: str) -> tuple[float, str] | None: ...  # the gate's ambiguity margin δ
    def set_margin(self, modality: str, delta: float, source: str) -> None: ...


class AttemptStore(Protocol):
    """Attempt limits, over keyed digests of client keys (biomem.identity.limits.AttemptLimiter)."""

    def attempt_wait(self, clients: list[str], now: float) -> float: ...
    def attempt_miss(self, clients: list[str], now: float, limits: AttemptLimits,
                     misses: int = 1) -> list[tuple[str, float]]: ...


class KeyStore(Protocol):
    """Service API keys, digests only (PostgreSQL: written and listed by the tables' owner, looked up by the
    engine's role)."""

    def add_api_key(self, name: str, role: str, digest: str, prefix: str) -> int: ...
    def api_key(self, digest: str) -> tuple[int, str, str] | None: ...
    def api_keys_in_use(self) -> bool: ...  # whether an unrevoked key exists
    def api_keys(self) -> list[dict[str, Any]]: ...  # the operator's listing
    def revoke_api_key(self, key_id: int) -> bool: ...


class MemoryStore(StoreCore, NoteStore, IdentityStore, ThresholdStore, AttemptStore, KeyStore, Protocol):
    """What the engine asks of a store: every role. A caller that needs one role declares that role."""


class SealedTemplates:
    """What both stores share about sealed templates: the key check and each row's context.

    A template is sealed with its store id, owner and modality as associated data, so a sealed
    row moved to another owner or store does not open. Copying a store keeps its store id.
    """

    sealer: Sealer
    get_meta: Any

    @staticmethod
    def open_sealer(key: bytes | None, check: str | None, settings: Settings | None) -> Sealer:
        """The template sealer for a store whose stored check value is `check` (None: a new store,
        whose key is then created if there is none yet); KeyUnavailableError for the wrong key."""
        sealer = Sealer(key if key is not None else load_key(create=check is None, settings=settings))
        if check is not None:
            sealer.verify(bytes.fromhex(check), b"key-check")
        return sealer

    @property
    def store_id(self) -> str:
        """Random id of this store, made at creation: index files are stamped with it."""
        return self.get_meta("store_id")

    def _context(self, identity_id: int, modality: str) -> bytes:
        return f"template:{self.store_id}:{int(identity_id)}:{modality}".encode()

    def _seal_row(self, vector: np.ndarray, identity_id: int, modality: str) -> bytes:
        return self.sealer.seal(vector, self._context(identity_id, modality))

    def _open_rows(self, rows: Sequence[tuple[int, bytes]], modality: str) -> np.ndarray:
        """The template matrix of (identity id, sealed blob) rows."""
        if not rows:
            return np.zeros((0, 0), np.float32)
        return np.stack([self.sealer.open(blob, self._context(owner, modality)) for owner, blob in rows])


def is_postgres(location: str | Path) -> bool:
    """Whether `location` names a PostgreSQL database rather than an SQLite file."""
    return isinstance(location, str) and urlsplit(location).scheme in POSTGRES_SCHEMES


def sqlite_path(location: str | Path) -> Path:
    """The file of an SQLite location: a path, or a `sqlite:///relative` / `sqlite:////absolute` URL."""
    text = str(location)
    if text.startswith("sqlite:"):
        if not text.startswith("sqlite:///"):
            raise InvalidInputError(f"an SQLite URL is sqlite:///path/to/file.db, got {text!r}")
        return Path(text.removeprefix("sqlite:///"))
    return Path(location)


def without_password(url: str) -> str:
    """`url` with any password replaced by ***: what messages and logs may show."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
