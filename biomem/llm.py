"""LLM backends behind one small interface: note analysis, evolution decisions, answers.

    make_llm("offline", text_encoder)          # no model: heuristics over the text encoder
    make_llm("openai:gpt-4o-mini", text_encoder)  # any OpenAI-compatible endpoint
    make_llm("hf:Qwen/Qwen2.5-0.5B-Instruct", text_encoder)  # local transformers model

Chat backends ask for JSON, validate it, retry once on a malformed reply, then fall back to
the offline heuristics: ingestion never fails because of what an LLM said. Prompts follow
A-Mem (Xu et al., 2025) and its LoCoMo short-answer prompts.
"""

from __future__ import annotations

import json
import logging
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
from pydantic import BaseModel, Field, ValidationError

from .errors import InvalidInputError, LLMError
from .store import Note
from .textenc import TextEncoder

log = logging.getLogger(__name__)

NO_MEMORY_ANSWER = "I have no memories of you, so I cannot answer that from memory."


# ---- what the agent asks for, validated ---------------------------------------------------

class NoteMeta(BaseModel):
    """Keywords, one-sentence context and tags of a note (A-Mem's note construction)."""

    keywords: list[str] = Field(min_length=1)
    context: str = Field(min_length=1)
    tags: list[str] = Field(min_length=1)


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


# ---- prompts --------------------------------------------------------------------------------

ANALYZE_PROMPT = """Generate a structured analysis of the following content by:
1. Identifying the most salient keywords (focus on nouns, verbs, and key concepts)
2. Extracting core themes and contextual elements
3. Creating relevant categorical tags

Format the response as a JSON object:
{{
    "keywords": [several specific, distinct keywords, most important first; no names of speakers, no times; at least three],
    "context": "one sentence summarizing the main topic, key points and purpose",
    "tags": [several broad categories or themes for classification; at least three]
}}

Content for analysis:
{content}"""

EVOLVE_PROMPT = """You are an AI memory evolution agent responsible for managing and evolving a knowledge base.
Analyze the new memory note according to keywords and context, also with its nearest neighbor memories.
Make decisions about its evolution.

The new memory context:
{context}
content: {content}
keywords: {keywords}

The nearest neighbor memories (each with its memory_id):
{neighbours}

Based on this information, determine:
1. Should this memory be evolved? Consider its relationships with other memories.
2. What specific actions should be taken (strengthen, update_neighbor)?
   2.1 If strengthen: which memory_ids should it be connected to, and the updated tags of this memory.
   2.2 If update_neighbor: the updated context and tags of each neighbor, in the order given;
       unchanged ones repeat their original context and tags.
The length of new_context_neighborhood and new_tags_neighborhood must equal {count}.
Return your decision as JSON:
{{
    "should_evolve": true or false,
    "actions": ["strengthen", "update_neighbor"],
    "suggested_connections": [memory_id, ...],
    "tags_to_update": ["tag_1", ..., "tag_n"],
    "new_context_neighborhood": ["new context", ..., "new context"],
    "new_tags_neighborhood": [["tag_1", ..., "tag_n"], ..., ["tag_1", ..., "tag_n"]]
}}"""

ANSWER_PROMPT = """Based on the context: {context}, write an answer in the form of a short phrase for the following question. Answer with exact words from the context whenever possible.

Question: {question} Short answer:"""

TEMPORAL_ANSWER_PROMPT = """Based on the context: {context}, answer the following question. Use DATE of CONVERSATION to answer with an approximate date. Please generate the shortest possible answer, using words from the conversation where possible, and avoid using any subjects.

Question: {question} Short answer:"""

NO_CONTEXT_PROMPT = """Write an answer in the form of a short phrase for the following question.

Question: {question} Short answer:"""


def serialize_notes(notes: Sequence[Note]) -> str:
    """Notes as A-Mem shows them to the LLM, oldest first."""
    return "\n".join(
        f"talk start time:{n.timestamp} memory content: {n.content} memory context: {n.context} "
        f"memory keywords: {', '.join(n.keywords)} memory tags: {', '.join(n.tags)}"
        for n in sorted(notes, key=lambda n: (n.timestamp, n.id)))


def answer_prompt(question: str, notes: Sequence[Note], temporal: bool = False) -> str:
    """The answer prompt; with no notes the LLM gets no memory context at all."""
    if not notes:
        return NO_CONTEXT_PROMPT.format(question=question)
    template = TEMPORAL_ANSWER_PROMPT if temporal else ANSWER_PROMPT
    return template.format(context=serialize_notes(notes), question=question)


def parse_json_reply(reply: str, model: type[BaseModel]) -> BaseModel:
    """Validate an LLM reply (bare JSON, fenced, or JSON inside prose) against `model`."""
    text = re.sub(r"```(?:json)?", "", reply or "")
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the reply")
    candidate = text[start:end + 1]
    try:
        data = json.loads(candidate)
    except json.JSONDecodeError:
        data = json.loads(re.sub(r"\bTrue\b", "true", re.sub(r"\bFalse\b", "false", candidate)))
    return model.model_validate(data)


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
    def answer(self, question: str, notes: Sequence[Note], temporal: bool = False) -> str:
        """A short answer from the retrieved notes (no notes: no memory context)."""


# ---- offline: no model at all ---------------------------------------------------------------------

# scikit-learn's English stop words plus the fillers of chat ("yeah", "awesome", "lol").
_STOP = ENGLISH_STOP_WORDS | frozenset("""also am did does doing done gets getting goes going gone got
having know like lot made make oh ok okay really say said sure thing things think way yeah yes hey hi
thanks thank wow great good glad awesome cool feel feeling felt lol let lets time times day days
today tomorrow yesterday week weeks month months year years ago recently tell told just want""".split())
_MONTHS_DAYS = frozenset("""january february march april may june july august september october
november december monday tuesday wednesday thursday friday saturday sunday morning evening night
afternoon""".split())
TAG_VOCABULARY = (
    "family", "friends", "relationships", "work", "career", "education", "health", "fitness",
    "food", "travel", "hobbies", "art", "music", "books", "sports", "pets", "home", "finance",
    "shopping", "technology", "nature", "events", "emotions", "plans", "community", "identity",
    "children", "parenting", "volunteering", "security",
)


class OfflineLLM(LLM):
    """Heuristics that need no model beyond the text encoder.

    Keywords: content words (no names, numbers, dates or stop words) ranked by the cosine of
    their static word-piece vector with the note's centroid. Tags: the closest entries of a
    small topic vocabulary. Evolution: link to neighbours above `link_threshold`, never edit
    them. Answers: the retrieved sentence closest to the question (a date for temporal ones).
    """

    name = "offline"

    def __init__(self, text_encoder: TextEncoder, *, link_threshold: float = 0.5) -> None:
        self.text = text_encoder
        self.link_threshold = link_threshold
        self._tag_vectors: np.ndarray | None = None

    @staticmethod
    def _candidates(content: str) -> list[str]:
        words, seen = [], set()
        for sentence in re.split(r"(?<=[.!?])\s+", content):
            for position, token in enumerate(re.findall(r"[A-Za-z][A-Za-z'-]*", sentence)):
                word = token.strip("'-").lower()
                is_name = token[0].isupper() and position > 0
                if (len(word) < 3 or word in _STOP or word in _MONTHS_DAYS or is_name
                        or "'" in word or word in seen):
                    continue
                seen.add(word)
                words.append(word)
        return words

    def analyze(self, content: str) -> NoteMeta:
        words = self._candidates(content) or ["note", "memory", "personal"]
        vectors = self.text.word_vectors(words)
        centroid = vectors.mean(axis=0)
        ranked = [words[i] for i in np.argsort(-(vectors @ centroid), kind="stable")]
        keywords = ranked[:6]
        while len(keywords) < 3:
            keywords.append(("memory", "personal", "note")[len(keywords)])
        if self._tag_vectors is None:
            self._tag_vectors = self.text.word_vectors(list(TAG_VOCABULARY))
        tag_scores = self._tag_vectors @ centroid
        tags = [TAG_VOCABULARY[i] for i in np.argsort(-tag_scores, kind="stable")[:3]]
        context = f"A personal note about {', '.join(tags[:2])}, mentioning {', '.join(keywords[:3])}."
        return NoteMeta(keywords=keywords, context=context, tags=tags)

    def evolve(self, draft: Draft, neighbours: Sequence[tuple[Note, float]]) -> Evolution:
        links = [note.id for note, score in neighbours if score >= self.link_threshold]
        return Evolution(should_evolve=bool(links), actions=["strengthen"] if links else [],
                         suggested_connections=links, tags_to_update=draft.tags)

    def answer(self, question: str, notes: Sequence[Note], temporal: bool = False) -> str:
        if not notes:
            return NO_MEMORY_ANSWER
        sentences = [(n, s) for n in notes for s in re.split(r"(?<=[.!?])\s+", n.content) if s.strip()]
        vectors = self.text.encode([question] + [s for _, s in sentences])
        best_note, best_sentence = sentences[int(np.argmax(vectors[1:] @ vectors[0]))]
        if temporal:
            return _spoken_date(best_note.timestamp)
        return best_sentence.strip()


def _spoken_date(iso: str) -> str:
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    return f"{moment.day} {moment.strftime('%B')} {moment.year}"


# ---- chat models ------------------------------------------------------------------------------------

class ChatLLM(LLM):
    """A model that completes prompts; JSON is validated, retried once, then heuristics fill in."""

    def __init__(self, fallback: OfflineLLM) -> None:
        self.fallback = fallback

    @abstractmethod
    def complete(self, prompt: str, max_tokens: int = 512) -> str:
        """The model's reply to one user prompt (raises LLMError when unreachable)."""

    def _ask_json(self, prompt: str, model: type[BaseModel]) -> BaseModel | None:
        for attempt in (1, 2):
            try:
                return parse_json_reply(self.complete(prompt), model)
            except (ValueError, ValidationError, json.JSONDecodeError) as exc:
                log.warning("%s: malformed %s reply (attempt %d): %s", self.name, model.__name__,
                            attempt, exc.__class__.__name__)
            except LLMError as exc:
                log.warning("%s failed, using offline heuristics: %s", self.name, exc)
                return None
        return None

    def analyze(self, content: str) -> NoteMeta:
        meta = self._ask_json(ANALYZE_PROMPT.format(content=content), NoteMeta)
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
        decision = self._ask_json(prompt, Evolution)
        return decision if decision is not None else self.fallback.evolve(draft, neighbours)

    def answer(self, question: str, notes: Sequence[Note], temporal: bool = False) -> str:
        return self.complete(answer_prompt(question, notes, temporal), max_tokens=64).strip()


class OpenAIChat(ChatLLM):
    """Any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp, HF router)."""

    def __init__(self, model: str, fallback: OfflineLLM, *, base_url: str | None = None,
                 api_key: str | None = None, timeout: float = 60.0) -> None:
        from openai import OpenAI

        super().__init__(fallback)
        self.name = f"openai:{model}"
        self.model = model
        self.client = OpenAI(base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
                             api_key=api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
                             timeout=timeout, max_retries=1)

    def complete(self, prompt: str, max_tokens: int = 512) -> str:
        import openai

        try:
            reply = self.client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": prompt}],
                temperature=0.0, max_tokens=max_tokens)
        except openai.OpenAIError as exc:
            raise LLMError(f"{self.name} at {self.client.base_url} failed: {exc.__class__.__name__}: "
                           f"{exc}") from exc
        choices = getattr(reply, "choices", None)  # a proxy's HTML page arrives as a plain str
        if not choices or getattr(choices[0], "message", None) is None:
            raise LLMError(f"{self.name} at {self.client.base_url} did not return a chat completion")
        return choices[0].message.content or ""


class HFChat(ChatLLM):
    """A local transformers causal LM (Hub id resolved through the cache, or a local folder)."""

    def __init__(self, model: str, fallback: OfflineLLM, *, device: str = "cpu") -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        super().__init__(fallback)
        self.name = f"hf:{model}"
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model)
            self.model = AutoModelForCausalLM.from_pretrained(model).to(device).eval()
        except (OSError, ValueError) as exc:  # missing files, or a folder that holds no model
            raise LLMError(f"cannot load {model!r} with transformers: {exc}") from exc

    def complete(self, prompt: str, max_tokens: int = 512) -> str:
        import torch

        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                      tokenize=False, add_generation_prompt=True)
        else:
            text = prompt
        inputs = self.tokenizer(text, return_tensors="pt").to(self.model.device)
        with torch.no_grad():
            output = self.model.generate(**inputs, max_new_tokens=max_tokens, do_sample=False,
                                         pad_token_id=self.tokenizer.pad_token_id
                                         or self.tokenizer.eos_token_id)
        return self.tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)


def make_llm(spec: str | LLM | None, text_encoder: TextEncoder) -> LLM:
    """An LLM from "offline", "openai:<model>" or "hf:<model-id>" (default: $BIOMEM_LLM or offline)."""
    if isinstance(spec, LLM):
        return spec
    spec = spec or os.environ.get("BIOMEM_LLM") or "offline"
    offline = OfflineLLM(text_encoder)
    kind, _, model = spec.partition(":")
    if kind == "offline" and not model:
        return offline
    if kind == "openai" and model:
        return OpenAIChat(model, offline)
    if kind == "hf" and model:
        return HFChat(model, offline)
    raise InvalidInputError(f"unknown LLM {spec!r}: use offline, openai:<model> or hf:<model-id>")
