"""Requester sessions: the gate decides once, then calls act as that owner until the session ends.

    with mem.session(probe) as me:           # one gate decision (and one probe encoding)
        me.identity, me.label
        me.search("my PIN?"); me.ask("What is my PIN?"); me.add("Locker 42"); me.get(7)
        me.get_all()                          # only if the opening probe also cleared step-up τ
        me.delete(7, probe=fresh)             # destructive: a fresh step-up probe of the same person
        me.forget(probe=fresh)                # as is erasing the person

A session of one of the demo's sample people reads as them and changes nothing (SampleReadOnlyError,
biomem.engine.access): anyone can show their captures.

A session expires after `ttl` seconds (default 120), ends when closed, and ends at once when
its person is forgotten (in this process; another process's forget ends it on the next call,
when the identity is gone). Ids are never reused (AUTOINCREMENT), so a stale session can never
act as a later person. Its token is 32 random bytes, for services that hand it to a client. Expiry
is read from one clock, the registry's (Sessions(clock=...), time.monotonic by default).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import SessionExpiredError, StepUpRequiredError, UnknownIdentityError
from ..identity.biometrics import Clients
from ..identity.gate import GateResult
from ..stores import MemoryStore
from ..stores.records import Group, Note, check_id
from .access import check_writer
from .checks import BROAD_K, check_note, check_page
from .query import Query, parsed_filters
from .results import Answer, SearchResult

DEFAULT_TTL = 120.0
MAX_SESSIONS = 10_000  # bounded memory: the oldest sessions are dropped first


class Reads(Protocol):
    """What a session reads through (biomem.engine.retrieval.Retrieval)."""

    def query(self, query: Any, *, k: Any = None, links: Any = 0, filters: Any = None, threshold: Any = None,
              question: Any = None) -> Query: ...
    def search(self, gate: GateResult, asked: Query) -> SearchResult: ...
    def answer(self, gate: GateResult, asked: Query, *, temporal: bool = False) -> Answer: ...


class Notes(Protocol):
    """The note calls a session makes for its person (biomem.engine.notebook.Notebook)."""

    def get(self, person: int, note_id: int) -> Note: ...
    def listing(self, person: int, where: Any = None, offset: int = 0, limit: int | None = None) -> list[Note]: ...
    def history(self, person: int, note_id: int) -> list[dict[str, Any]]: ...
    def update(self, person: int, note_id: int, text: str) -> Note: ...
    def delete(self, person: int, note_id: int, *, keep_history: bool = False) -> Note: ...


class Engine(Protocol):
    """What a session asks of its BioMemory (biomem.engine.memory), which opens it."""

    store: MemoryStore
    retrieval: Reads
    notebook: Notes

    def add(self, text: str, *, identity: int | None = None, scope: int | None = None, hidden_from: Any = (),
            metadata: dict[str, Any] | None = None, timestamp: Any = None, infer: bool = True) -> Note: ...
    def verify(self, probe: Any, action: str = "this action", *, client: Clients = None) -> int: ...
    def forget(self, *, identity: int | None = None) -> int: ...


@dataclass(eq=False)
class Session:
    """One requester, admitted once by the gate; every call acts as `identity`."""

    mem: Engine
    sessions: Sessions  # the registry it is in, whose clock it reads
    gate: GateResult
    label: str
    broad: bool  # the opening probe also cleared the step-up τ of every enrolled modality
    expires: float  # deadline on the registry's clock
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    bound_to: str | None = None  # e.g. the API key that opened it; checked by the service
    client: Any = None
    closed: bool = False

    @property
    def identity(self) -> int:
        return self.gate.identity  # type: ignore[return-value]

    @property
    def expires_in(self) -> float:
        return max(0.0, self.expires - self.sessions.clock())

    def _owner(self) -> int:
        """The owner, if this session is still good; SessionExpiredError otherwise."""
        if self.closed or self.sessions.clock() >= self.expires:
            raise SessionExpiredError("this session has ended: show a probe again")
        try:
            self.mem.store.identity(self.identity)
        except UnknownIdentityError:
            self.closed = True
            raise SessionExpiredError("this session's person was forgotten") from None
        return self.identity

    def _writer(self) -> int:
        """The owner, if this session is still good and may change what they own (never a sample person's)."""
        return check_writer(self.mem.store.identity(self._owner()))

    def close(self) -> None:
        """End the session (also on leaving a `with` block)."""
        self.closed = True
        self.sessions.discard(self)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- reads and adds as the owner --------------------------------------------------------

    def search(self, query: Any, *, k: int | None = None, links: int = 0, filters: Any = None,
               threshold: float | None = None) -> SearchResult:
        """search() as the owner; more than BROAD_K notes, or filters, only in a session opened at step-up τ."""
        self._owner()
        asked = self.mem.retrieval.query(query, k=k, links=links, filters=filters, threshold=threshold)
        self._check_listing(asked)
        return self.mem.retrieval.search(self.gate, asked)

    def ask(self, question: str, *, k: int | None = None, links: int = 0, temporal: bool = False,
            query: str | None = None) -> Answer:
        """ask() as the owner; more than BROAD_K notes only in a session opened at step-up τ."""
        self._owner()
        asked = self.mem.retrieval.query(query, k=k, links=links, question=question)
        self._check_listing(asked)
        return self.mem.retrieval.answer(self.gate, asked, temporal=temporal)

    def _check_listing(self, asked: Query) -> None:
        """StepUpRequiredError for a read that lists the person's notes (Query.listing) in a narrow session."""
        if not self.broad and asked.listing:
            raise StepUpRequiredError(f"a search of more than {BROAD_K} notes, or with filters, lists your notes: "
                                      "it needs a session opened with a clearer probe (the stricter step-up "
                                      "match, of every kind you enrolled)")

    def get(self, note_id: int) -> Note:
        return self.mem.notebook.get(self._owner(), check_id(note_id))

    def get_all(self, *, filters: Any = None, page: int = 1, page_size: int | None = None) -> list[Note]:
        """The notes the person may read: a broad read, so only when the opening probe cleared step-up τ."""
        owner = self._owner()
        if not self.broad:
            raise StepUpRequiredError("listing all your notes needs a session opened with a clearer probe "
                                      "(the stricter step-up match, of every kind you enrolled)")
        where, (offset, limit) = parsed_filters(filters), check_page(page, page_size)
        return self.mem.notebook.listing(owner, where, offset, limit)

    def history(self, note_id: int) -> list[dict[str, Any]]:
        return self.mem.notebook.history(self._owner(), check_id(note_id))

    def groups(self) -> list[Group]:
        """The person's groups, with their members' labels."""
        return self.mem.store.groups_of(self._owner())

    def add(self, text: str, *, scope: int | None = None, hidden_from: Any = (),
            metadata: dict[str, Any] | None = None, timestamp: Any = None, infer: bool = True) -> Note:
        return self.mem.add(text, identity=self._writer(), scope=scope, hidden_from=hidden_from, metadata=metadata,
                            timestamp=timestamp, infer=infer)

    # ---- changes: a fresh step-up probe of the same person, every time ----------------------

    def _fresh(self, probe: Any, action: str) -> int:
        """The owner, once `probe` proved them by step-up (verified once: one encoding, one limiter check); a sample
        person's session is refused before any probe is read."""
        owner = self._writer()
        if self.mem.verify(probe, action, client=self.client) != owner:
            raise StepUpRequiredError(f"{action} needs a fresh probe of this session's person: nothing was changed")
        return owner

    def update(self, note_id: int, text: str, *, probe: Any) -> Note:
        note_id, text = check_id(note_id), check_note(text)  # bad input costs no probe encoding
        return self.mem.notebook.update(self._fresh(probe, "Changing a note"), note_id, text)

    def delete(self, note_id: int, *, probe: Any, keep_history: bool = False) -> Note:
        note_id = check_id(note_id)
        return self.mem.notebook.delete(self._fresh(probe, "Deleting a note"), note_id, keep_history=keep_history)

    def forget(self, *, probe: Any) -> int:
        """Erase this session's person (see BioMemory.forget); the session ends with them."""
        return self.mem.forget(identity=self._fresh(probe, "Forgetting you"))


class Sessions:
    """The open sessions of one BioMemory: by token, ended together when their person is forgotten."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._by_token: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.clock = clock

    def open(self, mem: Engine, gate: GateResult, label: str, broad: bool, ttl: float, *,
             bound_to: str | None = None, client: Any = None) -> Session:
        """A new session of `gate`'s person for `ttl` seconds; ended and expired ones are dropped first."""
        with self._lock:
            now = self.clock()
            for token in [t for t, s in self._by_token.items() if s.closed or s.expires <= now]:
                del self._by_token[token]
            while len(self._by_token) >= MAX_SESSIONS:
                self._by_token.pop(next(iter(self._by_token))).closed = True
            session = Session(mem, self, gate, label, broad, now + ttl, bound_to=bound_to, client=client)
            self._by_token[session.token] = session
        return session

    def get(self, token: str, bound_to: str | None = None) -> Session:
        """The live session of `token` opened under `bound_to`; SessionExpiredError for anything else
        (unknown, expired, closed, or opened by another caller: all look the same)."""
        with self._lock:
            session = self._by_token.get(token) if isinstance(token, str) else None
        if session is None or session.bound_to != bound_to or not secrets.compare_digest(session.token, token):
            raise SessionExpiredError("no such session: it ended, or was never opened by this caller")
        session._owner()
        return session

    def discard(self, session: Session) -> None:
        with self._lock:
            self._by_token.pop(session.token, None)

    def end_all(self, identity: int) -> int:
        """End every session of `identity` (it was forgotten); returns how many."""
        with self._lock:
            ended = [t for t, s in self._by_token.items() if s.identity == identity]
            for token in ended:
                self._by_token.pop(token).closed = True
        return len(ended)
