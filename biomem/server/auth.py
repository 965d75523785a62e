"""Who is calling: the API key of a request, its role, and its keys for the attempt limits.

    Authorization: Bearer bm_...      (or X-API-Key: bm_...)

With at least one unrevoked key in the store, a request without a valid key is refused (401) and a
route outside the key's role is 403. A store with no key serves requests without one as an
`agent`, and only on a loopback address (`biomem serve` refuses any other; an app bound elsewhere
never serves a keyless request, even once its last key is revoked). A key never says who the
*person* is: that is always the probe (or a session opened with one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPBearer
from starlette.concurrency import run_in_threadpool

from ..engine import access
from ..engine.keys import ApiKey, any_keys, authenticate
from ..engine.origins import admitted, loopback  # noqa: F401  (loopback: re-exported for the CLI)
from ..identity.limits import client_keys
from ..stores import KeyStore
from .errors import ApiError

ANONYMOUS = "anonymous"  # what sessions are bound to on a store without keys (loopback only)
LOCAL_KEY = ApiKey(0, "local", "agent")  # every keyless caller while open_without_key (loopback only)


@dataclass(frozen=True)
class Caller:
    """The service caller of one request: its key (None on a store without keys) and client keys."""

    key: ApiKey | None
    address: str
    clients: list[str] = field(default_factory=list)  # attempt limits: [key tag, "address:<ip>"]

    @property
    def role(self) -> str:
        return self.key.role if self.key else "agent"

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    @property
    def tag(self) -> str:
        """What this caller's sessions are bound to."""
        return self.key.tag if self.key else ANONYMOUS

    def require(self, door: str, what: str) -> None:
        """NotAuthorisedError (403) unless this caller's role opens `door` (biomem.engine.access)."""
        access.require(door, self.role, what)


def presented_key(request: Request) -> str | None:
    """The secret the request carries: `Authorization: Bearer <key>` or `X-API-Key: <key>`."""
    scheme, _, secret = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and secret.strip():
        return secret.strip()
    return request.headers.get("x-api-key", "").strip() or None


def address_of(request: Request, trust_proxy: bool) -> list[str]:
    """["address:<client ip>"], behind a trusted proxy its last X-Forwarded-For hop."""
    host = request.client.host if request.client else ""
    return client_keys(None, host, request.headers.get("x-forwarded-for"), trust_proxy=trust_proxy)


def open_without_key(store: KeyStore, local: bool) -> bool:
    """Whether a request without a key is served: only on a loopback-bound server whose store holds no
    unrevoked key (revoking the last key of a public server does not open it)."""
    return local and not any_keys(store)


def caller_key(store: KeyStore, secret: str | None, local: bool) -> ApiKey | None:
    """The ApiKey of `secret`; LOCAL_KEY for no secret when open_without_key; else None (refused).
    The one key policy of both doors, /v1 and /mcp."""
    if secret is not None:
        return authenticate(store, secret)
    return LOCAL_KEY if open_without_key(store, local) else None


def authenticator(store: KeyStore, local: bool) -> Callable[[str | None], ApiKey | None]:
    """caller_key over `store`, as a function of the secret alone (what the MCP endpoint takes)."""
    return lambda secret: caller_key(store, secret, local)


async def identify_caller(request: Request, *, optional: bool = False) -> Caller:
    """The Caller of `request`; ApiError 401 for a missing, unknown or revoked key (unless `optional`,
    which gives an anonymous agent instead, for the health check). Read once per request."""
    known = getattr(request.state, "caller", None)
    if known is not None:
        return known
    state = request.app.state
    secret = presented_key(request)
    key = await run_in_threadpool(caller_key, state.mem.store, secret, state.local)  # SQLite: off the event loop
    if key is None and not optional:
        raise ApiError(401, "AuthenticationError",
                       "This API key is unknown or revoked." if secret else
                       "Send an API key: Authorization: Bearer <key> (biomem keys create NAME).",
                       title="Not authorised", headers={"WWW-Authenticate": "Bearer"})
    if key is LOCAL_KEY and not optional:
        refuse_remote(request)
    key = None if key is LOCAL_KEY else key  # a keyless local caller: an agent bound to ANONYMOUS
    addresses = address_of(request, state.settings.trust_proxy)
    who = Caller(key, addresses[-1].removeprefix("address:"), [*([key.tag] if key else []), *addresses])
    if not optional:
        request.state.caller = who
    return who


# Declared for the OpenAPI document ("Authorize" in /v1/docs); identify_caller reads the headers itself.
BEARER = HTTPBearer(auto_error=False, description="an API key from `biomem keys create NAME --role agent|admin`")
API_KEY = APIKeyHeader(name="X-API-Key", auto_error=False, description="the same key, as a header")


async def caller(request: Request, _bearer: Any = Depends(BEARER), _key: Any = Depends(API_KEY)) -> Caller:
    """FastAPI dependency: the authenticated caller of a route."""
    return await identify_caller(request)


async def maybe_caller(request: Request, _bearer: Any = Depends(BEARER), _key: Any = Depends(API_KEY)) -> Caller:
    """FastAPI dependency: the caller if it shows a valid key, else an anonymous agent (never 401)."""
    return await identify_caller(request, optional=True)


def door_of(request: Request) -> str:
    """The access table's name of the REST route `request` matched: "rest:POST /ask" (under /v1)."""
    route = request.scope.get("route")
    methods = getattr(route, "methods", None) or {request.method}
    return f"rest:{request.method if len(methods) == 1 else '*'} {getattr(route, 'path', request.url.path)}"


async def authorised(request: Request) -> None:
    """Router dependency: the matched route's role from biomem.engine.access, checked before its handler runs
    (401 without a valid key, 403 for a role it does not open)."""
    door = door_of(request)
    if access.required(door) != access.PUBLIC:
        (await identify_caller(request)).require(door, "This route")


def refuse_remote(request: Request) -> None:
    """A keyless caller must be local by its Host and Origin too (biomem.engine.origins): a web page cannot reach a
    keyless server through DNS rebinding or a cross-site form post (ApiError 403)."""
    if not admitted(request.headers, request.app.state.hosts):
        raise ApiError(403, "AuthenticationError", "A server without API keys answers local callers only.",
                       title="Not authorised")
