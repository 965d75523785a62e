"""A real OpenAI-compatible chat server on 127.0.0.1, scripted per test.

    server = ScriptedChatServer()
    server.script('{"keywords": [...], ...}', "not json", Raw(500, "boom"))
    llm = OpenAIChat("test-model", fallback, base_url=server.base_url, api_key="x")
    ...
    server.prompts          # the user prompt of every request received, in order
    server.close()

Each POST /v1/chat/completions takes the next scripted reply: a string (the assistant's
message content, wrapped in OpenAI's response shape), a `Raw` HTTP response (status, body,
content type) or a callable of the request body returning either. With the script used up
the server answers with `default` when set; otherwise it records the request in
`unexpected` and answers 400 (which the OpenAI client does not retry).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Raw:
    """An HTTP response sent as is (not wrapped in OpenAI's shape)."""

    status: int
    body: str
    content_type: str = "application/json"


Reply = str | Raw | Callable[[dict[str, Any]], str | Raw]


def completion(content: str, model: str = "test-model", number: int = 0) -> dict[str, Any]:
    """OpenAI's /v1/chat/completions response for one assistant message."""
    return {
        "id": f"chatcmpl-test-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class ScriptedChatServer:
    """stdlib http.server in a daemon thread on an ephemeral port of 127.0.0.1."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.default: Reply | None = None
        self.requests: list[dict[str, Any]] = []  # JSON bodies, in arrival order
        self.unexpected: list[tuple[str, Any]] = []  # (path, body) not covered by the script
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                raw_body = self.rfile.read(length)
                try:
                    body = json.loads(raw_body)
                except ValueError:
                    body = raw_body.decode("utf-8", "replace")
                if self.path != CHAT_PATH or not isinstance(body, dict):
                    server._record_unexpected(self.path, body)
                    self._send(Raw(404, json.dumps({"error": {"message": f"no route {self.path}"}})))
                    return
                reply = server._next(body)
                if reply is None:
                    self._send(Raw(400, json.dumps({"error": {"message": "script used up"}})))
                    return
                if callable(reply):
                    reply = reply(body)
                if isinstance(reply, str):
                    reply = Raw(200, json.dumps(completion(reply, body.get("model", ""),
                                                           len(server.requests))))
                self._send(reply)

            def _send(self, reply: Raw) -> None:
                data = reply.body.encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                        name="scripted-chat", daemon=True)
        self._thread.start()

    def _next(self, body: dict[str, Any]) -> Reply | None:
        with self._lock:
            if self.replies:
                self.requests.append(body)
                return self.replies.popleft()
            if self.default is not None:
                self.requests.append(body)
                return self.default
            self.unexpected.append((CHAT_PATH, body))
            return None

    def _record_unexpected(self, path: str, body: Any) -> None:
        with self._lock:
            self.unexpected.append((path, body))

    def script(self, *replies: Reply) -> ScriptedChatServer:
        """Queue replies for the next requests, in order."""
        with self._lock:
            self.replies.extend(replies)
        return self

    @property
    def prompts(self) -> list[str]:
        """The user message of every request received (one message per request)."""
        return [body["messages"][-1]["content"] for body in self.requests]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


def closed_port() -> int:
    """A local port nobody listens on (bound once, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
