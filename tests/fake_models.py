"""A scripted model server that speaks the wire formats of the real agent CLIs, for tests.

Three APIs over real HTTP, each streamed (server-sent events) when the request asks for it
and as one JSON body otherwise, field for field as the model APIs send them:

    Anthropic Messages        ``POST .../messages``          (Claude Code)
    OpenAI Responses          ``POST .../responses``         (Codex)
    OpenAI Chat Completions   ``POST .../chat/completions``  (aider, mini-swe-agent)

A test scripts what the model says (``Reply``: text and tool calls, rendered by
tests/fake_wire.py) as a function of the request (``Request``: its API, body, the tools it
offers, the tool results it carries, how many assistant turns it already holds).
``Conversation`` is the usual script: the n-th reply for a request with n assistant turns,
so that the side requests a CLI makes (titles, token counts, warm-ups) neither shift the
conversation nor need a global counter.

Every request is recorded with its headers and body, and with the usage the server
reported for it, so a test can compare the harness's token counts with what was served
and check which key arrived. The server runs in a thread of the test process; it binds
to the address a test names (the host's address on a test network, for a gateway proxy
in a container to reach).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fake_wire import JSON, NO_USAGE, RENDERERS, SSE, Api, Call, Reply, Usage

__all__ = ["Api", "Call", "Conversation", "FakeModels", "Reply", "Request", "Script", "Usage"]


@dataclass
class Request:
    """One request as the server received it, and what it was answered."""

    number: int
    method: str
    path: str
    headers: list[tuple[str, str]]
    raw: bytes
    body: Any
    api: Api | None
    status: int = 0
    reply: Reply | None = None
    served: Usage = NO_USAGE

    def header(self, name: str) -> str | None:
        values = [value for key, value in self.headers if key.lower() == name.lower()]
        return values[0] if values else None

    @property
    def streamed(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("stream") is True

    @property
    def model(self) -> str:
        model = self.body.get("model") if isinstance(self.body, dict) else None
        return model if isinstance(model, str) else "fake-model"

    @property
    def items(self) -> list[dict[str, Any]]:
        """The conversation: Messages and Chat ``messages``, or Responses ``input`` items."""
        if not isinstance(self.body, dict):
            return []
        found = self.body.get("input" if self.api == "responses" else "messages")
        return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []

    @property
    def assistant_turns(self) -> int:
        """Replies of the model already in the conversation (one item per reply for
        Responses: every reply this server sends holds one output item)."""
        return self.turns_since(None)

    def turns_since(self, marker: str | None) -> int:
        """Replies of the model after the first item that holds ``marker`` (the task's
        prompt: a CLI's own example exchanges before it are not turns); all of them without
        a marker, or when no item holds it."""
        items = self.items
        if marker is not None:
            start = next((i for i, item in enumerate(items) if marker in json.dumps(item)), 0)
            items = items[start:]
        if self.api == "responses":
            return sum(1 for item in items if _is_output_item(item))
        return sum(1 for item in items if item.get("role") == "assistant")

    @property
    def tool_names(self) -> list[str]:
        """The tools the request offers (a Responses tool without a name by its type)."""
        tools = self.body.get("tools") if isinstance(self.body, dict) else None
        names = []
        for tool in tools if isinstance(tools, list) else []:
            if not isinstance(tool, dict):
                continue
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
            names.append(str(name or tool.get("type")))
        return names

    @property
    def tool_results(self) -> list[str]:
        """The texts of the tool results the conversation carries, in order."""
        found: list[str] = []
        for item in self.items:
            if self.api == "responses" and str(item.get("type", "")).endswith("_output"):
                found.append(_text(item.get("output")))
            elif self.api == "chat" and item.get("role") == "tool":
                found.append(_text(item.get("content")))
            elif self.api == "anthropic" and isinstance(item.get("content"), list):
                found += [
                    _text(block.get("content"))
                    for block in item["content"]
                    if isinstance(block, dict) and block.get("type") == "tool_result"
                ]
        return found

    @property
    def text(self) -> str:
        """Everything the request says, as one string (for searching it)."""
        return self.raw.decode("utf-8", "replace")


def _is_output_item(item: dict[str, Any]) -> bool:
    kind = str(item.get("type", ""))
    if kind == "message":
        return item.get("role") == "assistant"
    return kind.endswith("_call")


def _text(value: Any) -> str:
    """A tool result's text: a string, or the texts of its parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text(part) for part in value)
    if isinstance(value, dict):
        return _text(value.get("text") or value.get("content") or value.get("output") or "")
    return "" if value is None else json.dumps(value)


Script = Callable[[Request], Reply]
DONE = Reply("Done.")
ASIDE = Reply("OK", usage=Usage(12, 1))  # a side request's answer


class Conversation:
    """Replies by the number of assistant turns already in the request (after the item
    holding ``since``, the task's prompt, when given): ``turns[n]`` (a ``Reply``, or a
    function of the request that gives one) for a request holding n; past the end,
    ``after``. A request ``main`` does not accept (a CLI's side request: a title, a token
    count, a warm-up) gets ``aside`` and leaves the conversation where it is."""

    def __init__(
        self,
        turns: Sequence[Reply | Script],
        *,
        after: Reply = DONE,
        since: str | None = None,
        main: Callable[[Request], bool] = lambda request: True,
        aside: Reply = ASIDE,
    ) -> None:
        self.turns = list(turns)
        self.after = after
        self.since = since
        self.main = main
        self.aside = aside

    def __call__(self, request: Request) -> Reply:
        if not self.main(request):
            return self.aside
        index = request.turns_since(self.since)
        if index >= len(self.turns):
            return self.after
        turn = self.turns[index]
        return turn if isinstance(turn, Reply) else turn(request)


class FakeModels:
    """The server, in a thread; a context manager. ``url`` has no path: append the API's
    prefix (``/v1`` for OpenAI clients; Anthropic clients add ``/v1`` themselves)."""

    def __init__(self, script: Script, host: str = "127.0.0.1", port: int = 0) -> None:
        self.script = script
        self.requests: list[Request] = []
        self.errors: list[str] = []  # scripts that raised, as their messages
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> FakeModels:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def served(self) -> Usage:
        """The usage of every answer sent, summed."""
        with self._lock:
            done = list(self.requests)
        total = NO_USAGE
        for request in done:
            total = total + request.served
        return total

    def answered(self, api: Api | None = None) -> list[Request]:
        """The model requests (of ``api``, when given) answered so far."""
        with self._lock:
            return [r for r in self.requests if r.api is not None and api in (None, r.api)]

    def _record(self, request: Request) -> None:
        with self._lock:
            request.number = len(self.requests)
            self.requests.append(request)

    def answer(self, request: Request) -> tuple[int, str, bytes]:
        """The status, content type and body of the answer to ``request``."""
        self._record(request)
        if request.api is None:
            return _not_found(request)
        try:
            reply = self.script(request)
        except Exception as exc:  # shown by the test through ``errors``, never a hang
            self.errors.append(f"{type(exc).__name__}: {exc}")
            request.status = 500
            return 500, "application/json", _error_body("the test's script failed")
        request.reply, request.served, request.status = reply, reply.usage, 200
        render = RENDERERS[request.api]
        body = render(reply, request.model, request.streamed)
        return 200, SSE if request.streamed else JSON, body


def api_of(method: str, path: str) -> Api | None:
    """Which API a request path belongs to (None: a path the server does not serve)."""
    bare = path.partition("?")[0].rstrip("/")
    if method != "POST":
        return None
    if bare.endswith("/messages"):
        return "anthropic"
    if bare.endswith("/responses"):
        return "responses"
    if bare.endswith("/chat/completions"):
        return "chat"
    return None


def _not_found(request: Request) -> tuple[int, str, bytes]:
    request.status = 404
    if request.path.partition("?")[0].endswith("/count_tokens"):
        request.status = 200  # Anthropic's token count: no usage, no model turn
        return 200, JSON, json.dumps({"input_tokens": 100}).encode()
    if request.method == "GET" and request.path.partition("?")[0].endswith("/models"):
        request.status = 200
        return 200, JSON, json.dumps({"object": "list", "data": []}).encode()
    return 404, JSON, _error_body(f"no such route: {request.method} {request.path}")


def _error_body(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "not_found"}}).encode()


def _handler(server: FakeModels) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle_one(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            request = Request(
                0,
                self.command,
                self.path,
                list(self.headers.items()),
                raw,
                body,
                api_of(self.command, self.path),
            )
            status, content_type, data = server.answer(request)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = handle_one

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler
