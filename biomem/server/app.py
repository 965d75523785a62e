"""One ASGI app over one store: the REST API at /v1, MCP at /mcp, the Gradio page at /.

    app = create_app(mem, settings)             # FastAPI; `biomem serve` runs it with uvicorn
    with served(app) as url:                    # tests: uvicorn in a thread on a free 127.0.0.1 port
        httpx.get(f"{url}/v1/health")

Bodies of /v1 and /mcp are capped at MAX_BODY before they are read (413), and a JSON one whose object holds a
key twice is refused (REST's 422 as biomem.server.probes parses it; MCP's JSON-RPC parse error here); every
refusal is the JSON error of biomem.server.errors. The page keeps the app's privacy settings (no analytics, no
run history, no Gradio MCP). Other ASGI apps join through `mounts=` (path, app) and `lifespans=`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from importlib.resources import files
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from .. import __version__
from ..engine.aio import AsyncBioMemory
from ..engine.memory import BioMemory
from ..engine.origins import loopback, served_names
from ..settings import Settings
from . import errors, rest
from .auth import address_of, authenticator
from .errors import ApiError, api_response, error_json
from .models import repeated_key
from .probes import MAX_BODY

log = logging.getLogger("biomem.server")

ASGIApp = Callable[..., Any]
Lifespan = Callable[[FastAPI], contextlib.AbstractAsyncContextManager[Any]]
DOCS = "/v1/docs"  # Swagger UI, with its script, styles and icon served below it
DOCS_ASSETS = "fastapi_standalone_docs"  # the pinned package that ships Swagger UI's files
LIMITED = ("/v1", "/mcp")  # paths whose bodies MAX_BODY caps (the page has Gradio's own max_file_size)
PARSE_ERROR = -32700  # JSON-RPC's code for a body that cannot be read
DESCRIPTION = """Identity-gated memory for LLM agents. Every memory belongs to a biometric identity: the
probe in the request (an image) or a session opened with one decides who is asking, never a user id.
A stranger gets empty results. Authenticate with `Authorization: Bearer <key>` (`biomem keys create`)."""


class BodyLimit:
    """ASGI middleware: a body over `limit` bytes is a 413 before it is read (by Content-Length), or as
    soon as it passes the limit (chunked); only for paths under `prefixes`."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY, prefixes: Sequence[str] = LIMITED) -> None:
        self.app, self.limit, self.prefixes = app, limit, tuple(prefixes)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefixes):
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length and (not length.isdigit() or int(length) > self.limit):
            return await self._refuse(send)
        seen = 0

        async def counted() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise ApiError(413, "PayloadTooLarge", self._message())
            return message
        await self.app(scope, counted, send)

    def _message(self) -> str:
        return f"The body is over {self.limit // (1024 * 1024)} MB: send a smaller image."

    async def _refuse(self, send: Callable) -> None:
        body = json.dumps(error_json("PayloadTooLarge", "Body too large", self._message())).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


class OnceEachKey:
    """ASGI middleware: a JSON body under `prefixes` (MCP's) with an object that holds a key twice is refused before
    the MCP SDK reads it (models.repeated_key), with JSON-RPC's parse error naming the key. It runs inside
    BodyLimit, so the body it reads is bounded. (REST bodies are checked as they are parsed: biomem.server.probes.)"""

    def __init__(self, app: ASGIApp, prefixes: Sequence[str] = ("/mcp",)) -> None:
        self.app, self.prefixes = app, tuple(prefixes)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefixes):
            return await self.app(scope, receive, send)
        kind = dict(scope["headers"]).get(b"content-type", b"").split(b";")[0].strip().lower()
        if not (kind == b"application/json" or kind.endswith(b"+json")):
            return await self.app(scope, receive, send)
        chunks, more = [], True
        try:
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client left
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
        except ApiError as exc:  # BodyLimit's 413 of a chunked body
            return await api_response(exc)(scope, receive, send)
        body = b"".join(chunks)
        key = await run_in_threadpool(repeated_key, body)  # 60 ms for the largest body: not on the event loop
        if key is not None:
            return await self._refuse(scope, receive, send, key)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()  # a disconnect, after the body
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(scope: dict, receive: Callable, send: Callable, key: str) -> None:
        """JSON-RPC's parse error, as the SDK answers a body it cannot parse."""
        message = f"the key {key[:40]!r} is sent twice in one JSON object: send each key once"
        await JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
            "code": PARSE_ERROR, "message": f"Parse error: {message}"}}, status_code=400)(scope, receive, send)


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The OpenAPI document, with the body models the routes describe by reference."""
    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in rest.BODIES:
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(body.pop("$defs", {}))
            components[model.__name__] = body
        app.openapi_schema = schema
        return schema
    return build


def create_app(mem: BioMemory, settings: Settings | None = None, *, ui: bool = True, mcp: bool = True,
               amem: AsyncBioMemory | None = None, mounts: Sequence[tuple[str, ASGIApp]] = (),
               lifespans: Sequence[Lifespan] = ()) -> FastAPI:
    """FastAPI over `mem`: REST at /v1, MCP at /mcp (when biomem.server.mcp is there and `mcp`), extra
    `mounts` (path, ASGI app) with their `lifespans`, and the Gradio page at / (`ui`). The caller
    keeps `mem` and closes it."""
    settings = settings or Settings.from_env()
    amem = amem or AsyncBioMemory(mem)
    spans: list[Lifespan] = list(lifespans)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for span in spans:
                await stack.enter_async_context(span(app))
            yield

    app = FastAPI(title="Bio-Memory", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url="/v1/openapi.json")
    app.state.mem, app.state.amem, app.state.settings = mem, amem, settings
    app.state.local = loopback(settings.host)  # keyless requests are served only on a loopback bind
    app.state.hosts = served_names(settings)  # ... and only when they name this server (biomem.engine.origins)
    errors.install(app)
    app.add_middleware(OnceEachKey)
    app.add_middleware(BodyLimit)  # added last: the outer one, so it bounds what OnceEachKey reads
    _mount_docs(app)  # before the router, whose last route is the 404 of anything else under /v1
    app.include_router(rest.router, prefix="/v1")
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    if mcp:
        _mount_mcp(app, spans)
    for path, sub in mounts:
        app.mount(path, sub)
    if ui:
        _mount_ui(app, mem, settings)
    return app


def _mount_docs(app: FastAPI) -> None:
    """Swagger UI at /v1/docs with its script, styles and icon served by the app itself (from the pinned
    fastapi-standalone-docs package), never from a CDN: the docs work on an offline machine. Like the
    OpenAPI document, the page needs no key; the API it documents does."""
    static = files(DOCS_ASSETS) / "static"
    app.mount(f"{DOCS}/swagger", StaticFiles(directory=str(static / "swagger")), name="docs-swagger")
    app.mount(f"{DOCS}/fastapi", StaticFiles(directory=str(static / "fastapi")), name="docs-icon")

    @app.get(DOCS, include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")  # behind a proxy's path prefix
        return get_swagger_ui_html(openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - Swagger UI",
                                   swagger_js_url=f"{root}{DOCS}/swagger/swagger-ui-bundle.js",
                                   swagger_css_url=f"{root}{DOCS}/swagger/swagger-ui.css",
                                   swagger_favicon_url=f"{root}{DOCS}/fastapi/favicon.png")


def _mount_mcp(app: FastAPI, spans: list[Lifespan]) -> None:
    """MCP at /mcp (biomem.server.mcp.build_mcp): the same store, keys and client addresses as /v1."""
    try:
        from .mcp import build_mcp
    except ImportError as exc:  # the `mcp` SDK is not installed
        log.warning("no MCP endpoint at /mcp: %s", exc)
        return
    settings: Settings = app.state.settings
    mcp_app = build_mcp(app.state.amem, host=settings.host, max_request_body_size=MAX_BODY,
                        authenticate=authenticator(app.state.mem.store, app.state.local),
                        client_address=lambda request: address_of(request, settings.trust_proxy)[-1].split(":", 1)[1])
    spans.append(lambda _: mcp_app.lifespan())
    app.add_route("/mcp", mcp_app, include_in_schema=False)  # exactly /mcp, as agent hosts are configured
    app.mount("/mcp", mcp_app)  # and below it


def _mount_ui(app: FastAPI, mem: BioMemory, settings: Settings) -> None:
    """The Gradio page at /, with the options `python app.py` launches it with."""
    import gradio as gr

    from ..ui import build_app  # sets Gradio's analytics and run-history variables before gradio loads
    from ..ui.launch import PAGE_OPTIONS

    page = build_app(mem, settings=settings)
    gr.mount_gradio_app(app, page, path="/", **PAGE_OPTIONS)
    app.state.page = page


def uvicorn_config(app: FastAPI, host: str, port: int, **options: Any) -> uvicorn.Config:
    """uvicorn's settings for this app: the socket's peer is the client address (X-Forwarded-For only
    through BIOMEM_TRUST_PROXY), no server header, no access log (addresses and paths stay out of the log)."""
    return uvicorn.Config(app, host=host, port=port, proxy_headers=False, server_header=False, access_log=False,
                          **{"log_level": "info", "timeout_graceful_shutdown": 10, **options})


@contextlib.contextmanager
def served(app: FastAPI, host: str = "127.0.0.1", port: int | None = None,
           timeout: float = 120.0) -> Iterator[str]:
    """The base URL of `app` served by uvicorn in a thread on a free port; stopped on exit."""
    from ..notes.llamacpp import free_port

    port = port or free_port()
    server = uvicorn.Server(uvicorn_config(app, host, port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="biomem-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the server did not start on {host}:{port}")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
