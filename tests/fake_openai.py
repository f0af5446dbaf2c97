"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests.

It speaks the real protocol over real HTTP: ``POST /v1/chat/completions`` with a
JSON body, answered with a chat-completion object (``id``, ``model``,
``choices[0].message`` with ``tool_calls``, ``finish_reason``, ``usage``). Each
test gives it a script: a list of steps, one per request, or a function of the
request. Every request is recorded (body and headers) for assertions.

Standard library only, so the same file can run inside a container.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


@dataclass
class Step:
    """One scripted answer: an HTTP status, headers and a JSON body."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def call(name: str, arguments: Any) -> dict[str, Any]:
    """A tool call; ``arguments`` as an object (encoded) or a raw string (sent as is)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "id": f"call_{next(_ids)}",
        "type": "function",
        "function": {"name": name, "arguments": raw},
    }


def reply(
    *calls: dict[str, Any],
    content: str | None = None,
    model: str = "qwen-test",
    usage: tuple[int, int] = (100, 20),
) -> Step:
    """A chat completion carrying ``calls`` (or only ``content``)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return Step(
        body={
            "id": f"chatcmpl-{next(_ids)}",
            "object": "chat.completion",
            "created": 1764633600,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": usage[0] + usage[1],
            },
        }
    )


def error(status: int, message: str = "try again", retry_after: str | None = None) -> Step:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Step(status, {"error": {"message": message, "type": "server_error"}}, headers)


Script = list[Step] | Callable[[dict[str, Any], int], Step]


class FakeModel:
    """The server; use as a context manager. ``base_url`` ends in ``/v1``."""

    def __init__(
        self, script: Script, *, key: str | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.script = script
        self.key = key
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self.base_url = f"http://{host}:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> FakeModel:
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread (inside a container)."""
        self._server.serve_forever()

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Step:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.headers.append(headers)
        if self.key is not None and headers.get("authorization") != f"Bearer {self.key}":
            return Step(401, {"error": {"message": "invalid api key", "type": "auth"}})
        if callable(self.script):
            return self.script(body, index)
        if index >= len(self.script):
            return reply(content="(script exhausted)")
        return self.script[index]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path != "/v1/chat/completions":
                    self._send(Step(404, {"error": {"message": f"no route {self.path}"}}))
                    return
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send(Step(400, {"error": {"message": "body is not JSON"}}))
                    return
                headers = {k.lower(): v for k, v in self.headers.items()}
                self._send(fake._next(body, headers))

            def _send(self, step: Step) -> None:
                data = json.dumps(step.body).encode()
                self.send_response(step.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in step.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
