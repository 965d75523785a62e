"""The REST API's replies as pydantic models: the OpenAPI document's schemas for what each route answers. A reply
keeps what the engine's view holds, extra keys included: the disclosure (biomem.identity.disclosure) decides
what a requester sees, not these models."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


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
    scope: int | None = Field(None, description="null for the requester's own note, else its household's id")
    author: int | None = Field(None, description="who wrote it (null: an operator's import into a household)")
    metadata: dict[str, Any] | None = None
    hidden_from: list[int] | None = Field(None, description="household members who never retrieve it")
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
    actor: int | None = Field(None, description="who made the change (null: the operator, or a forgotten person)")
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
    modality: str  # the first (or only) modality enrolled
    modalities: dict[str, int]  # templates stored per modality
    templates: int


class ForgetReply(Reply):
    id: int
    forgotten: bool = True


class GroupItem(Reply):
    """A household the requester belongs to, with its members (identity ids and labels, in joining order)."""

    id: int
    label: str
    members: list[int]
    member_labels: list[str]


class GroupsReply(Reply):
    results: list[GroupItem]


class MembershipReply(Reply):
    """A member taken out of a household; `group` is null when the last member left and it was erased."""

    id: int
    removed: int
    group: GroupItem | None = None
    deleted: bool = Field(False, description="the household was left empty and erased with its notes")


class GroupDeletedReply(Reply):
    id: int
    deleted: bool = True


class HealthReply(Reply):
    status: str
    version: str
    store: dict[str, Any] | None = Field(None, description="admin key only: counts, encoder, τ, LLM, policy, "
                                                        "households (per_group)")


class ErrorDetail(BaseModel):
    type: str = Field(description="the biomem.errors class (or an HTTP-level kind)")
    title: str
    message: str


class ErrorReply(BaseModel):
    error: ErrorDetail
