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

The package: `base` (the interface, what it exchanges, JSON out of replies), `prompts`,
`offline` (OfflineLLM), `chat` (ChatLLM: repair, retry, fallback, stats) and one module per
chat provider (`openai_chat`, `hf_chat`); this module picks one by name (`make_llm`).
"""

from __future__ import annotations

from ...settings import Settings, llm_spec
from ..textenc import TextEncoder
from .base import LLM, Draft, Evolution, NoteMeta, QueryKeywords, extract_json, parse_json_reply
from .chat import (
    ANALYZE_MAX_TOKENS,
    ANSWER_MAX_TOKENS,
    ANSWER_SCHEMA,
    EVOLVE_MAX_TOKENS,
    KEYWORDS_MAX_TOKENS,
    TASKS,
    CallStats,
    ChatLLM,
)
from .hf_chat import SMOLLM2_GGUF, HFChat, smollm2_gguf
from .offline import ABSTAIN_BELOW, NO_MEMORY_ANSWER, TAG_VOCABULARY, OfflineLLM, spoken_date
from .openai_chat import OpenAIChat
from .prompts import (
    ANALYZE_PROMPT,
    ANSWER_PROMPT,
    CONTEXT_PLACEHOLDER,
    EVOLVE_PROMPT,
    KEYWORDS_PROMPT,
    NO_CONTEXT_PROMPT,
    NOT_MENTIONED,
    TEMPORAL_ANSWER_PROMPT,
    answer_prompt,
    fit_notes,
    serialize_notes,
)


def make_llm(spec: str | LLM | None, text_encoder: TextEncoder, settings: Settings | None = None) -> LLM:
    """An LLM from "offline", "openai:<model>" or "hf:<model-id>" (default: BIOMEM_LLM of `settings`,
    else of the environment, which also give the openai: endpoint and key)."""
    if isinstance(spec, LLM):
        return spec
    kind, model = llm_spec(spec or (settings or Settings.from_env()).llm)
    offline = OfflineLLM(text_encoder)
    if kind == "openai":
        endpoint = {} if settings is None else {"base_url": settings.openai_base_url,
                                                "api_key": settings.openai_api_key.get_secret_value()}
        return OpenAIChat(model, offline, **endpoint)
    if kind == "hf":
        return HFChat(model, offline)
    return offline


__all__ = [
    "ABSTAIN_BELOW", "ANALYZE_MAX_TOKENS", "ANALYZE_PROMPT", "ANSWER_MAX_TOKENS", "ANSWER_PROMPT",
    "ANSWER_SCHEMA", "CONTEXT_PLACEHOLDER", "EVOLVE_MAX_TOKENS", "EVOLVE_PROMPT", "KEYWORDS_MAX_TOKENS",
    "KEYWORDS_PROMPT", "LLM", "NOT_MENTIONED", "NO_CONTEXT_PROMPT", "NO_MEMORY_ANSWER", "SMOLLM2_GGUF",
    "TAG_VOCABULARY", "TASKS", "TEMPORAL_ANSWER_PROMPT", "CallStats", "ChatLLM", "Draft", "Evolution",
    "HFChat", "NoteMeta", "OfflineLLM", "OpenAIChat", "QueryKeywords", "answer_prompt", "extract_json",
    "fit_notes", "make_llm", "parse_json_reply", "serialize_notes", "smollm2_gguf", "spoken_date",
]
