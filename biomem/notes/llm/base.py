"""The LLM interface and what passes through it: the note metadata, evolution decisions and query
keywords the agent asks for, validated with pydantic, and the JSON pulled out of a model's reply."""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, Field, field_validator

from ...stores.records import Note
from .prompts import CONTEXT_PLACEHOLDER

# ---- what the agent asks for, validated ---------------------------------------------------

class NoteMeta(BaseModel):
    """Keywords, one-sentence context and tags of a note (A-Mem's note construction)."""

    keywords: list[str] = Field(min_length=1)
    context: str = Field(min_length=1)
    tags: list[str] = Field(min_length=1)

    @field_validator("keywords", "tags")
    @classmethod
    def _non_blank_items(cls, items: list[str]) -> list[str]:
        """Items stripped, blank ones dropped; at least one must remain."""
        kept = [item.strip() for item in items if item.strip()]
        if not kept:
            raise ValueError("only blank items")
        return kept

    @field_validator("context")
    @classmethod
    def _a_real_context(cls, context: str) -> str:
        """A blank context, or one that copies the prompt's placeholder, is no context."""
        if not context.strip() or CONTEXT_PLACEHOLDER in context.lower():
            raise ValueError("blank context, or the prompt's placeholder copied back")
        return context.strip()


class Evolution(BaseModel):
    """A-Mem's evolution decision over the new note's nearest neighbours."""

    should_evolve: bool
    actions: list[str] = []
    suggested_connections: list[int] = []  # note ids, never list positions
    tags_to_update: list[str] = []
    new_context_neighborhood: list[str] = []
    new_tags_neighborhood: list[list[str]] = []


@dataclass
class Draft:
    """A note not yet stored: what the evolution prompt shows of the new memory."""

    content: str
    timestamp: str
    keywords: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    context: str = ""


class QueryKeywords(BaseModel):
    """A-Mem's query keywords: one string, used as the retrieval query."""

    keywords: str = Field(min_length=1)


# ---- JSON out of a model's reply -------------------------------------------------------------

_DECODER = json.JSONDecoder()
MAX_TRIES = 16  # "{" a reply's object may start at

M = TypeVar("M", bound=BaseModel)


def extract_json(reply: str) -> tuple[Any, bool]:
    """The JSON object in a reply (bare, fenced or inside prose) and whether it needed repairs: Python
    literals, missing or trailing commas and replies cut off by max_tokens go through json_repair."""
    from json_repair import repair_json

    text = re.sub(r"```(?:json)?", "", reply or "")
    starts = [match.start() for match in re.finditer(r"\{", text)][:MAX_TRIES]
    if not starts:
        raise ValueError("no JSON object in the reply")
    for start in starts:
        try:
            return _DECODER.raw_decode(text, start)[0], False
        except json.JSONDecodeError:
            continue
    for start in starts:
        repaired = repair_json(text[start:], return_objects=True)
        if isinstance(repaired, list):  # an object followed by prose comes back as [object, ...]
            repaired = next((item for item in repaired if isinstance(item, dict)), None)
        if isinstance(repaired, dict) and repaired:
            return repaired, True
    raise ValueError("no JSON object in the reply could be repaired")


def parse_json_reply(reply: str, model: type[M]) -> M:
    """Validate an LLM reply (bare JSON, fenced, inside prose, or repairable) against `model`."""
    return model.model_validate(extract_json(reply)[0])


# ---- the interface ------------------------------------------------------------------------------

class LLM(ABC):
    """What the memory agent needs from a language model."""

    name: str

    @abstractmethod
    def analyze(self, content: str) -> NoteMeta:
        """Keywords, context and tags for a new note."""

    @abstractmethod
    def evolve(self, draft: Draft, neighbours: Sequence[tuple[Note, float]]) -> Evolution:
        """Links and neighbour updates for a new note, given its same-owner neighbours."""

    @abstractmethod
    def answer(self, question: str, notes: Sequence[Note], temporal: bool = False,
               question_vector: np.ndarray | None = None) -> str:
        """A short answer from the retrieved notes (no notes: no memory context). `question_vector`,
        the question's embedding when the caller already has it, spares a backend that embeds it."""

    @abstractmethod
    def query_keywords(self, question: str) -> str:
        """Keywords to retrieve with instead of the raw question (A-Mem's LoCoMo query)."""

    def stats(self) -> dict[str, dict[str, float]]:
        """Counters of the model calls per task; empty for a backend that calls no model."""
        return {}

    def drop_owner(self, owner: int) -> None:  # noqa: B027 - a hook: a no-op unless a backend keeps something
        """Forget anything kept from `owner`'s notes (their note was changed or deleted, or they were
        forgotten); nothing for a backend that keeps nothing."""
