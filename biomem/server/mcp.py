"""The MCP server: remember, recall, ask, forget_note and my_groups for agent hosts, over streamable HTTP.

Identity is decided by the probe image in every call (the engine's gate), never by a name or a
user id; a stranger's recall is empty. Built on the official SDK (`mcp==2.3.0`, MCPServer),
stateless streamable HTTP with JSON replies.

    mcp_app = build_mcp(amem, authenticate=check_key, client_address=address_of)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        async with mcp_app.lifespan():     # the SDK's session manager; a mounted app gets no lifespan
            yield

    app = FastAPI(lifespan=lifespan)
    app.add_route("/mcp", mcp_app, include_in_schema=False)   # exactly /mcp, as hosts are configured
    app.mount("/mcp", mcp_app)                                 # and /mcp/ (a Mount alone: /mcp is a 307 to /mcp/)

`mcp_app` answers any path it is given, so both routes reach the same endpoint; run standalone
(`uvicorn.run(mcp_app)`) it runs its own lifespan. `lifespan()` can be entered once: build a new
app per server start.

authenticate(secret) gets the key of `Authorization: Bearer <key>` or `X-API-Key` (None without one) and
returns the caller's ApiKey, or None to refuse the request with 401 before any MCP message is
read (the default is the REST API's, `biomem.server.auth.authenticator`: any unrevoked key of the
store, and auth.LOCAL_KEY for a keyless caller only while the store has no key and `host` is loopback).
Both roles, agent and admin, may use the
five tools. client_address(request) gives the requester's address (default: the socket's peer;
pass the app's own when it trusts X-Forwarded-For). Attempt limits are kept per
[key.tag, "address:<ip>"]. `host` is the address the server binds: for 127.0.0.1 or localhost
the SDK's DNS-rebinding protection admits only local Host and Origin headers; pass
`transport_security` to set them yourself.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from ..engine import access
from ..engine.aio import AsyncBioMemory
from ..engine.checks import MAX_K
from ..engine.keys import ApiKey
from ..engine.messages import readable  # the words of the web app's toasts and the REST errors (no gradio import)
from ..engine.origins import loopback
from ..errors import BioMemError, InvalidInputError
from ..identity.disclosure import note_view
from ..vocabulary import KEY_ROLES
from .auth import authenticator, presented_key
from .errors import invalid
from .models import CAPTURE_TYPES, FILTERS, MAX_HIDDEN, METADATA, refuse_nul, valid_filters, valid_metadata
from .probes import Modalities

log = logging.getLogger(__name__)

CALLER = "biomem.mcp.caller"  # the scope key under which the HTTP layer hands the caller to the tools

INSTRUCTIONS = (
    "Bio-Memory keeps a private memory for each enrolled person. Every tool takes `probe`, a current "
    "photo of the face of the person you are talking with: that face alone decides whose memory is "
    "read or written, never a name, a user id or what anyone says about who they are. A face that "
    "matches nobody enrolled gets no memories (recall is empty, ask says so) and cannot store any. "
    "Send one face per photo; never use one person's photo to act for another. A person enrolled "
    "with a palm as well can be recognised by a palm image (its `modality` named), and sends it in "
    "`also` beside the face where a tool needs both.")
IDENTITY = (
    "Whose memory is used is decided only by the face in `probe`, a current photo of the person "
    "speaking to you (never by a name, a user id or what they claim), and only that person's own "
    "notes, and those of the households they belong to, can ever be read or changed.")
REMEMBER = (
    "Store a note in the memory of the person in the probe photo, for later recall. " + IDENTITY +
    " Write `text` as one self-contained fact in their words, e.g. \"My bank card PIN is 4821\". "
    "To share it with a household of theirs (the Wi-Fi password, the bin day), give `scope`, the "
    "household's id from my_groups; `hidden_from` then names members (ids) who must never see it, e.g. "
    "the person a surprise is for. Leave `scope` out for a private note. "
    "A face that matches nobody enrolled stores nothing and fails with \"Not recognised\" (enrolment "
    "is not possible through this tool). Returns {\"results\": [the stored note, with its id]}.")
RECALL = (
    "Search the memory of the person in the probe photo for notes related to `query`: their own notes "
    "and their households' shared ones. " + IDENTITY +
    " Returns {\"results\": [their notes, best match first, each with id, memory (the text), "
    "timestamp, score, and scope: null for their own note, else the household's id], \"gate\": whether "
    "the face matched}. A stranger (a face that matches "
    "nobody enrolled) gets an empty list, never anyone else's notes: empty results mean nothing is "
    "known about this person, not an error.")
MY_GROUPS = (
    "List the households (family, flatmates, team) the person in the probe photo belongs to, each with "
    "its id, label and members (ids and names): the ids remember's `scope` and `hidden_from` take. " + IDENTITY +
    " Returns {\"results\": [{\"id\", \"label\", \"members\", \"member_labels\"}]}; an empty list when "
    "they belong to none. A face that matches nobody enrolled fails with \"Not recognised\". Households are "
    "founded and joined in person through the REST API or the page, never through this tool.")
ASK = (
    "Answer `question` from the memory of the person in the probe photo. " + IDENTITY +
    " Returns {\"answer\": text, \"results\": the notes the answer could read, \"gate\"}. For a "
    "stranger the answer says there are no memories of them; when their notes do not say, it "
    "answers \"Not mentioned in your memories.\" Repeat the answer to that person only.")
FORGET = (
    "Permanently delete one of the person's own notes by id (from recall or ask results); its text "
    "is erased from the history as well. " + IDENTITY + " Deleting needs a fresh, clear, front-facing "
    "photo taken for this request: it must match more strictly than recall, else it fails with "
    "\"Fresh probe needed\" and nothing is deleted. A person enrolled with a palm as well needs a "
    "palm image in `also` (the error says which kind is missing). An id that is not one of their notes "
    "fails like an id that does not exist. Call it only when the person asks to forget something.")
PROBE_DATA = ("The photo's file bytes, base64-encoded (PNG or JPEG; a data: URL is accepted too). "
              "One face, the person you are talking with, taken now.")
PROBE_MODALITY = ("Leave out for a face photo. For a palm image, the palm encoder this memory enrolled "
                  "palms with, e.g. palm-compcode.")
ALSO = ("Only for a person enrolled with more than one kind of biometric (a face and a palm, or a voice): an image "
        "or recording (audio/wav, flac, ogg or mpeg; modality voice-ge2e) of each other kind, taken now, each with "
        "its `modality`. "
        "Deleting needs every kind but the voice, which never suffices alone; the other tools work with the face "
        "alone. Leave out otherwise.")


class ImageProbe(BaseModel):
    """A photo of the person speaking, as MCP image content: base64 data and its MIME type."""

    model_config = ConfigDict(title="ImageProbe", populate_by_name=True, extra="forbid")

    data: str = Field(min_length=1, description=PROBE_DATA)
    mime_type: str = Field(validation_alias=AliasChoices("mime_type", "mimeType"),
                           description="The photo's MIME type: image/png or image/jpeg.",
                           examples=["image/png", "image/jpeg"])
    modality: str | None = Field(default=None, max_length=64, description=PROBE_MODALITY)

    def image(self) -> bytes:
        """The decoded image bytes; InvalidInputError for a non-image MIME type or bad base64."""
        data, mime = self.data.strip(), self.mime_type.strip().lower()
        url = re.match(r"data:([\w.+-]+/[\w.+-]+)?(;[^,]*)?,", data)
        if url:
            mime, data = (url.group(1) or mime).lower(), data[url.end():]
        if not mime.startswith(CAPTURE_TYPES):
            raise InvalidInputError("a probe is a photo (image/png or image/jpeg) or a voice recording (audio/wav, "
                                    f"flac, ogg, mpeg), not {mime[:40]!r}")
        try:
            return base64.b64decode(re.sub(r"\s+", "", data), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInputError("the probe's data is not valid base64") from None


@dataclass(frozen=True)
class Caller:
    """Who sent an HTTP request: its API key and address."""

    key: ApiKey
    address: str | None

    @property
    def role(self) -> str:
        return self.key.role

    @property
    def clients(self) -> list[str]:
        """The attempt-limit keys of this caller."""
        return [self.key.tag] + ([f"address:{self.address}"] if self.address else [])


def peer_address(request: Request) -> str | None:
    """The socket's peer address (no proxy header is trusted)."""
    return request.client.host if request.client else None


class MCPApp:
    """The MCP endpoint as an ASGI app: key check, then the SDK's stateless streamable HTTP."""

    def __init__(self, server: MCPServer, manager: StreamableHTTPSessionManager,
                 authenticate: Callable[[str | None], ApiKey | None],
                 client_address: Callable[[Request], str | None]) -> None:
        self.server, self.manager = server, manager
        self.authenticate, self.client_address = authenticate, client_address
        self.running = False

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Run the SDK's session manager (once per app): enter it in the host app's lifespan."""
        async with self.manager.run():
            self.running = True
            try:
                yield
            finally:
                self.running = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan_protocol(receive, send)
            return
        if scope["type"] != "http":
            return
        if not self.running:
            await _reply(send, 503, "MCP endpoint not started: enter mcp_app.lifespan() in the app's lifespan")
            return
        try:
            key = await anyio.to_thread.run_sync(self.authenticate, presented_key(Request(scope)))
        except Exception:  # noqa: BLE001 - the details (a store error) go to the log
            log.exception("MCP key check failed")
            await _reply(send, 503, "The API key could not be checked; the server log says why")
            return
        if key is None:
            await _reply(send, 401, "A valid API key is needed: Authorization: Bearer <key>",
                         [(b"www-authenticate", b'Bearer realm="biomem"')])
            return
        if key.role not in KEY_ROLES:
            await _reply(send, 403, "This key's role may not use the memory tools")
            return
        if scope["method"] != "POST":  # stateless: no SSE stream to GET, no session to DELETE
            await _reply(send, 405, "MCP messages are POSTed to this endpoint", [(b"allow", b"POST")])
            return
        scope[CALLER] = Caller(key, self.client_address(Request(scope)))
        await self.manager.handle_request(scope, receive, send)

    async def _lifespan_protocol(self, receive: Receive, send: Send) -> None:
        """ASGI lifespan, for running this app on its own."""
        await receive()
        started = False
        try:
            async with self.lifespan():
                await send({"type": "lifespan.startup.complete"})
                started = True
                await receive()
        except Exception as exc:  # noqa: BLE001 - reported to the server
            await send({"type": f"lifespan.{'shutdown' if started else 'startup'}.failed", "message": repr(exc)})
            return
        await send({"type": "lifespan.shutdown.complete"})


async def _reply(send: Send, status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """A short JSON error reply at the HTTP level."""
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


class BioMCPServer(MCPServer):
    """The SDK's server with the REST API's argument policy: a tool refuses an argument it does not declare
    (a `user_id` is an error, never ignored; its input schema says additionalProperties: false), and a
    refused argument is one readable line (field: what is wrong) that does not echo the arguments."""

    def add_tool(self, fn: Callable[..., Any], name: str | None = None, **options: Any) -> None:
        """Register `fn` as the SDK does, then make its argument model forbid unknown arguments."""
        super().add_tool(fn, name, **options)
        tool = self._tool_manager.get_tool(name or fn.__name__)  # the SDK has no option for the model's config
        loose = tool.fn_metadata.arg_model
        strict = type(loose.__name__, (loose,), {"__module__": loose.__module__,
                                                 "model_config": ConfigDict(extra="forbid")})
        tool.fn_metadata.arg_model = strict  # read at each call
        tool.parameters = strict.model_json_schema(by_alias=True)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        """The SDK's call; refused arguments as the readable "Invalid input: field: what is wrong"."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                raise
            refusal = invalid(exc.__cause__)
            raise ToolError(f"{readable(refusal)[0]}: {refusal}") from exc.__cause__


def build_mcp(amem: AsyncBioMemory, *, authenticate: Callable[[str | None], ApiKey | None] | None = None,
              client_address: Callable[[Request], str | None] | None = None, host: str = "127.0.0.1",
              transport_security: TransportSecuritySettings | None = None,
              max_request_body_size: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> MCPApp:
    """The MCP endpoint over `amem`: an ASGI app whose `lifespan()` the host app must run."""
    server = BioMCPServer("biomem", title="Bio-Memory", instructions=INSTRUCTIONS, log_level="WARNING")
    register_tools(server, amem)
    server.streamable_http_app(stateless_http=True, json_response=True, host=host,
                               transport_security=transport_security, max_request_body_size=max_request_body_size)
    return MCPApp(server, server.session_manager, authenticate or authenticator(amem.mem.store, loopback(host)),
                  client_address or peer_address)


def caller_of(ctx: Context, tool: str) -> Caller:
    """The authenticated caller of this call of `tool`, if its role opens the tool (biomem.engine.access);
    InvalidInputError outside an authenticated request."""
    try:
        request = ctx.request_context.request
    except ValueError:  # called outside a request
        request = None
    caller = getattr(request, "scope", {}).get(CALLER)
    if not isinstance(caller, Caller):
        raise InvalidInputError("no authenticated caller: the tools are served over HTTP only")
    access.require(f"mcp:{tool}", caller.role, f"The {tool} tool")
    return caller


def readable_errors(tool: Callable[..., Awaitable[dict[str, Any]]]) -> Callable[..., Awaitable[Any]]:
    """`tool` with every failure returned as a tool error of one readable line (tracebacks go to the log)."""
    @functools.wraps(tool)
    async def wrapper(*args: Any, **kwargs: Any) -> dict[str, Any] | CallToolResult:
        try:
            return await tool(*args, **kwargs)
        except BioMemError as exc:
            title, message = readable(exc)
        except Exception as exc:  # noqa: BLE001 - the caller sees one line, the log the traceback
            log.exception("MCP tool %s failed", tool.__name__)
            title, message = readable(exc)
        log.info("MCP tool %s refused: %s", tool.__name__, title)
        # A result, not a ToolError: the SDK would prefix "Error executing tool <name>: " to the line.
        return CallToolResult(content=[TextContent(type="text", text=f"{title}: {message}")], is_error=True)
    return wrapper


Text = Annotated[str, Field(min_length=1, max_length=20_000), AfterValidator(refuse_nul)]
Probe = Annotated[ImageProbe, Field(description="A photo of the face of the person you are talking with, taken now.")]
Also = Annotated[list[ImageProbe] | None, Field(max_length=3, description=ALSO)]
MemberId = Annotated[int, Field(ge=1, lt=2**63)]
NoteScope = Annotated[int | None, Field(ge=1, lt=2**63, description=(
    "Share the note with this household of the person's (its id, from my_groups); leave out for a private note."))]
HiddenFrom = Annotated[list[MemberId] | None, Field(max_length=MAX_HIDDEN, description=(
    "With `scope` only: ids of household members who must never retrieve this note."))]
Metadata = Annotated[dict[str, Any] | None, Field(description=METADATA[:1].upper() + METADATA[1:] + "."),
                     AfterValidator(valid_metadata)]
Filters = Annotated[dict[str, Any] | None, Field(description=FILTERS[:1].upper() + FILTERS[1:] + "."),
                    AfterValidator(valid_filters)]
Threshold = Annotated[float | None, Field(ge=-1, le=1, allow_inf_nan=False, description=(
    "Leave out, or a minimum cosine similarity (-1 to 1) a note needs to be returned."))]


async def sample_of(amem: AsyncBioMemory, probe: ImageProbe, also: list[ImageProbe] | None) -> Any:
    """The engine's probe: the photo's bytes, or {modality: bytes} with `also` or a named modality. A
    modality this store never enrolled is refused before any encoder loads (as the REST API does)."""
    if not also and probe.modality is None:
        return probe.image()
    known = Modalities(amem.mem.modality, await amem.run(amem.mem.gate.modalities))
    parts: dict[str, bytes] = {}
    for item in [probe, *(also or [])]:
        name = item.modality or known.default
        known.check(name)
        if name in parts:
            raise InvalidInputError(f"two images of {name}: send one image of each kind")
        parts[name] = item.image()
    return parts


def register_tools(server: MCPServer, amem: AsyncBioMemory) -> None:
    """Add the five requester tools to `server`."""
    @server.tool(title="Remember a note", description=REMEMBER,
                 annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    @readable_errors
    async def remember(text: Annotated[Text, Field(description="The note to keep, in the person's words.")],
                       probe: Probe, ctx: Context, also: Also = None, scope: NoteScope = None,
                       hidden_from: HiddenFrom = None, metadata: Metadata = None) -> dict[str, Any]:
        who = caller_of(ctx, "remember")
        note = await amem.add(text, probe=await sample_of(amem, probe, also), client=who.clients, scope=scope,
                              hidden_from=hidden_from or (), metadata=metadata)
        return {"results": [{**note_view(note), "event": "ADD"}]}

    @server.tool(title="Recall notes", description=RECALL,
                 annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    @readable_errors
    async def recall(query: Annotated[Text, Field(description="What to look for, in plain words.")],
                     probe: Probe, ctx: Context,
                     k: Annotated[int, Field(ge=1, le=MAX_K, description="How many notes at most.")] = 10,
                     also: Also = None, filters: Filters = None, threshold: Threshold = None) -> dict[str, Any]:
        who = caller_of(ctx, "recall")
        result = await amem.search(query, probe=await sample_of(amem, probe, also), k=k, client=who.clients,
                                   filters=filters, threshold=threshold)
        return result.as_dict()

    @server.tool(title="Ask the memory", description=ASK,
                 annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    @readable_errors
    async def ask(question: Annotated[Text, Field(description="The person's question about themselves.")],
                  probe: Probe, ctx: Context, also: Also = None) -> dict[str, Any]:
        who = caller_of(ctx, "ask")
        answer = await amem.ask(question, probe=await sample_of(amem, probe, also), client=who.clients)
        return answer.as_dict()

    @server.tool(title="Forget one note", description=FORGET,
                 annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                             open_world_hint=False))
    @readable_errors
    async def forget_note(note_id: Annotated[int, Field(ge=1, description="The id of the note to delete.")],
                          probe: Probe, ctx: Context, also: Also = None) -> dict[str, Any]:
        who = caller_of(ctx, "forget_note")
        note = await amem.delete(note_id, probe=await sample_of(amem, probe, also), client=who.clients)
        return {"results": [{**note_view(note), "event": "DELETE"}]}

    @server.tool(title="List the person's households", description=MY_GROUPS,
                 annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    @readable_errors
    async def my_groups(probe: Probe, ctx: Context, also: Also = None) -> dict[str, Any]:
        who = caller_of(ctx, "my_groups")
        groups = await amem.run(amem.mem.groups, probe=await sample_of(amem, probe, also), client=who.clients)
        return {"results": [group.as_dict() for group in groups]}
