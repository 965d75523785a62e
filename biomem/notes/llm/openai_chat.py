"""OpenAIChat: any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp, HF router)."""

from __future__ import annotations

from typing import Any

from ...errors import LLMError
from ...settings import Settings
from .chat import ChatLLM
from .offline import OfflineLLM


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
            api_key = api_key or configured.openai_api_key.get_secret_value()
        self.client = OpenAI(base_url=base_url, api_key=api_key,
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
