"""Every page event is a door of biomem.engine.access: its handler checks the requester's role first.

Anyone who reads the page's config can post to any event (Gradio's `api_visibility` only hides an
event from the docs), so the check runs in the handler, never in what the page shows. The role of a
page visitor is the role of the API key they signed in with; without one it is `public` on a store
that has keys, and on a store without keys the page is an open demo (`agent`, or `admin` with
BIOMEM_ADMIN=1), as a keyless REST caller on loopback is. Before the role, every event must name this
server in its Host and Origin headers (biomem.engine.origins), as a keyless REST caller must: a web page
that a visitor opens elsewhere cannot drive the page through DNS rebinding or a cross-site post.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

import gradio as gr

from ..engine import access
from ..engine.keys import any_keys, authenticate, digest
from ..engine.origins import admitted, served_names
from ..errors import NotAuthorisedError
from ..settings import Settings
from ..stores import MemoryStore
from .visitors import Visitors

SIGN_IN_SECONDS = 8 * 3600  # an operator's sign-in lasts a working day in one browser tab


class Operators:
    """Which page sessions signed in with which API key: the key's digest, bound to the session and its
    address, re-read from the store on every check (a revoked key stops working at once)."""

    def __init__(self, store: MemoryStore, *, admin: bool, settings: Settings | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store, self.admin, self.clock = store, admin, clock
        self.hosts = served_names(settings) if settings else frozenset()  # besides loopback (biomem.engine.origins)
        self._signed: dict[str, tuple[str, str, float]] = {}  # session hash -> (key digest, address, until)
        self._lock = threading.Lock()
        self.visitors = Visitors()

    def check_host(self, request: gr.Request | None) -> None:
        """Refuse (NotAuthorisedError) an event whose Host or Origin is not this server's: no other web site drives
        the page from a visitor's browser, by DNS rebinding or a cross-site post (biomem.engine.origins)."""
        if request is not None and not admitted(getattr(request, "headers", None) or {}, self.hosts):
            raise NotAuthorisedError("This page answers only at its own address (localhost, or a name in "
                                     "BIOMEM_ALLOWED_HOSTS): open it there.")

    def admit(self, request: gr.Request | None) -> None:
        """Refuse (NotAuthorisedError) an event whose session hash belongs to another client (biomem.ui.visitors)."""
        session, address = _who(request)
        agent = request.headers.get("user-agent", "") if request is not None and request.headers else ""
        self.visitors.admit(session, f"{address} {agent}")

    def sign_in(self, secret: str, request: gr.Request | None) -> str:
        """Bind the key `secret` to this page session; its role, or NotAuthorisedError for a wrong key."""
        key = authenticate(self.store, (secret or "").strip())
        session, address = _who(request)
        if key is None or not session:
            raise NotAuthorisedError("This API key is unknown or revoked.")
        with self._lock:
            self._forget_expired()
            self._signed[session] = (digest(secret.strip()), address, self.clock() + SIGN_IN_SECONDS)
        return key.role

    def sign_out(self, request: gr.Request | None) -> None:
        with self._lock:
            self._signed.pop(_who(request)[0], None)

    def role(self, request: gr.Request | None) -> str:
        """The role of this page session (see the module's docstring)."""
        session, address = _who(request)
        with self._lock:
            signed = self._signed.get(session)
        if signed and signed[1] == address and signed[2] > self.clock():
            row = self.store.api_key(signed[0])
            if row:
                return row[2]
        if any_keys(self.store):
            return access.PUBLIC
        return access.ADMIN if self.admin else access.AGENT

    def _forget_expired(self) -> None:
        now = self.clock()
        for session in [s for s, (_, _, until) in self._signed.items() if until <= now]:
            del self._signed[session]


def _who(request: gr.Request | None) -> tuple[str, str]:
    """(session hash, client address) of a page request; empty outside one."""
    if request is None:
        return "", ""
    return request.session_hash or "", request.client.host if request.client else ""


def door(operators: Operators, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` as the page event `name`: refused (NotAuthorisedError) unless the request names this server (Host,
    Origin) and the requester's role opens it.
    The handler gains a `request` parameter that Gradio fills; `fn` gets it too if it asks for one."""
    if name not in access.PAGE:
        raise ValueError(f"page event {name!r} is not in biomem.engine.access.PAGE")
    public = access.required(name) == access.PUBLIC
    signature = inspect.signature(fn)
    wants_request = "request" in signature.parameters
    if not wants_request:  # after the positional parameters, where Gradio puts what it fills
        params = list(signature.parameters.values())
        at = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        request = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                    annotation=gr.Request | None)
        signature = signature.replace(parameters=[*params[:at], request, *params[at:]])

    @functools.wraps(fn)
    def handler(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        request = bound.arguments.get("request")
        operators.check_host(request)  # before anything: another web site's page reaches nothing
        operators.admit(request)  # a borrowed session hash reaches no one's state
        if not public:  # every role opens a public door: its events (views, begin/end) read no keys
            access.require(name, operators.role(request), WHAT.get(name, "This"))
        if not wants_request:
            bound.arguments.pop("request", None)
        return fn(*bound.args, **bound.kwargs)

    handler.__signature__ = signature  # type: ignore[attr-defined]
    handler.__annotations__ = {**getattr(fn, "__annotations__", {}), "request": gr.Request | None}
    handler.door = name  # type: ignore[attr-defined]
    return handler


WHAT = {"page:enrol": "Enrolling people", "page:load_demo": "Loading the demo people",
        "page:calibrate_folder": "Calibrating on a server folder", "page:store_tau": "Storing τ",
        "page:import_locomo": "Importing from a server path"}
