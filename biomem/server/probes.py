"""A request's body as fields and a probe the engine can take, from multipart or JSON.

Multipart (`curl -F`): text fields beside image files `probe` (the store's default modality),
`probe_<modality>` (one per modality of a multi-modal probe; a probe field sent several times is a burst of
frames of one person, fused into one probe), `images` (enrolment; `images_<modality>` for captures of several
kinds at once) or `member_probe`
(the newcomer joining a household); fields that hold JSON (messages, metadata, hidden_from, filters)
are JSON text in their form field. JSON: the same fields, images as base64 objects:

    {"query": "my PIN?", "probe": {"data": "<base64>", "mime_type": "image/png"}}
    {"query": "my PIN?", "probes": {"face-arcface-s": {...}, "palm-compcode": {...}}}
    {"query": "my PIN?", "probe": {"embedding": [0.1, ...], "modality": "face-arcface-s"}}   # admin key only

and a burst (1 to MAX_FRAMES frames of one person, fused into one probe) as a list of images, in `probe` (the
default modality, or the one every frame names) or under a modality in `probes`:

    {"query": "my PIN?", "probe": [{"data": "<base64>", ...}, {"data": "<base64>", ...}]}
    {"query": "my PIN?", "probes": {"face-arcface-s": [{...}, {...}, {...}]}}

A body's probe images (a burst's frames one each) are at most MAX_FILES, as multipart's files are.

A probe only ever becomes bytes (or a Probe of an admin's embedding), never a path: a string can
not make the engine read a server file. Files stay in memory (the body is at most MAX_BODY), so no
probe touches the disk.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes

import numpy as np
from fastapi import Request
from pydantic import BaseModel, ValidationError
from pydantic_core import from_json
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.formparsers import FormParser, MultiPartException, MultiPartParser

from modalities.images import MAX_FILE_BYTES

from ..engine.memory import BioMemory
from ..errors import InvalidImageError, InvalidInputError, ModalityMismatchError
from ..identity.bursts import Burst
from ..identity.gate import Probe
from .auth import Caller
from .errors import ApiError, invalid
from .models import CAPTURE_TYPES, ProbeData, repeated_key

MAX_BODY = MAX_FILE_BYTES * 3 // 2  # bytes of one request body: one photo of the largest size as base64, and fields
MAX_IMAGES = 10  # enrolment captures per request
MAX_FILES = MAX_IMAGES + 4  # image files of a multipart body; probe images (a burst's frames) of a JSON body
MAX_FIELDS = 32  # text fields of a form
JSON_FIELDS = ("messages", "metadata", "hidden_from", "filters")  # form fields that hold JSON (a list, an object)
M = TypeVar("M", bound=BaseModel)


class InMemoryParser(MultiPartParser):
    """Starlette's multipart parser with files kept in memory (never spooled to a temp file), and text
    fields that must be valid in the body's charset (Starlette would read them again as Latin-1)."""

    spool_max_size = MAX_BODY + 1

    def on_part_end(self) -> None:
        part = self._current_part
        if part.file is None:
            try:
                part.data.decode(self._charset)
            except UnicodeDecodeError:
                raise MultiPartException(f"field {part.field_name[:40]!r} is not valid {self._charset}") from None
        super().on_part_end()


class StrictFormParser(FormParser):
    """Starlette's urlencoded parser, with fields that must be valid UTF-8 once unquoted (Starlette would
    put U+FFFD in their place)."""

    def on_field_end(self) -> None:
        for raw in (self._field_name, self._field_value):
            try:
                unquote_to_bytes(bytes(raw).replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                raise MultiPartException("a form field is not valid UTF-8") from None
        super().on_field_end()


@dataclass
class Body:
    """A parsed request: the validated fields, the probe (None if none was sent), enrolment images and, for
    a route that adds someone to a household, the newcomer's probe."""

    fields: Any
    probe: Any = None
    images: list[Any] = field(default_factory=list)
    member_probe: Any = None
    captures: dict[str, list[Any]] = field(default_factory=dict)  # an enrolment's images of several modalities

    def enrolment(self, modality: str) -> list[Any] | dict[str, list[Any]]:
        """The enrolment's images: a list of one modality, or {modality: images} when captures of several kinds
        came (the `images` beside them under `modality`)."""
        if not self.captures:
            return self.images
        merged = {modality: list(self.images)} if self.images else {}
        for name, images in self.captures.items():
            merged.setdefault(name, []).extend(images)
        return merged


def media_type(request: Request) -> str:
    """The request's content type without parameters, lower-case."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def parse(request: Request, model: type[M], caller: Caller, mem: BioMemory) -> Body:
    """Validate the body against `model` (its fields, and probe/probes/images for JSON) and read the
    probe; 415 for a body that is neither multipart nor JSON, 422 for anything malformed."""
    kind = media_type(request)
    # the store's modalities, read in a worker thread: the event loop never waits on the store's lock
    known = Modalities(mem.modality, await run_in_threadpool(mem.gate.modalities))
    member = None
    if kind == "multipart/form-data":
        fields, files = await _multipart(request)
        probe = _file_probe(files, known)
        if "member_probe" in model.model_fields:
            member = _file_probe(files, known, "member_probe")
        images = files.pop("images", [])
        captures = {name.removeprefix("images_"): files.pop(name) for name in list(files)
                    if name.startswith("images_") and "captures" in model.model_fields}
        if "" in captures:
            raise InvalidInputError("`images_` names no modality: send `images_<modality>` files, or `images`")
        if files:
            raise InvalidInputError(f"unexpected file field(s): {', '.join(sorted(files))}")
        data: dict[str, Any] = fields
    elif kind == "application/x-www-form-urlencoded":  # curl -d: fields only, so no probe
        data, probe, images, captures = await _urlencoded(request), None, None, {}
    elif kind == "application/json" or kind.endswith("+json"):
        data, probe, images, captures = _json(await request.body()), None, None, {}
    elif not kind and not await request.body():
        data, probe, images, captures = {}, None, None, {}
    else:
        raise ApiError(415, "UnsupportedMediaType",
                       "Send multipart/form-data (curl -F), application/json or a urlencoded form.")
    try:
        fields = model.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc) from None
    if images is None:  # JSON (or no body): the probe and images are in the validated fields
        _check_probe_images(fields)
        probe = json_probe(getattr(fields, "probe", None), getattr(fields, "probes", None), caller, known)
        member = json_probe(getattr(fields, "member_probe", None), getattr(fields, "member_probes", None),
                            caller, known, "member_probe")
        images = [decode(item, "images") for item in getattr(fields, "images", None) or []]
        captures = {name: [decode(item, f"images of {name}") for item in items]
                    for name, items in (getattr(fields, "captures", None) or {}).items()}
    if len(images or []) + sum(map(len, captures.values())) > MAX_IMAGES:
        raise InvalidInputError(f"at most {MAX_IMAGES} images per enrolment")
    return Body(fields, probe, images or [], member, captures)


async def _multipart(request: Request) -> tuple[dict[str, Any], dict[str, Any]]:
    """(text fields, files) of a multipart body; files as bytes, `images` and a probe file sent several times
    (a burst of frames) as a list. Any other field sent twice is refused: which one would count is not the
    client's to guess."""
    parser = InMemoryParser(request.headers, request.stream(), max_files=MAX_FILES, max_fields=MAX_FIELDS)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidInputError(f"malformed multipart body: {exc.message}") from None
    fields: dict[str, Any] = {}
    files: dict[str, Any] = {}
    try:
        for name, value in form.multi_items():
            repeatable = isinstance(value, UploadFile) and (_is_images(name) or _is_probe(name))
            if name in fields or (name in files and not repeatable):
                raise InvalidInputError(f"{_named(name)} is sent twice: send each field once")
            if isinstance(value, UploadFile):
                _check_upload_type(name, value.content_type)
                content = await value.read()
                if _is_images(name):
                    files.setdefault(name, []).append(content)
                elif name in files:  # a probe's next frame
                    files[name] = [*files[name], content] if isinstance(files[name], list) else [files[name], content]
                else:
                    files[name] = content
            elif name in JSON_FIELDS:
                fields[name] = _json(value.encode(), name)  # a JSON list or object in one form field
            else:
                fields[name] = value
    finally:
        await form.close()
    return fields, files


async def _urlencoded(request: Request) -> dict[str, Any]:
    """The text fields of a urlencoded form (`curl -d`); a field sent twice is refused."""
    try:
        form = await StrictFormParser(request.headers, request.stream(), max_fields=MAX_FIELDS).parse()
    except MultiPartException as exc:
        raise InvalidInputError(f"malformed form body: {exc.message}") from None
    fields: dict[str, Any] = {}
    for name, value in form.multi_items():
        if name in fields:
            raise InvalidInputError(f"{_named(name)} is sent twice: send each field once")
        fields[name] = _json(value.encode(), name) if name in JSON_FIELDS else value
    return fields


def _named(name: str) -> str:
    """A client's field name, quoted and cut short for a message."""
    return repr(name[:40])


def _check_upload_type(name: str, content_type: str | None) -> None:
    """An upload that says it is not an image is refused before decoding (no type, or octet-stream, is tried)."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind and not kind.startswith("image/") and kind != "application/octet-stream":
        raise InvalidImageError(f"{name} is {kind}, not an image")


def _json(raw: bytes, what: str = "the body") -> Any:
    """Parsed JSON; InvalidInputError (422) when it is not, is not UTF-8, nests past pydantic's recursion
    limit (200), holds NaN or Infinity, or holds a key twice in one object (a form field or query as a body)."""
    try:
        value = from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        raise InvalidInputError(f"{what} is not valid JSON: {exc}") from None
    repeated = repeated_key(raw)
    if repeated is not None:
        raise InvalidInputError(f"the key {repeated[:40]!r} is sent twice in one JSON object ({what}): "
                                "send each key once")
    return value


def json_text(text: str, what: str) -> Any:
    """A JSON value sent as text (a query parameter); InvalidInputError (422) when it is not one."""
    return _json(text.encode("utf-8", "surrogatepass"), what)


def _is_images(name: str) -> bool:
    """Whether a multipart field holds enrolment images (`images`, or `images_<modality>`), sent once per image."""
    return name == "images" or name.startswith("images_")


def _is_probe(name: str) -> bool:
    """Whether a multipart field is a probe's file, which may be sent several times as a burst of frames."""
    return any(name == field or name.startswith(f"{field}_") for field in ("probe", "member_probe"))


def _frames(value: Any) -> Any:
    """A probe file's bytes, or a Burst when its field was sent several times."""
    return Burst(value) if isinstance(value, list) else value


def _file_probe(files: dict[str, Any], known: Modalities, field: str = "probe") -> Any:
    """The multipart probe: `probe` alone as bytes, or {modality: bytes} with probe_<modality> files (the
    newcomer's of a household: `member_probe`, member_probe_<modality>); a file field sent several times is a
    Burst of frames of one person (biomem.identity.bursts)."""
    prefix = f"{field}_"
    parts = {name.removeprefix(prefix): _frames(files.pop(name)) for name in list(files) if name.startswith(prefix)}
    single = _frames(files.pop(field, None))
    if not parts:
        return single
    if single is not None:
        parts.setdefault(known.default, single)
    for modality in parts:
        known.check(modality)
    return parts


@dataclass(frozen=True)
class Modalities:
    """The store's default modality and the enrolled ones, as one request sees them."""

    default: str
    enrolled: list[str]

    def check(self, modality: str) -> None:
        """A probe's modality must be one this store enrolled: refused before any encoder loads."""
        if modality not in self.enrolled and modality != self.default:
            raise ModalityMismatchError(f"no {modality!r} templates in this store; enrolled modalities: "
                                        f"{', '.join(self.enrolled) or 'none'}")


def decode(item: ProbeData, what: str = "probe") -> bytes:
    """The bytes of a base64 object, an image or a voice recording (a data: URL works too); 422 otherwise. Which
    kind the bytes must be is the encoder's to say: a recording given as a face is refused there."""
    if item.embedding is not None or item.data is None:
        raise InvalidInputError(f"{what} needs base64 image data")
    if item.mime_type and not item.mime_type.lower().startswith(CAPTURE_TYPES):
        raise InvalidImageError(f"{what} is {item.mime_type}, not an image or a recording")
    data = item.data.strip()
    if data.startswith("data:"):
        header, _, data = data.partition(",")
        if not header.lower().startswith(tuple(f"data:{kind}" for kind in CAPTURE_TYPES)) \
                or not header.lower().endswith(";base64"):
            raise InvalidImageError(f"{what} is not a base64 image or audio data URL")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInputError(f"{what} data is not valid base64") from None
    if not raw:
        raise InvalidImageError(f"{what} is empty")
    return raw


def _check_probe_images(fields: Any) -> None:
    """A JSON body's probe images (a burst's frames one each) are at most MAX_FILES, as a multipart body's
    files are: one request never makes the encoder run more often than a form could."""
    count = 0
    for single, several in (("probe", "probes"), ("member_probe", "member_probes")):
        items = [getattr(fields, single, None), *(getattr(fields, several, None) or {}).values()]
        count += sum(len(item) if isinstance(item, list) else 1 for item in items if item is not None)
    if count > MAX_FILES:
        raise InvalidInputError(f"at most {MAX_FILES} probe images per request (each frame of a burst counts), "
                                f"got {count}")


def _modality_of(item: ProbeData | list[ProbeData]) -> str | None:
    """The modality an image or a burst names (a burst's frames all name the same one, or none: its model)."""
    return item[0].modality if isinstance(item, list) else item.modality


def _burst(frames: list[ProbeData], what: str) -> Burst:
    """A JSON burst as a Burst of image bytes, each frame decoded (and refused) by its number."""
    return Burst(decode(frame, f"{what} frame {number}") for number, frame in enumerate(frames, 1))


def _one(item: ProbeData | list[ProbeData], caller: Caller, known: Modalities, modality: str | None,
         what: str = "probe") -> Any:
    """Bytes, a Burst of bytes, or a Probe for an admin's precomputed embedding."""
    name = modality or _modality_of(item)
    if isinstance(item, list):
        if modality and item[0].modality and item[0].modality != modality:
            raise ModalityMismatchError(f"{what}'s frames say {item[0].modality!r}, filed under {modality!r}")
        if name:
            known.check(name)
        return _burst(item, what)
    if item.embedding is None:
        if name:
            known.check(name)
        return decode(item, what)
    caller.require("rest:precomputed embedding", "A precomputed probe embedding")
    if not name:
        raise InvalidInputError("a precomputed probe embedding needs its modality")
    if item.modality and modality and item.modality != modality:
        raise ModalityMismatchError(f"probe says {item.modality!r}, filed under {modality!r}")
    known.check(name)
    return Probe(np.asarray(item.embedding, dtype=np.float32), name)


def json_probe(probe: ProbeData | list[ProbeData] | None, probes: dict[str, ProbeData | list[ProbeData]] | None,
               caller: Caller, known: Modalities, what: str = "probe") -> Any:
    """The probe of a JSON body: bytes, a Burst, a Probe, or {modality: bytes | Burst | Probe}; None if none was
    sent. A list is a burst: of the modality its frames name, else the store's default."""
    parts = {name: _one(item, caller, known, name, what) for name, item in (probes or {}).items()}
    if probe is None:
        return parts or None
    single = _one(probe, caller, known, None, what)
    named = _modality_of(probe)
    if not parts and named is None:
        return single
    parts.setdefault(named or known.default, single)
    return parts
