"""The model proxy (runner/gateway/proxy.py) run for real on the host, and a fake
upstream on loopback that answers whatever a test scripts, byte for byte.

The proxy is the same code the gateway image runs (``python3 -m runner.gateway.proxy``
here, ``-m gateway.proxy`` there), started as a process with
``DELTARUN_LISTEN_HOST=127.0.0.1`` and ``DELTARUN_LISTEN_PORT=0``; the port it took is read
from its start-up line. Its log lines are collected as they come. Nothing here reaches
beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import queue
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

from runner.sandbox.gateway_ledger import Exchange, read_ledger
from tests import fake_wire
from tests.fake_wire import RENDERERS, Api, Call, Usage

ROOT = Path(__file__).resolve().parents[1]
REAL_KEY = "sk-real-7f3a9c"
PLACEHOLDER = "sk-placeholder-0000"
WAIT_S = 15.0


@dataclass
class Answer:
    """What the fake upstream sends, after ``delay_s``: a status, a content type and a body;
    or ``raw`` bytes written to the socket as they are, after which the connection is closed."""

    body: bytes = b""
    content_type: str = "application/json"
    status: int = 200
    raw: bytes | None = None
    delay_s: float = 0.0  # before answering
    headers: list[tuple[str, str]] = field(default_factory=list)  # sent besides those above


@dataclass
class Seen:
    """One request as the upstream received it."""

    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = [value for key, value in self.headers if key.lower() == name.lower()]
        return values[0] if values else None


class _UpstreamHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _UpstreamServer

    def answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        upstream = self.server.upstream
        upstream.seen.append(Seen(self.command, self.path, list(self.headers.items()), body))
        answer = upstream.answer
        time.sleep(answer.delay_s)
        if answer.raw is not None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.wfile.write(answer.raw)
            return
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        for name, value in answer.headers:
            self.send_header(name, value)
        self.end_headers()
        with contextlib.suppress(OSError):  # the proxy stops reading an answer over its cap
            self.wfile.write(answer.body)

    do_GET = do_POST = answer

    def log_message(self, format: str, *args: object) -> None:
        pass


class _UpstreamServer(ThreadingHTTPServer):
    daemon_threads = True
    upstream: FakeUpstream

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a peer that hung up on a huge answer is expected here


class FakeUpstream:
    """A model server on 127.0.0.1 that gives every request ``answer`` and records it."""

    def __init__(self) -> None:
        self.answer = Answer()
        self.seen: list[Seen] = []
        self.server = _UpstreamServer(("127.0.0.1", 0), _UpstreamHandler)
        self.server.upstream = self
        # A short poll: ``shutdown`` waits for it (half a second by default, every test).
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Reply:
    """The proxy's answer to one request, and the log line it wrote for it."""

    status: int
    headers: dict[str, str]
    body: bytes
    log: dict[str, Any]
    log_line: str

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class RunningProxy:
    """A proxy process; ``ask`` sends one request and waits for its log line."""

    process: subprocess.Popen[bytes]
    port: int
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    def ask(
        self,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        method: str = "POST",
    ) -> Reply:
        data = json.dumps(body).encode() if body is not None else None
        sent = {"Content-Type": "application/json", **(headers or {})}
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT_S)
        try:
            connection.request(method, path, body=data, headers=sent)
            response = connection.getresponse()
            status, got, payload = response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()
        line = self.lines.get(timeout=WAIT_S)
        return Reply(
            status, {k.lower(): v for k, v in got.items()}, payload, json.loads(line), line
        )

    def ready(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT_S)
        try:
            connection.request("GET", "/__deltarun_ready")
            response = connection.getresponse()
            response.read()  # unread, closing would reset the connection
            return response.status == 200
        finally:
            connection.close()


def _pump(stream: Any, sink: list[str], lines: queue.Queue[str] | None) -> None:
    for raw in iter(stream.readline, b""):
        text = raw.decode("utf-8", "replace").rstrip("\n")
        sink.append(text)
        if lines is not None:
            lines.put(text)


# Every proxy's ledger directory lives under one root, removed when the test process exits.
_LEDGERS = tempfile.TemporaryDirectory(prefix="deltarun-test-ledgers-")


def proxy_environment(upstream: str, key: str | None, **extra: str) -> dict[str, str]:
    env = {
        "DELTARUN_UPSTREAM": upstream,
        "DELTARUN_LISTEN_HOST": "127.0.0.1",
        "DELTARUN_LISTEN_PORT": "0",
        "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ in the source tree
        "DELTARUN_LEDGER": tempfile.mkdtemp(prefix="ledger-", dir=_LEDGERS.name),
        **extra,
    }
    if key is not None:
        env["DELTARUN_UPSTREAM_KEY"] = key
    return env


def start_proxy(env: Mapping[str, str]) -> subprocess.CompletedProcess[bytes] | RunningProxy:
    """Start the proxy; the finished process when it refused to start."""
    process = subprocess.Popen(
        [sys.executable, "-B", "-m", "runner.gateway.proxy"],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    stderr = cast(Any, process.stderr)
    first = stderr.readline().decode("utf-8", "replace")
    if "listening on" not in first:
        rest = stderr.read().decode("utf-8", "replace")
        code = process.wait(timeout=WAIT_S)
        out = cast(Any, process.stdout).read()
        return subprocess.CompletedProcess(process.args, code, out, (first + rest).encode())
    running = RunningProxy(
        process, int(first.split("listening on ")[1].split(",")[0].split(":")[1])
    )
    running.stderr.append(first.rstrip("\n"))
    for stream, sink, lines in (
        (process.stdout, running.stdout, running.lines),
        (stderr, running.stderr, None),
    ):
        threading.Thread(target=_pump, args=(stream, sink, lines), daemon=True).start()
    return running


def ledger_of(env: Mapping[str, str]) -> list[Exchange]:
    """The proxy's ledger as the harness reads it (the directory as a tar stream, which is
    what ``get_archive`` gives for the gateway's volume)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(env["DELTARUN_LEDGER"], arcname="ledger")
    return read_ledger([buffer.getvalue()])


def totals_of(env: Mapping[str, str]) -> dict[str, Any]:
    """The ledger's totals, as the proxy last wrote them."""
    return cast(
        dict[str, Any], json.loads((Path(env["DELTARUN_LEDGER"]) / "totals.json").read_text())
    )


@contextlib.contextmanager
def proxy_running(env: Mapping[str, str]) -> Iterator[RunningProxy]:
    started = start_proxy(env)
    assert isinstance(started, RunningProxy), started.stderr
    try:
        yield started
    finally:
        started.process.terminate()
        started.process.wait(timeout=WAIT_S)


def sse(*events: tuple[str | None, Any]) -> bytes:
    """A server-sent-event stream: each ``(event name or None, data)``; data as JSON unless
    it is already bytes."""
    out = bytearray()
    for name, data in events:
        if name is not None:
            out += f"event: {name}\n".encode()
        payload = data if isinstance(data, bytes) else json.dumps(data).encode()
        out += b"data: " + payload + b"\n\n"
    return bytes(out)


# What the hostile gateway tests send and are answered, for every wire API alike.
PINNED = "pinned-model-1"
APIS: list[Api] = ["anthropic", "chat", "responses"]
PATHS = {"anthropic": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}
HEADERS = {
    "anthropic": {"anthropic-version": "2023-06-01", "x-api-key": "placeholder"},
    "chat": {"Authorization": "Bearer placeholder"},
    "responses": {"Authorization": "Bearer placeholder"},
}
MAX_OUT = 25_000
BILLED = Usage(32_000, 900)


def request_for(api: Api, **extra: Any) -> dict[str, Any]:
    """A request naming its output maximum in its API's own field (``extra`` beside it)."""
    limit = "max_output_tokens" if api == "responses" else "max_tokens"
    items = "input" if api == "responses" else "messages"
    return {
        "model": PINNED,
        items: [{"role": "user", "content": "fix it"}],
        limit: MAX_OUT,
        **extra,
    }


def answer_of(api: Api, streamed: bool, usage: Usage = BILLED, text: str = "Done.") -> bytes:
    """The pinned model's answer with one tool call, as the API writes it."""
    reply = fake_wire.Reply(text, (Call("Bash", {"command": "ls"}),), usage)
    return RENDERERS[api](reply, PINNED, streamed)
