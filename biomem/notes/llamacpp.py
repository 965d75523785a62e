"""llama.cpp's OpenAI-compatible server for a local GGUF file, started and stopped from Python.

    from biomem.notes.llm import smollm2_gguf
    with serve_gguf(smollm2_gguf()) as base_url:        # http://127.0.0.1:<free port>/v1
        mem = BioMemory("m.db", llm=OpenAIChat(model_name(smollm2_gguf()), offline, base_url=base_url))

The model is served under its file's stem (`model_name`), e.g. "SmolLM2-135M-Instruct.Q4_1".
By hand: `python -m llama_cpp.server --model FILE --host 127.0.0.1 --port 8080 --n_threads 1
--n_threads_batch 1`, then `OPENAI_BASE_URL=http://127.0.0.1:8080/v1 BIOMEM_LLM=openai:<name>`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ..errors import LLMError, ModelUnavailableError

SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context",
                  "pydantic_settings")  # llama-cpp-python and its [server] extra
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 never through a proxy
INSTALL_HINT = ("pip install 'llama-cpp-python[server]==0.3.36', built portably as docs/llm.md shows "
                "(~7 min on 2 cores)")


def require_server() -> None:
    """Raise ModelUnavailableError unless llama-cpp-python with its [server] extra is installed."""
    missing = [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ModelUnavailableError(f"llama.cpp's server needs {', '.join(missing)}: {INSTALL_HINT}")


def model_name(path: str | os.PathLike) -> str:
    """The name serve_gguf gives the model: its file's stem."""
    return Path(path).stem


def default_threads() -> int:
    """Half the cores, at least one: on a busy 2-core machine 2 threads decoded 5-10x slower than 1."""
    return max(1, (os.cpu_count() or 2) // 2)


def free_port() -> int:
    """A port of 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve_gguf(path: str | os.PathLike, port: int | None = None, threads: int | None = None, *,
               n_ctx: int = 2048, timeout: float = 120.0) -> Iterator[str]:
    """Serve a GGUF on 127.0.0.1 until the block ends; yields the base URL ("http://127.0.0.1:P/v1")."""
    require_server()
    path = Path(path)
    if not path.is_file():
        raise ModelUnavailableError(f"no GGUF file at {path}")
    port = port or free_port()
    threads = threads or default_threads()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(path),
               "--model_alias", model_name(path), "--host", "127.0.0.1", "--port", str(port),
               "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch", str(threads),
               "--verbose", "False"]
    with serve_command(command, f"http://127.0.0.1:{port}/v1", timeout) as base_url:
        yield base_url


@contextmanager
def serve_command(command: list[str], base_url: str, timeout: float = 120.0) -> Iterator[str]:
    """Run an OpenAI-compatible server command until the block ends; yields base_url once it completes.

    Ready means one tiny completion answered, not just a listening port: a server built for a CPU
    feature the kernel refuses (AMX tiles) loads the model, lists it, and dies at its first completion.
    """
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT)
        try:
            _wait_until_ready(process, base_url, timeout, log)
            _check_completion(process, base_url, timeout, log)
            yield base_url
        finally:
            _stop(process)


def _wait_until_ready(process: subprocess.Popen, base_url: str, timeout: float, log: IO[bytes]) -> None:
    """Poll GET /v1/models (no proxy) until it answers 200; LLMError if the server dies or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LLMError(f"llama.cpp server exited with code {process.returncode}: {_tail(log)}")
        try:
            with _OPENER.open(f"{base_url}/models", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    raise LLMError(f"llama.cpp server at {base_url} did not answer within {timeout:.0f} s: {_tail(log)}")


def _check_completion(process: subprocess.Popen, base_url: str, timeout: float, log: IO[bytes]) -> None:
    """Ask for one token; LLMError with the server's last output lines if it dies or never answers."""
    request = urllib.request.Request(f"{base_url}/completions", data=json.dumps(
        {"prompt": "Hello", "max_tokens": 1, "temperature": 0}).encode(), headers={"Content-Type": "application/json"})
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            if response.status == 200 and json.load(response).get("choices"):
                return
            problem = f"answered HTTP {response.status} without a completion"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        problem = f"failed its first completion ({exc})"
    try:
        process.wait(timeout=2)  # a crash is reported with its exit code
    except subprocess.TimeoutExpired:
        pass
    if process.returncode is not None:
        problem = f"died on its first completion (exit code {process.returncode})"
    raise LLMError(f"llama.cpp server at {base_url} {problem}; a build tuned for another CPU does this "
                   f"(docs/llm.md has the portable build). Its last output:\n{_tail(log)}")


def _tail(log: IO[bytes], lines: int = 20, size: int = 4000) -> str:
    """The server's last output lines (at most `size` characters), for error messages."""
    log.seek(0)
    text = log.read().decode("utf-8", "replace").strip()
    return "\n".join(text.splitlines()[-lines:])[-size:] or "(no output)"


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
