"""BioMemoryClient: the engine's Python API over HTTP, against `biomem serve`.

    from biomem.client import BioMemoryClient
    from biomem.errors import NoFaceError

    with BioMemoryClient("http://127.0.0.1:7860", api_key="bm_...") as bm:
        bm.add("My locker is 42", probe="me.jpg")
        bm.ask("Where is my locker?", probe="me.jpg").text
        with bm.session("me.jpg") as me:          # the gate runs once on the server
            me.search("locker").notes
            me.delete(note_id, probe="me_now.jpg")  # changes still need a fresh probe
        home = bm.create_group("Home", probe="me.jpg")                  # a household, founded in person
        bm.add_member(home.id, probe="me.jpg", member_probe="ben.jpg")  # Ben joins in person
        bm.add("The Wi-Fi password is ...", probe="me.jpg", scope=home.id)
        bm.search("wifi", probe="ben.jpg", filters={"scope": home.id})

A probe is one of:

- an image: a path, bytes, a numpy array or a PIL image (sent as the multipart file `probe`);
- a burst, `Burst([frame1, frame2, frame3])` (biomem.Burst: 1 to 10 frames of one person from one camera,
  each an image as above), fused into one probe by the server (the file field sent once per frame);
- {modality: image} for several modalities, where a value may be a Burst or a list or tuple of frames (a
  burst of that modality): `{"face-arcface-s": [f1, f2, f3], "palm-compcode": "palm.png"}`;
- (admin key) a biomem.Probe embedding, or {modality: Probe}; such a body goes as JSON, with any burst beside
  it as a list of base64 frames.

A top-level list or tuple is refused (InvalidInputError) before anything is sent: the engine reads one as
several probes for the gate to fuse (one per modality), a burst is `Burst([...])`, and which one was meant is
not the client's to guess.

Refusals raise the same biomem.errors class as the engine (NoFaceError, UnknownIdentityError,
NoteNotFoundError, TooManyAttemptsError with retry_after, ...), with the server's readable message and
`.status` / `.title`; HTTP-level refusals (body too large, wrong content type) are InvalidInputError, a
missing or wrong key AuthenticationError.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from .. import errors
from ..stores.records import Group, Identity, Note
from .bodies import request_body

SESSION_HEADER = "X-Biomem-Session"
FALLBACK = {401: errors.AuthenticationError, 403: errors.AuthenticationError, 413: errors.InvalidInputError,
            415: errors.InvalidInputError, 422: errors.InvalidInputError}


class ServiceError(errors.BioMemError):
    """A refusal without an engine class of its own (a missing route, a server fault)."""


@dataclass
class RemoteSearchResult:
    """A gated search as the server disclosed it: the owner's notes with scores, linked notes, the gate view."""

    notes: list[tuple[Note, float]]
    gate: dict[str, Any]
    gated_out: dict[str, Any] | None
    linked: list[tuple[Note, int]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return self.raw


@dataclass
class RemoteAnswer(RemoteSearchResult):
    """An answer from the requester's own notes only."""

    text: str = ""


def note_of(data: dict[str, Any]) -> Note:
    """A Note from the API's memory item (`note.scope`: None for one's own note, else its household's id)."""
    owner = data.get("owner", 0)
    return Note(id=data["id"], owner=owner, content=data.get("content", data["memory"]),
                timestamp=data.get("timestamp", ""), keywords=data.get("keywords") or [],
                tags=data.get("tags") or [], context=data.get("context") or "", links=data.get("links") or [],
                author=data.get("author", owner), metadata=data.get("metadata") or {},
                hidden_from=data.get("hidden_from") or [])


def group_of(data: dict[str, Any]) -> Group:
    """A Group from the API's household item."""
    return Group(id=data["id"], label=data["label"], members=list(data.get("members") or []),
                 member_labels=list(data.get("member_labels") or []))


def _search_result(data: dict[str, Any], cls: type[RemoteSearchResult] = RemoteSearchResult,
                   **extra: Any) -> Any:
    return cls(notes=[(note_of(n), n.get("score", 0.0)) for n in data["results"]], gate=data.get("gate", {}),
               gated_out=data.get("gated_out"), linked=[(note_of(n), n["via"]) for n in data.get("linked", [])],
               raw=data, **extra)


def raise_for_error(response: httpx.Response) -> None:
    """The biomem.errors class the JSON error names, raised with the server's message (nothing if 2xx)."""
    if response.status_code < 400:
        return
    try:
        error = response.json()["error"]
        kind, title, message = error["type"], error["title"], error["message"]
    except (ValueError, KeyError, TypeError):
        kind, title, message = "", "Refused", response.text[:200] or response.reason_phrase
    cls = getattr(errors, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.BioMemError)):
        cls = FALLBACK.get(response.status_code, ServiceError)
    if cls is errors.TooManyAttemptsError:
        exc: errors.BioMemError = cls(message, retry_after=float(response.headers.get("retry-after", 60)))
    else:
        exc = cls(message)
    exc.status, exc.title = response.status_code, title  # type: ignore[attr-defined]
    raise exc


class _Calls:
    """What a client and a client-side session share: one request, its error raised as the engine's."""

    http: httpx.Client
    headers: dict[str, str]

    def _call(self, method: str, path: str, *, fields: dict[str, Any] | None = None, probe: Any = None,
              images: Sequence[Any] | dict[str, Sequence[Any]] = (), member_probe: Any = None,
              params: dict[str, Any] | None = None,
              expect_body: bool = True) -> Any:
        sent = fields or probe is not None or images or member_probe is not None
        body = request_body(fields or {}, probe, images, member_probe) if sent else {}
        if params:
            body["params"] = {k: v for k, v in params.items() if v is not None}
        response = self.http.request(method, f"/v1{path}", headers=self.headers, **body)
        raise_for_error(response)
        return response.json() if expect_body and response.content else None


class RemoteSession(_Calls):
    """A session on the server, opened with one probe: calls act as that person without a probe."""

    def __init__(self, client: BioMemoryClient, reply: dict[str, Any]) -> None:
        self.http, self.token = client.http, reply["session"]
        self.label, self.broad, self.expires_in = reply["label"], reply["broad"], reply["expires_in"]
        self.headers = {**client.headers, SESSION_HEADER: self.token}

    def search(self, query: str, *, k: int = 10, links: int = 0, filters: dict[str, Any] | None = None,
               threshold: float | None = None) -> RemoteSearchResult:
        """Gated search as the session's person: their notes and their households' (`filters` narrow them)."""
        return _search_result(self._call("POST", "/search", fields=_search_fields(query, k, links, filters,
                                                                                  threshold)))

    def ask(self, question: str, *, k: int = 10, links: int = 0) -> RemoteAnswer:
        """An answer from the session's person's notes."""
        data = self._call("POST", "/ask", fields={"question": question, "k": k, "links": links})
        return _search_result(data, RemoteAnswer, text=data["answer"])

    def add(self, text: str, *, scope: int | None = None, hidden_from: Sequence[int] = (),
            metadata: dict[str, Any] | None = None, timestamp: str | None = None, infer: bool = True) -> Note:
        """Remember `text` for the session's person (or, with `scope`, in a household of theirs)."""
        data = self._call("POST", "/memories", fields={"text": text, "timestamp": timestamp, "infer": infer,
                                                       **_placement(scope, hidden_from, metadata)})
        return note_of(data["results"][0])

    def get(self, note_id: int) -> Note:
        """One of the person's notes (NoteNotFoundError for anyone else's)."""
        return note_of(self._call("GET", f"/memories/{int(note_id)}"))

    def get_all(self, *, filters: dict[str, Any] | None = None, page: int = 1,
                page_size: int | None = None) -> list[Note]:
        """The notes the person may read, theirs and their households', oldest first, that match `filters`; page
        `page` of `page_size` (the session must be broad: opened with a step-up-clear probe)."""
        params = {"filters": json.dumps(filters) if filters is not None else None,
                  "page": page if page != 1 else None, "page_size": page_size}
        return [note_of(n) for n in self._call("GET", "/memories", params=params)["results"]]

    def groups(self) -> list[Group]:
        """The person's households, with their members."""
        return [group_of(g) for g in self._call("POST", "/groups/mine")["results"]]

    def history(self, note_id: int) -> list[dict[str, Any]]:
        """A note's events, oldest first."""
        return self._call("GET", f"/memories/{int(note_id)}/history")["results"]

    def update(self, note_id: int, text: str, *, probe: Any) -> Note:
        """Rewrite a note: a fresh step-up probe of the session's person."""
        return note_of(self._call("PUT", f"/memories/{int(note_id)}", fields={"text": text}, probe=probe))

    def delete(self, note_id: int, *, probe: Any, keep_history: bool = False) -> Note:
        """Delete a note: a fresh step-up probe of the session's person."""
        fields = {"keep_history": keep_history} if keep_history else None
        return note_of(self._call("DELETE", f"/memories/{int(note_id)}", fields=fields, probe=probe))

    def forget(self, *, probe: Any) -> int:
        """Erase this session's person (a fresh step-up probe of them); the session ends."""
        return self._call("DELETE", "/identities/me", probe=probe)["id"]

    def close(self) -> None:
        """End the session on the server (an already ended one is fine)."""
        try:
            self._call("DELETE", "/sessions", expect_body=False)
        except errors.SessionExpiredError:
            pass

    def __enter__(self) -> RemoteSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BioMemoryClient(_Calls):
    """`biomem serve` at `base_url`, called with `api_key` (None for a keyless local server)."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 120.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, transport=transport)
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> BioMemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def health(self) -> dict[str, Any]:
        """Status (and the store's counts for an admin key)."""
        return self._call("GET", "/health")

    def enroll(self, label: str, images: Iterable[Any] | dict[str, Iterable[Any]] | Any,
               modality: str | None = None) -> Identity:
        """Enrol a person from one or more captures, or {modality: captures} of several kinds at once (an admin
        key's way to enrol a look-alike relative with a palm beside the face)."""
        if isinstance(images, dict):
            many: Any = {name: list(items) if isinstance(items, (list, tuple)) else [items]
                         for name, items in images.items()}
        else:
            many = list(images) if isinstance(images, (list, tuple)) else [images]
        data = self._call("POST", "/identities", fields={"label": label, "modality": modality}, images=many)
        return Identity(data["id"], data["label"])

    def session(self, probe: Any, *, ttl: float | None = None) -> RemoteSession:
        """Open a session with one probe; use it as a context manager."""
        return RemoteSession(self, self._call("POST", "/sessions", fields={"ttl": ttl}, probe=probe))

    def add(self, text: str, *, probe: Any = None, identity: int | None = None, scope: int | None = None,
            hidden_from: Sequence[int] = (), metadata: dict[str, Any] | None = None, timestamp: str | None = None,
            infer: bool = True) -> Note:
        """Remember `text` for the probe's owner, or (admin key) for `identity`; with `scope`, in a household of
        theirs, never retrieved by the members of `hidden_from`; `metadata` a small JSON object filters read."""
        return self.add_messages(None, text=text, probe=probe, identity=identity, scope=scope,
                                 hidden_from=hidden_from, metadata=metadata, timestamp=timestamp, infer=infer)[0]

    def add_messages(self, messages: list[dict[str, str]] | None, *, text: str | None = None, probe: Any = None,
                     identity: int | None = None, scope: int | None = None, hidden_from: Sequence[int] = (),
                     metadata: dict[str, Any] | None = None, timestamp: str | None = None,
                     infer: bool = True) -> list[Note]:
        """Mem0's add: each non-system message (or `text`) becomes a note of the probe's owner."""
        fields = {"text": text, "messages": messages, "identity": identity, "timestamp": timestamp, "infer": infer,
                  **_placement(scope, hidden_from, metadata)}
        return [note_of(n) for n in self._call("POST", "/memories", fields=fields, probe=probe)["results"]]

    def search(self, query: str, *, probe: Any, k: int = 10, links: int = 0, filters: dict[str, Any] | None = None,
               threshold: float | None = None) -> RemoteSearchResult:
        """Gated search: only notes the probe's owner may read (theirs, their households') can come back;
        `filters` narrow them, `threshold` is the least cosine a hit needs."""
        return _search_result(self._call("POST", "/search", fields=_search_fields(query, k, links, filters, threshold),
                                         probe=probe))

    def ask(self, question: str, *, probe: Any, k: int = 10, links: int = 0) -> RemoteAnswer:
        """An answer from the probe's owner's notes only."""
        data = self._call("POST", "/ask", fields={"question": question, "k": k, "links": links}, probe=probe)
        return _search_result(data, RemoteAnswer, text=data["answer"])

    def get(self, note_id: int, *, probe: Any) -> Note:
        """One of the requester's notes (through a short session)."""
        with self.session(probe) as me:
            return me.get(note_id)

    def get_all(self, *, probe: Any, filters: dict[str, Any] | None = None, page: int = 1,
                page_size: int | None = None) -> list[Note]:
        """The notes the requester may read, oldest first, that match `filters` (page `page` of `page_size`):
        a broad read, so the probe must clear the step-up match."""
        with self.session(probe) as me:
            return me.get_all(filters=filters, page=page, page_size=page_size)

    def history(self, note_id: int, *, probe: Any) -> list[dict[str, Any]]:
        """A note's events (through a short session)."""
        with self.session(probe) as me:
            return me.history(note_id)

    def update(self, note_id: int, text: str, *, probe: Any) -> Note:
        """Rewrite a note (fresh step-up probe)."""
        return note_of(self._call("PUT", f"/memories/{int(note_id)}", fields={"text": text}, probe=probe))

    def delete(self, note_id: int, *, probe: Any, keep_history: bool = False) -> Note:
        """Delete a note (fresh step-up probe)."""
        fields = {"keep_history": keep_history} if keep_history else None
        return note_of(self._call("DELETE", f"/memories/{int(note_id)}", fields=fields, probe=probe))

    def forget(self, *, probe: Any = None, identity: int | None = None) -> int:
        """Erase the requester (fresh step-up probe) or, with an admin key, identity `identity`."""
        if (probe is None) == (identity is None):
            raise errors.InvalidInputError("forget() takes exactly one of probe= or identity=")
        if identity is not None:
            return self._call("DELETE", f"/identities/{int(identity)}")["id"]
        return self._call("DELETE", "/identities/me", probe=probe)["id"]

    # ---- households ---------------------------------------------------------------------------

    def create_group(self, label: str, *, probe: Any = None, identity: int | None = None) -> Group:
        """Found a household: the requester (a fresh step-up probe) or, with an admin key, person `identity`
        is its first member."""
        if (probe is None) == (identity is None):
            raise errors.InvalidInputError("create_group() takes exactly one of probe= or identity=")
        if identity is not None:
            return group_of(self._call("POST", "/admin/groups", fields={"label": label, "identity": int(identity)}))
        return group_of(self._call("POST", "/groups", fields={"label": label}, probe=probe))

    def add_member(self, group_id: int, *, probe: Any = None, member_probe: Any = None,
                   identity: int | None = None) -> Group:
        """Add someone to a household: a member's fresh probe and the newcomer's own (`member_probe`), or, with
        an admin key, person `identity`."""
        if identity is not None:
            if probe is not None or member_probe is not None:
                raise errors.InvalidInputError("add_member() takes probe= and member_probe=, or identity= alone")
            return group_of(self._call("POST", f"/admin/groups/{int(group_id)}/members",
                                       fields={"identity": int(identity)}))
        if probe is None or member_probe is None:
            raise errors.InvalidInputError("add_member() needs the member's probe= and the newcomer's member_probe=")
        return group_of(self._call("POST", f"/groups/{int(group_id)}/members", probe=probe,
                                   member_probe=member_probe))

    def remove_member(self, group_id: int, member_id: int, *, probe: Any = None,
                      operator: bool = False) -> Group | None:
        """Take a member out of a household (a member's fresh probe, or operator=True with an admin key); None
        when the last member left and the household was erased."""
        if operator == (probe is not None):
            raise errors.InvalidInputError("remove_member() takes either a member's probe= or operator=True")
        path = f"/groups/{int(group_id)}/members/{int(member_id)}"
        data = self._call("DELETE", f"/admin{path}") if operator else self._call("DELETE", path, probe=probe)
        return group_of(data["group"]) if data.get("group") else None

    def groups(self, *, probe: Any) -> list[Group]:
        """The requester's households, with their members."""
        return [group_of(g) for g in self._call("POST", "/groups/mine", probe=probe)["results"]]

    def delete_group(self, group_id: int, *, probe: Any = None, operator: bool = False) -> int:
        """Erase a household and its notes (a member's fresh probe, or operator=True with an admin key)."""
        if operator == (probe is not None):
            raise errors.InvalidInputError("delete_group() takes either a member's probe= or operator=True")
        path = f"/groups/{int(group_id)}"
        data = self._call("DELETE", f"/admin{path}") if operator else self._call("DELETE", path, probe=probe)
        return data["id"]


def _placement(scope: int | None, hidden_from: Sequence[int], metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The fields of an add that say where a note goes and what it carries (left out when not given)."""
    return {"scope": scope, "hidden_from": list(hidden_from) if hidden_from else None, "metadata": metadata}


def _search_fields(query: str, k: int, links: int, filters: dict[str, Any] | None,
                   threshold: float | None) -> dict[str, Any]:
    return {"query": query, "k": k, "links": links, "filters": filters, "threshold": threshold}
