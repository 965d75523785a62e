"""ChatLLM: a model that completes prompts, its JSON replies repaired, validated, retried once, and
the offline heuristics in its place when that fails; `stats()` counts what each task cost."""

from __future__ import annotations

import logging
import threading
import time
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from pydantic import ValidationError

from ...errors import LLMError
from ...stores.records import Note
from .base import LLM, Draft, Evolution, M, NoteMeta, QueryKeywords, extract_json
from .offline import OfflineLLM
from .prompts import ANALYZE_PROMPT, EVOLVE_PROMPT, KEYWORDS_PROMPT, answer_prompt

log = logging.getLogger(__name__)

ANALYZE_MAX_TOKENS = 256
EVOLVE_MAX_TOKENS = (128, 64)  # base + per neighbour: one context and one tag list each
ANSWER_MAX_TOKENS = 64
KEYWORDS_MAX_TOKENS = 64
ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
                 "additionalProperties": False}


@dataclass
class CallStats:
    """What a chat backend did for one task (analyze, evolve or answer)."""

    calls: int = 0  # completions requested, retries included
    json_ok: int = 0  # JSON replies valid as the model wrote them (fences or prose around them allowed)
    json_repaired: int = 0  # JSON replies valid once repaired (see extract_json)
    retried: int = 0  # second attempts after a malformed reply
    fallbacks: int = 0  # results the offline heuristics made instead (an empty answer included)
    errors: int = 0  # calls that failed: unreachable, timed out, HTTP error, not a chat completion
    seconds: float = 0.0  # wall time spent in calls


TASKS = ("analyze", "evolve", "answer", "keywords")


class ChatLLM(LLM):
    """A model that completes prompts; JSON is repaired, validated, retried once, then heuristics fill in."""

    def __init__(self, fallback: OfflineLLM) -> None:
        self.fallback = fallback
        self._stats = {task: CallStats() for task in TASKS}
        self._lock = threading.Lock()

    @abstractmethod
    def complete(self, prompt: str, max_tokens: int = 512, schema: dict[str, Any] | None = None,
                 temperature: float = 0.0) -> str:
        """The model's reply to one user prompt (raises LLMError when unreachable); `schema`, where the
        backend can, constrains the reply to JSON of that JSON Schema. Greedy at temperature 0."""

    def stats(self) -> dict[str, dict[str, float]]:
        """Counters per task (see CallStats) and their sum under "total"."""
        with self._lock:
            per_task = {task: asdict(counts) for task, counts in self._stats.items()}
        per_task["total"] = {f.name: sum(counts[f.name] for counts in per_task.values())
                             for f in fields(CallStats)}
        return per_task

    def _count(self, task: str, counter: str, seconds: float = 0.0) -> None:
        with self._lock:
            counts = self._stats[task]
            setattr(counts, counter, getattr(counts, counter) + 1)
            counts.seconds += seconds

    def _call(self, task: str, prompt: str, max_tokens: int, schema: dict[str, Any] | None = None,
              temperature: float = 0.0) -> str:
        """complete(), counted and timed."""
        started = time.perf_counter()
        try:
            return self.complete(prompt, max_tokens, schema, temperature)
        except LLMError:
            self._count(task, "errors")
            raise
        finally:
            self._count(task, "calls", time.perf_counter() - started)

    def _ask_json(self, task: str, prompt: str, model: type[M], max_tokens: int) -> M | None:
        """A validated reply, or None (counted as a fallback) after two malformed ones or an error.
        The retry asks for JSON of the model's schema (constrained decoding where the backend has it):
        at temperature 0 a plain retry would get the same malformed reply back."""
        for attempt in (1, 2):
            schema = None
            if attempt == 2:
                self._count(task, "retried")
                schema = model.model_json_schema()
            try:
                data, repaired = extract_json(self._call(task, prompt, max_tokens, schema))
                result = model.model_validate(data)
            except (ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
                log.warning("%s: malformed %s reply (attempt %d): %s", self.name, model.__name__,
                            attempt, str(exc).partition("\n")[0])
                continue
            except LLMError as exc:
                log.warning("%s failed, using offline heuristics: %s", self.name, exc)
                break
            self._count(task, "json_repaired" if repaired else "json_ok")
            return result
        self._count(task, "fallbacks")
        return None

    def analyze(self, content: str) -> NoteMeta:
        meta = self._ask_json("analyze", ANALYZE_PROMPT.format(content=content), NoteMeta,
                              ANALYZE_MAX_TOKENS)
        return meta if meta is not None else self.fallback.analyze(content)

    def evolve(self, draft: Draft, neighbours: Sequence[tuple[Note, float]]) -> Evolution:
        if not neighbours:
            return Evolution(should_evolve=False)
        listing = "\n".join(
            f"memory_id:{n.id}\ttalk start time:{n.timestamp}\tmemory content: {n.content}\t"
            f"memory context: {n.context}\tmemory keywords: {n.keywords}\tmemory tags: {n.tags}"
            for n, _ in neighbours)
        prompt = EVOLVE_PROMPT.format(context=draft.context, content=draft.content,
                                      keywords=draft.keywords, neighbours=listing,
                                      count=len(neighbours))
        base, per_neighbour = EVOLVE_MAX_TOKENS
        decision = self._ask_json("evolve", prompt, Evolution, base + per_neighbour * len(neighbours))
        return decision if decision is not None else self.fallback.evolve(draft, neighbours)

    def query_keywords(self, question: str) -> str:
        """A-Mem's keyword prompt; the offline keywords when the reply is unusable twice."""
        reply = self._ask_json("keywords", KEYWORDS_PROMPT.format(question=question), QueryKeywords,
                               KEYWORDS_MAX_TOKENS)
        return reply.keywords.strip() if reply is not None else self.fallback.query_keywords(question)

    def answer(self, question: str, notes: Sequence[Note], temporal: bool = False,
               question_vector: np.ndarray | None = None) -> str:
        """The model's short answer; an empty one is replaced by the offline answer (LLMError propagates)."""
        reply = self._call("answer", answer_prompt(question, notes, temporal), ANSWER_MAX_TOKENS).strip()
        if reply:
            return reply
        self._count("answer", "fallbacks")
        return self.fallback.answer(question, notes, temporal, question_vector)

    def answer_json(self, prompt: str, temperature: float = 0.0) -> str:
        """A-Mem's evaluation answer call: `prompt`, the reply constrained to {"answer": string} where
        the backend can; that answer, or the stripped reply when it holds no such JSON (as A-Mem keeps it)."""
        reply = self._call("answer", prompt, 2 * ANSWER_MAX_TOKENS, ANSWER_SCHEMA, temperature)
        try:
            answer = extract_json(reply)[0].get("answer")
        except (ValueError, AttributeError):
            answer = None
        if isinstance(answer, str):
            self._count("answer", "json_ok")
            return answer.strip()
        return reply.strip()

    def drop_owner(self, owner: int) -> None:
        self.fallback.drop_owner(owner)
