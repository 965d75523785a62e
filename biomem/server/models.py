"""The REST API's bodies and replies as pydantic models (validation, and the OpenAPI document).

Bodies forbid unknown fields: a `user_id` (or any typo) is a 422, never silently ignored; so are
text with a NUL character, numbers that are not finite and lists past their bound. The probe fields
(`probe`, `probes`) are JSON's; multipart sends the same as image files.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

B64 = "iVBORw0KGgo..."  # an abbreviated base64 PNG, for the examples
MAX_EMBEDDING = 8192  # values of a precomputed probe
Modality = Annotated[str, StringConstraints(min_length=1, max_length=100)]


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


class ProbeFields(BodyModel):
    """A requester's probe in JSON; multipart sends image files `probe` / `probe_<modality>` instead."""

    probe: ProbeData | None = Field(None, description="the requester's image (or use X-Biomem-Session)")
    probes: dict[Modality, ProbeData] | None = Field(None, max_length=8,
                                                     description="one image per modality: {modality: image}")

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
    identity: int | None = Field(None, gt=0, description="trusted import for this identity id (admin key only)")

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

    model_config = ConfigDict(json_schema_extra={"examples": [{"query": "bank card PIN", "k": 5}]})
    query: str = Field(min_length=1, max_length=10_000)
    k: int = Field(10, ge=1, le=100, description="notes to retrieve")
    links: int = Field(0, ge=0, le=10, description="linked notes per hit to add (A-Mem)")


class AskBody(ProbeFields):
    """A question answered from the requester's own notes only."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"question": "What is my bank card PIN?"}]})
    question: str = Field(min_length=1, max_length=10_000)
    k: int = Field(10, ge=1, le=100)
    links: int = Field(0, ge=0, le=10)


class UpdateBody(ProbeFields):
    """New text for one of the requester's notes, with a fresh step-up probe."""

    text: str = Field(min_length=1, max_length=20_000)


class StepUpBody(ProbeFields):
    """A fresh step-up probe (deleting a note, forgetting oneself)."""

    keep_history: bool = Field(False, description="delete only: keep the note's text in its history")


class EnrolBody(BodyModel):
    """Enrol a person from one or more captures (JSON; multipart sends `images` files)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"label": "alice", "images": [{"data": B64, "mime_type": "image/png"}]}]})
    label: str = Field(min_length=1, max_length=100)
    images: list[ProbeData] | None = Field(None, max_length=10)
    modality: str | None = Field(None, max_length=100)

    @field_validator("label")
    @classmethod
    def not_blank(cls, value: str) -> str | None:
        """A label must say something."""
        return _text(value)


# ---- replies ----------------------------------------------------------------------------------

class Reply(BaseModel):
    """Replies keep what the engine's views hold, extra keys included (the disclosure decides)."""

    model_config = ConfigDict(extra="allow")


class MemoryItem(Reply):
    """One of the requester's notes (Mem0's `id` and `memory`, A-Mem's fields)."""

    id: int
    memory: str
    owner: int | None = None
    content: str | None = None
    timestamp: str | None = None
    keywords: list[str] | None = None
    tags: list[str] | None = None
    context: str | None = None
    links: list[int] | None = None
    score: float | None = Field(None, description="cosine to the query, rounded")
    via: int | None = Field(None, description="linked notes: the hit it was reached from")
    event: Literal["ADD", "UPDATE", "DELETE"] | None = None


class MemoriesReply(Reply):
    results: list[MemoryItem]


class SearchReply(Reply):
    """SearchResult.as_dict(): hits, the gate as the disclosure shows it, what was kept out."""

    results: list[MemoryItem]
    linked: list[MemoryItem] | None = None
    gate: dict[str, Any]
    gated_out: dict[str, Any] | None = None


class AnswerReply(SearchReply):
    """Answer.as_dict(): the answer and the notes it could read."""

    answer: str
    omitted: int | None = Field(None, description="retrieved notes left out of the prompt, lowest-ranked first, "
                                                   "to keep it within its token budget")


class HistoryItem(Reply):
    """One event of a note (Mem0's names, and the full before/after of the note)."""

    id: int
    memory_id: int
    event: str
    old_memory: str | None = None
    new_memory: str | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    created_at: str


class HistoryReply(Reply):
    results: list[HistoryItem]


class SessionReply(Reply):
    session: str = Field(description="send it as X-Biomem-Session")
    expires_in: float
    label: str
    broad: bool = Field(description="the opening probe also cleared step-up: GET /v1/memories allowed")


class IdentityReply(Reply):
    id: int
    label: str
    modality: str
    templates: int


class ForgetReply(Reply):
    id: int
    forgotten: bool = True


class HealthReply(Reply):
    status: str
    version: str
    store: dict[str, Any] | None = Field(None, description="admin key only: counts, encoder, τ, LLM, policy")


class ErrorDetail(BaseModel):
    type: str = Field(description="the biomem.errors class (or an HTTP-level kind)")
    title: str
    message: str


class ErrorReply(BaseModel):
    error: ErrorDetail
