"""Every refusal as one JSON shape, with the web app's own words:

    {"error": {"type": "NoFaceError", "title": "No face found", "message": "No face was found ..."}}

Engine errors keep their class name as `type` (biomem.client raises the same class again) and take
title and message from biomem.engine.messages.readable, so the API and the page say the same thing.
The status says what kind of refusal it is (the same table's); nothing unexpected ever reaches a client
beyond "Something went wrong": the traceback goes to the server log.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..engine.messages import readable, refusal_of
from ..errors import (
    BioMemError,
    InvalidInputError,
    TooManyAttemptsError,
)

log = logging.getLogger("biomem.server")

# a 422's message names the first SHOWN_ERRORS complaints and counts the rest, each field name and complaint cut
# short, so that it stays at most MAX_MESSAGE characters (as long as a memory may be) whatever the body holds
MAX_MESSAGE = 2_000
SHOWN_ERRORS = 5
MAX_FIELD_CHARS = 60  # each part of a field's path (a key of the caller's own)
MAX_COMPLAINT_CHARS = 300  # a field's whole path, and what is wrong with it
MORE = "; and {count:,} more"
HTTP_TITLES = {400: "Bad request", 401: "Not authorised", 403: "Forbidden", 404: "Not found",
               405: "Method not allowed", 413: "Body too large", 415: "Unsupported content type",
               422: "Invalid input", 429: "Too many requests"}


class ApiError(Exception):
    """A refusal the service makes itself (auth, role, body size, content type), or an engine error
    sent with another status than its row of REFUSALS gives (an admin's unknown identity id is a 404)."""

    def __init__(self, status: int, type_: str, message: str, *, title: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.type, self.message = status, type_, message
        self.title = title or HTTP_TITLES.get(status, "Refused")
        self.headers = headers or {}


def status_of(exc: BaseException) -> int:
    """The HTTP status of an engine error (biomem.engine.messages.REFUSALS; 500 for anything that is not one)."""
    row = refusal_of(exc)
    return 500 if row is None else row.status


def error_json(type_: str, title: str, message: str) -> dict[str, Any]:
    """The one error shape every route answers with."""
    return {"error": {"type": type_, "title": title, "message": message}}


def engine_response(exc: BaseException) -> JSONResponse:
    """An engine error (or anything unexpected) as the JSON error, with its status and headers."""
    title, message = readable(exc)
    status = status_of(exc)
    headers = {}
    if isinstance(exc, TooManyAttemptsError):
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    name = exc.__class__.__name__ if isinstance(exc, BioMemError) else "InternalError"
    return JSONResponse(error_json(name, title, message), status_code=status, headers=headers)


def api_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(error_json(exc.type, exc.title, exc.message), status_code=exc.status, headers=exc.headers)


def _cut(text: str, limit: int) -> str:
    """`text` at most `limit` characters, cut with "...": a field name is the caller's, of any length."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def validation_message(errors: list[Any], *, located: bool = False) -> str:
    """Pydantic's complaints as one line (field: what is wrong), never echoing the input, at most MAX_MESSAGE
    characters: the first SHOWN_ERRORS, then how many more; `located`: each loc starts with where FastAPI found
    the value (path, query, header), which is left out."""
    room = MAX_MESSAGE - len(MORE.format(count=len(errors)))  # what the complaints may take, the count kept
    parts: list[str] = []
    for error in errors[:SHOWN_ERRORS]:
        where = ".".join(_cut(str(p), MAX_FIELD_CHARS) for p in error.get("loc", ())[1 if located else 0:])
        what = _cut(str(error.get("msg", "invalid")), MAX_COMPLAINT_CHARS)
        part = f"{_cut(where, MAX_COMPLAINT_CHARS)}: {what}" if where else what
        if parts and len("; ".join([*parts, part])) > room:
            break  # the first complaint always fits: it is cut to well under MAX_MESSAGE
        parts.append(part)
    more = MORE.format(count=len(errors) - len(parts)) if len(errors) > len(parts) else ""
    return "; ".join(parts) + more if parts else "invalid input"


def invalid(exc: ValidationError) -> InvalidInputError:
    """A pydantic ValidationError as the engine's InvalidInputError (422, the same JSON)."""
    return InvalidInputError(validation_message(exc.errors(include_input=False)))


def install(app: FastAPI) -> None:
    """Register the handlers that turn every refusal into the JSON error."""

    async def on_engine(request: Request, exc: Exception) -> JSONResponse:
        return engine_response(exc)

    async def on_api(request: Request, exc: Exception) -> JSONResponse:
        return api_response(exc)  # type: ignore[arg-type]

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        message = validation_message(exc.errors(), located=True)  # type: ignore[attr-defined]
        return engine_response(InvalidInputError(message))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        status = getattr(exc, "status_code", 500)
        title = HTTP_TITLES.get(status, "Refused")
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(status, "HTTPError")
        message = {404: "No such route.", 405: "This route does not take that method."}.get(status, title)
        return JSONResponse(error_json(kind, title, message), status_code=status,
                            headers=getattr(exc, "headers", None))

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        return engine_response(exc)

    app.add_exception_handler(BioMemError, on_engine)
    app.add_exception_handler(ApiError, on_api)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
