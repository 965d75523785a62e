"""The REST API's bodies as pydantic models (validation, and the OpenAPI document); replies are replies.py's.

Bodies forbid unknown fields: a `user_id` (or any typo) is a 422, never silently ignored; so are
text with a NUL character, numbers that are not finite and lists past their bound. The probe fields
(`probe`, `probes`) are JSON's; multipart sends the same as image files. A probe is one image or a burst:
a list of 1 to MAX_FRAMES images of one person from one camera, fused into one probe (biomem.identity.bursts).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    field_validator,
)
from pydantic_core import PydanticCustomError

from ..engine.checks import BROAD_K, MAX_K
from ..identity.bursts import MAX_FRAMES
from ..notes.timeparse import parse_timestamp
from ..stores.filters import MAX_METADATA_KEYS, Filter, check_metadata, parse_filters

B64 = "iVBORw0KGgo..."  # an abbreviated base64 PNG, for the examples
MAX_EMBEDDING = 8192  # values of a precomputed probe
CAPTURE_TYPES = ("image/", "audio/")  # a probe's MIME types: photos, and voice recordings (WAV, FLAC, OGG, MP3)
Modality = Annotated[str, StringConstraints(min_length=1, max_length=100)]
Id = Annotated[int, Field(gt=0, lt=2**63)]
MAX_HIDDEN = 100  # members a household note is hidden from
FILTERS = ("Mem0-style filters over scope, author, tags, keywords, timestamp and metadata.<key>: "
           '{"AND": [...]}, {"OR": [...]}, {"NOT": {...}}, {"<field>": value} or {"<field>": {"<op>": value}} '
           "with eq ne gt gte lt lte in nin contains icontains; they narrow what the gate admitted, never widen it")
METADATA = (f"a flat JSON object (at most {MAX_METADATA_KEYS} keys) of strings, numbers, booleans, null or lists "
            "of those, that filters read")


def valid_filters(value: dict[str, Any] | None) -> Filter | None:
    """The parsed filter tree, which the engine takes as it is; filters it would refuse are refused with its message
    (before any probe is encoded): InvalidInputError is a ValueError, so a 422."""
    return parse_filters(value, timestamp=parse_timestamp)


def valid_metadata(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """Metadata the engine would refuse (nested, too big, a bad key) is refused with its message."""
    if value is not None:
        check_metadata(value)
    return value


class _Repeated(Exception):
    """A JSON object holding `key` twice, found while parsing."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _once_each(pairs: list[tuple[str, Any]]) -> None:
    """json's object_pairs_hook: _Repeated at the first key an object holds twice (the object itself is not kept)."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Repeated(key)
        seen.add(key)


def repeated_key(raw: bytes) -> str | None:
    """The first key that some object of the JSON document `raw` holds twice, else None (also when `raw` is not
    JSON: its parser says what is wrong). Parsers differ on which of the two counts (Python's and pydantic's keep
    the last, others the first), so a body that holds one is refused rather than read one way here."""
    try:
        json.loads(raw, object_pairs_hook=_once_each)
    except _Repeated as repeated:
        return repeated.key
    except (ValueError, RecursionError):  # not JSON: the route's parser refuses it
        pass
    return None


def refuse_nul(value: Any) -> Any:
    """Text with a NUL character is refused: no form sends one, and PostgreSQL cannot store it."""
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


class BodyModel(BaseModel):
    """A request body or a part of one: what no form sends is a 422 before anything is read or stored."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    no_nul = field_validator("*")(refuse_nul)


class ProbeData(BodyModel):
    """One image as base64 (`data`, `mime_type`), or, with an admin key only, a precomputed
    `embedding` of `modality`."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"data": B64, "mime_type": "image/png"}]})
    data: str | None = Field(None, description="base64 image bytes (a data: URL works too)")
    mime_type: str | None = Field(None, max_length=100, description="image/png, image/jpeg, ...")
    modality: Modality | None = Field(None, description="encoder of this probe (default: the store's)")
    embedding: list[float] | None = Field(None, min_length=1, max_length=MAX_EMBEDDING,
                                          description="precomputed probe (admin key only)")


def _frame_count(value: Any) -> Any:
    """A burst of no frames or too many is refused in the Burst's own words (before pydantic's list bounds)."""
    if isinstance(value, list) and not 1 <= len(value) <= MAX_FRAMES:
        raise PydanticCustomError("burst_frames", "a burst holds 1 to {most} frames, got {count}",
                                  {"most": MAX_FRAMES, "count": len(value)})
    return value


def _images_of_one_modality(frames: list[ProbeData]) -> list[ProbeData]:
    """A burst is images only (a precomputed embedding is already one probe) and of one modality: every frame
    names the same one, or none does."""
    for number, frame in enumerate(frames, 1):
        if frame.embedding is not None:
            raise PydanticCustomError("burst_embedding", "frame {number} is a precomputed embedding: a burst is "
                                      "images only (send an embedding alone, as the probe)", {"number": number})
    named = {frame.modality for frame in frames}
    if len(named) > 1:
        names = ", ".join(sorted(repr(name) if name else "none" for name in named))
        raise PydanticCustomError("burst_modalities", "the frames of a burst name different modalities ({names}): "
                                  "a burst is one modality, named on every frame or on none", {"names": names})
    return frames


def _image_or_burst(value: Any) -> str:
    return "burst" if isinstance(value, list) else "image"


Frames = Annotated[list[ProbeData], BeforeValidator(_frame_count), AfterValidator(_images_of_one_modality),
                   Field(min_length=1, max_length=MAX_FRAMES, description=(
                       f"a burst: 1 to {MAX_FRAMES} frames of one person from one camera, fused into one probe; "
                       "images only, of one modality (named on every frame or on none)"))]
ProbeOrBurst = Annotated[Annotated[ProbeData, Tag("image")] | Annotated[Frames, Tag("burst")],
                         Discriminator(_image_or_burst)]
BURST = [{"data": B64, "mime_type": "image/png"}] * 3  # an example burst of three frames


class ProbeFields(BodyModel):
    """A requester's probe in JSON; multipart sends image files `probe` / `probe_<modality>` instead (a file
    field sent several times is a burst)."""

    probe: ProbeOrBurst | None = Field(None, description=(
        "the requester's image, or a burst of frames of them: [image, ...] (or use X-Biomem-Session)"))
    probes: dict[Modality, ProbeOrBurst] | None = Field(None, max_length=8, description=(
        "one image (or burst) per modality: {modality: image} or {modality: [image, ...]}"))

    @field_validator("text", "query", "question", check_fields=False)
    @classmethod
    def not_blank(cls, value: str | None) -> str | None:
        """Text fields must say something."""
        return _text(value)


def _text(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise ValueError("must not be blank")
    return value


class SessionBody(ProbeFields):
    """Open a session: the gate runs once on the probe."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"probe": {"data": B64, "mime_type": "image/png"}}]})
    ttl: float = Field(120.0, ge=1, le=600, description="seconds until the session ends")


class Message(BodyModel):
    """A chat message, as Mem0 takes them."""

    role: Literal["user", "assistant", "system"]
    content: str = Field(min_length=1, max_length=20_000)


class AddBody(ProbeFields):
    """Remember `text` (or each non-system message) for the probe's owner."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"text": "My locker is 42", "probe": {"data": B64, "mime_type": "image/png"}},
        {"messages": [{"role": "user", "content": "I moved to Lisbon"}], "infer": False}]})
    text: str | None = Field(None, min_length=1, max_length=20_000)
    messages: list[Message] | None = Field(None, min_length=1, max_length=50)
    infer: bool = Field(True, description="false: store the text as given (no LLM analysis, links or evolution)")
    timestamp: str | None = Field(None, max_length=100, description="ISO 8601 or '1:56 pm on 8 May, 2023'")
    identity: int | None = Field(None, gt=0, lt=2**63, description=(
        "trusted import for this identity id, a person or a household (admin key only)"))
    scope: Id | None = Field(None, description="a household of the requester's to write into (default: their own "
                                                "notes); POST /v1/groups/mine lists them")
    hidden_from: list[Id] | None = Field(None, max_length=MAX_HIDDEN, description=(
        "members of the `scope` household (identity ids) who must never retrieve this note"))
    metadata: dict[str, Any] | None = Field(None, description=METADATA)

    metadata_checked = field_validator("metadata")(valid_metadata)

    def texts(self) -> list[str]:
        """What to store: the text, or the content of every non-system message."""
        if (self.text is None) == (self.messages is None):
            raise ValueError("send exactly one of text or messages")
        texts = [self.text] if self.text is not None else \
            [m.content for m in self.messages or [] if m.role != "system"]
        if not texts or any(not t.strip() for t in texts):
            raise ValueError("nothing to remember: empty text, or only system messages")
        return texts


class SearchBody(ProbeFields):
    """Gated retrieval of the requester's own notes."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"query": "bank card PIN", "k": 5},
        {"query": "locker code", "probe": BURST}]})
    query: str = Field(min_length=1, max_length=10_000)
    k: int = Field(10, ge=1, le=MAX_K, description=f"notes to retrieve (more than {BROAD_K}: a listing, step-up)")
    links: int = Field(0, ge=0, le=10, description="linked notes per hit to add (A-Mem)")
    filters: dict[str, Any] | None = Field(None, description=FILTERS)
    threshold: float | None = Field(None, ge=-1, le=1, description="minimum cosine similarity of a hit")

    filters_checked = field_validator("filters")(valid_filters)


class AskBody(ProbeFields):
    """A question answered from the requester's own notes only."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"question": "What is my bank card PIN?"}]})
    question: str = Field(min_length=1, max_length=10_000)
    k: int = Field(10, ge=1, le=MAX_K, description=f"notes to retrieve (more than {BROAD_K}: a listing, step-up)")
    links: int = Field(0, ge=0, le=10)


class UpdateBody(ProbeFields):
    """New text for one of the requester's notes, with a fresh step-up probe."""

    text: str = Field(min_length=1, max_length=20_000)


class StepUpBody(ProbeFields):
    """A fresh step-up probe (deleting a note, forgetting oneself)."""

    keep_history: bool = Field(False, description="delete only: keep the note's text in its history")


class ProbeBody(ProbeFields):
    """The requester's probe alone (a fresh step-up probe where the route changes something)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"probe": {"data": B64, "mime_type": "image/png"}}]})


class GroupBody(ProbeFields):
    """Found a household: the requester (a fresh step-up probe) is its first member."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"label": "Home", "probe": {"data": B64, "mime_type": "image/png"}}]})
    label: str = Field(min_length=1, max_length=100, description="the household's name (unique among yours)")

    @field_validator("label")
    @classmethod
    def label_not_blank(cls, value: str) -> str | None:
        """A household's name must say something."""
        return _text(value)


class MemberBody(ProbeFields):
    """Add a person to a household: a member's fresh step-up probe (`probe`) and the newcomer's own
    (`member_probe`); multipart sends image files `probe` and `member_probe`."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"probe": {"data": B64, "mime_type": "image/png"}, "member_probe": {"data": B64, "mime_type": "image/png"}}]})
    member_probe: ProbeOrBurst | None = Field(None, description=(
        "the newcomer's image, taken now, or a burst of frames of them: [image, ...]"))
    member_probes: dict[Modality, ProbeOrBurst] | None = Field(None, max_length=8, description=(
        "the newcomer's images: {modality: image} or {modality: [image, ...]}"))


class AdminGroupBody(BodyModel):
    """Found a household for person `identity` (admin key)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"label": "Home", "identity": 1}]})
    label: str = Field(min_length=1, max_length=100)
    identity: Id = Field(description="the founder's identity id")

    @field_validator("label")
    @classmethod
    def label_not_blank(cls, value: str) -> str | None:
        """A household's name must say something."""
        return _text(value)


class AdminMemberBody(BodyModel):
    """Add person `identity` to a household (admin key)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"identity": 2}]})
    identity: Id = Field(description="the newcomer's identity id")


class EnrolBody(BodyModel):
    """Enrol a person from one or more captures (JSON; multipart sends `images` files)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"label": "alice", "images": [{"data": B64, "mime_type": "image/png"}]}]})
    label: str = Field(min_length=1, max_length=100)
    images: list[ProbeData] | None = Field(None, max_length=10)
    modality: str | None = Field(None, max_length=100)
    captures: dict[Modality, Annotated[list[ProbeData], Field(min_length=1, max_length=10)]] | None = Field(
        None, max_length=4, description=(
        "captures of several kinds at once, {modality: [image, ...]} (multipart: `images_<modality>` files): how an "
        "admin enrols a look-alike relative, whose face alone the gate cannot tell apart, with a palm as well"))

    @field_validator("label")
    @classmethod
    def not_blank(cls, value: str) -> str | None:
        """A label must say something."""
        return _text(value)
