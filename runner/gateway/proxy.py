"""deltarun model proxy: the one road out of a ``network: model-only`` sandbox.

The sandbox sits on an internal Docker network with no route out; this proxy is
the only other member, reachable as ``http://model-gateway:8080``. It forwards
requests under the upstream's path prefix to the one upstream host and nothing
else, so the agent can talk to its model but cannot reach any other address.
The API key lives only in this container's environment: the sandbox holds at most a
placeholder, which is dropped here, and the key (if any) is added here.

Configuration (environment):
    DELTARUN_UPSTREAM      base URL of the model, e.g. http://fake-model:8000/v1 or https://...
    DELTARUN_UPSTREAM_KEY  optional; the API key sent upstream
    DELTARUN_LISTEN_HOST   optional; the address to listen on, default 0.0.0.0
    DELTARUN_LISTEN_PORT   optional; default 8080 (0: a free port, named on the start-up line)
    DELTARUN_BUDGET_TOKENS, DELTARUN_BUDGET_USD, DELTARUN_PRICE: optional; see budget.py
A bad value stops the proxy at start (exit 2), never a budget silently not enforced.

Rules:
    * ``GET /__deltarun_ready`` answers 200 (the harness waits for it).
    * A path under the upstream's prefix (``/v1`` and ``/v1/...`` above) is forwarded with the
      same method, path and query; anything else (other paths, ``..`` segments, absolute-form
      targets) gets 403. Hop-by-hop headers are dropped and ``Host`` names the upstream.
    * The agent's ``Authorization``, ``x-api-key`` and ``api-key`` headers are always dropped.
      With a key, it is added in the style of the request's API (wire.api_of): ``x-api-key``
      for Anthropic Messages (a ``messages`` path, or an ``anthropic-version`` header),
      ``Authorization: Bearer`` for everything else.
    * Request bodies over 8 MiB get 413, upstream responses over 32 MiB become 502, the
      upstream has 600 s to answer, and an upstream that cannot be reached gives 502.
    * The whole upstream response is read before it is sent on: a streamed (SSE) answer
      arrives in one piece at the end, which the model clients accept. An answer cut off
      part-way becomes 502, but what arrived of it still counts.
    * With a budget, a request made once it is spent is answered here, not forwarded
      (budget.py: the status and shape per API).
    * After each request (except the readiness probe) one JSON line goes to stdout:
      ``{"path", "status", "model", "prompt_tokens", "completion_tokens",
      "cache_read_tokens", "cache_write_tokens", "latency_ms", "tool_calls",
      "budget_exhausted"}``. The model, counts and tool-call names are the answer's own
      (wire.py); ``latency_ms`` is the upstream's time to the last byte (0 when nothing was
      forwarded). The path is logged without its query string; the key, headers and bodies
      are never printed.

Standard library only, so it runs on the sandbox image itself.
"""

from __future__ import annotations

import http.client
import json
import os
import posixpath
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Mapping
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase

from .budget import Budget, refusal
from .wire import ANTHROPIC, Usage, api_of, read_answer

DEFAULT_PORT = 8080
READY_PATH = "/__deltarun_ready"
MAX_REQUEST_BYTES = 8 << 20
MAX_RESPONSE_BYTES = 32 << 20
DISCARD_LIMIT_BYTES = 64 << 20  # read and dropped after a 413, so the client sees the answer
UPSTREAM_TIMEOUT_S = 600.0
LOG_LOCK = threading.Lock()  # one whole line at a time from the handler threads
CLIENT_IDLE_TIMEOUT_S = 660.0

# RFC 9110 §7.6.1 hop-by-hop headers, plus those this proxy sets itself.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}
KEY_HEADERS = {"authorization", "x-api-key", "api-key"}  # the agent's placeholder, never sent
SET_HERE = {"host", "content-length", "accept-encoding", "expect"}
SET_BY_SERVER = {"content-length", "server", "date"}  # http.server writes its own


class Upstream:
    """The single upstream: scheme, host, port, path prefix and the optional key."""

    def __init__(self, url: str, key: str | None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"DELTARUN_UPSTREAM must be an http(s) URL with a host, not {url!r}")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError("DELTARUN_UPSTREAM must not carry credentials, a query or a fragment")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        default_port = self.port == (443 if self.https else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self.key = key or None

    def allows(self, path: str) -> bool:
        """Is ``path`` (no query) under the prefix, with no dot segments even once decoded?"""
        if not path.startswith("/"):
            return False  # absolute-form ("http://other/...") or asterisk-form targets
        decoded = urllib.parse.unquote(path)
        if posixpath.normpath(decoded) != decoded.rstrip("/") and decoded != "/":
            return False  # "..", "." or "//" segments: refuse rather than guess what they mean
        return decoded == self.prefix or decoded.startswith(self.prefix + "/")

    def key_header(self, api: str) -> tuple[str, str] | None:
        """The key as the request's API expects it, or ``None`` without a key."""
        if self.key is None:
            return None
        if api == ANTHROPIC:
            return "x-api-key", self.key
        return "Authorization", f"Bearer {self.key}"

    def connect(self) -> http.client.HTTPConnection:
        if self.https:
            context = ssl.create_default_context()
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=UPSTREAM_TIMEOUT_S, context=context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=UPSTREAM_TIMEOUT_S)


class TooLarge(Exception):
    """A body over its cap."""


class CutOff(Exception):
    """The upstream's answer ended before its end: what came, and its content type."""

    def __init__(self, partial: bytes, content_type: str) -> None:
        super().__init__("upstream answer cut off")
        self.partial, self.content_type = partial, content_type


class Handler(BaseHTTPRequestHandler):
    """Forwards allowed requests to the upstream; refuses everything else."""

    protocol_version = "HTTP/1.1"
    server_version = "deltarun-model-proxy"
    timeout = CLIENT_IDLE_TIMEOUT_S  # an idle client connection is closed, freeing its thread
    upstream: Upstream  # set in main()
    budget: Budget  # set in main()

    def do_GET(self) -> None:
        if self.path == READY_PATH:
            self.reply_json(200, {"ready": True})
            return
        self.forward()

    def forward(self) -> None:
        path = self.path.partition("?")[0]
        if not self.upstream.allows(path):
            self.drain_request()
            self.reply_json(403, error(f"only {self.upstream.prefix}/... is forwarded"))
            self.log_exchange(path, 403)
            return
        received, body = self.receive(path)
        if not received:
            return
        api = api_of(urllib.parse.unquote(path), "anthropic-version" in self.headers)
        spent = self.budget.exhausted()
        if spent is not None:
            status, payload = refusal(api, spent)
            self.reply_json(status, payload, {"x-should-retry": "false"})
            self.log_exchange(path, status, budget_exhausted=True)
            return
        self.relay(path, api, body)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = forward

    def receive(self, path: str) -> tuple[bool, bytes | None]:
        """The request body (``None`` when there is none); answers and logs a bad one itself."""
        try:
            return True, self.read_request_body()
        except TooLarge:
            # Read the rest first (up to a limit) so the client is not reset before it can
            # read the answer; the connection closes either way.
            self.discard_body(DISCARD_LIMIT_BYTES)
            self.close_connection = True
            self.reply_json(413, error(f"request body over {MAX_REQUEST_BYTES} bytes"))
            self.log_exchange(path, 413)
        except ValueError as exc:
            self.close_connection = True
            self.reply_json(400, error(f"bad request body: {exc}"))
            self.log_exchange(path, 400)
        return False, None

    def relay(self, path: str, api: str, body: bytes | None) -> None:
        """Forward the request, send the answer on, count what it used."""
        started = time.monotonic()
        headers: list[tuple[str, str]] = []
        data, content_type = b"", ""
        try:
            # The target as the client sent it: an allowed path and its query, unchanged.
            status, headers, data = self.exchange(api, self.path, body)
        except TooLarge:
            status, message = 502, f"upstream response over {MAX_RESPONSE_BYTES} bytes"
        except CutOff as cut:
            status, message = 502, "upstream answer cut off"
            data, content_type = cut.partial, cut.content_type
        except (OSError, http.client.HTTPException) as exc:
            status, message = 502, f"upstream unreachable: {type(exc).__name__}"
        else:
            message = ""
            content_type = next((v for k, v in headers if k.lower() == "content-type"), "")
        latency_ms = round((time.monotonic() - started) * 1000)
        # Counted before it is sent on: a client gone by now (timed out, or hung up on
        # purpose) does not make what the model used vanish from the budget or the log.
        usage = usage_of(data, content_type)
        self.budget.spend(
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
        )
        try:
            if message:
                self.reply_json(status, error(message))
            else:
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
        finally:
            self.log_exchange(path, status, usage, latency_ms)

    def exchange(
        self, api: str, target: str, body: bytes | None
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request to the upstream; returns status, end-to-end headers and the body."""
        dropped = HOP_BY_HOP | KEY_HEADERS | SET_HERE | connection_tokens(self.headers)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
        headers["Host"] = self.upstream.host_header
        headers["Accept-Encoding"] = "identity"  # so the usage in the answer can be read
        key = self.upstream.key_header(api)
        if key is not None:
            headers[key[0]] = key[1]
        if body is not None:
            headers["Content-Length"] = str(len(body))
        connection = self.upstream.connect()
        try:
            connection.request(self.command, target, body=body, headers=headers)
            response = connection.getresponse()
            try:
                data = response.read(MAX_RESPONSE_BYTES + 1)
            except http.client.IncompleteRead as exc:
                raise CutOff(exc.partial, response.headers.get("Content-Type", "")) from exc
            if len(data) > MAX_RESPONSE_BYTES:
                raise TooLarge
            ends = HOP_BY_HOP | SET_BY_SERVER | connection_tokens(response.headers)
            kept = [(k, v) for k, v in response.headers.items() if k.lower() not in ends]
            return response.status, kept, data
        finally:
            connection.close()

    def read_request_body(self) -> bytes | None:
        """The request body, at most ``MAX_REQUEST_BYTES``; ``None`` when there is none."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return read_chunked(self.rfile, MAX_REQUEST_BYTES)
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            return None
        length = int(length_text)
        if length < 0:
            raise ValueError("negative Content-Length")
        if length > MAX_REQUEST_BYTES:
            raise TooLarge
        return self.rfile.read(length)

    def drain_request(self) -> None:
        """Discard the body of a refused request so the connection stays usable."""
        if not self.discard_body(MAX_REQUEST_BYTES):
            self.close_connection = True

    def discard_body(self, limit: int) -> bool:
        """Read and drop a ``Content-Length`` body of at most ``limit`` bytes; done?"""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return False
        if "Transfer-Encoding" in self.headers or not 0 <= length <= limit:
            return False
        while length > 0:
            chunk = self.rfile.read(min(length, 1 << 16))
            if not chunk:
                return False
            length -= len(chunk)
        return True

    def reply_json(
        self, status: int, payload: object, extra: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_exchange(
        self,
        path: str,
        status: int,
        usage: Usage | None = None,
        latency_ms: int = 0,
        *,
        budget_exhausted: bool = False,
    ) -> None:
        usage = usage or Usage()
        line = {
            "path": path,
            "status": status,
            "model": usage.model,
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "latency_ms": latency_ms,
            "tool_calls": usage.tool_calls,
            "budget_exhausted": budget_exhausted,
        }
        with LOG_LOCK:
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()

    def version_string(self) -> str:
        return self.server_version  # without the Python version

    def log_message(self, format: str, *args: object) -> None:
        """Silence the default access log: it would print query strings."""


def usage_of(data: bytes, content_type: str) -> Usage:
    """What the answer reports (wire.read_answer); nothing, should reading it ever fail,
    rather than no log line."""
    try:
        return read_answer(data, content_type)
    except Exception as exc:  # a bug reading a hostile answer must not cost the log line
        print(f"deltarun model proxy: usage unread: {type(exc).__name__}", file=sys.stderr)
        return Usage()


def error(message: str) -> dict[str, object]:
    """An OpenAI-shaped error body, so model clients show the message."""
    return {"error": {"message": f"deltarun model gateway: {message}", "type": "gateway_error"}}


def connection_tokens(headers: Message) -> set[str]:
    """Header names listed in ``Connection`` are hop-by-hop too."""
    values = headers.get_all("Connection") or []
    return {token.strip().lower() for value in values for token in value.split(",")}


def read_chunked(stream: BufferedIOBase, cap: int) -> bytes:
    """Decode a chunked request body, refusing more than ``cap`` bytes."""
    readline, read = stream.readline, stream.read
    body = bytearray()
    while True:
        size_line = readline(1024)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise ValueError("bad chunk size") from exc
        if size == 0:
            break
        if len(body) + size > cap:
            raise TooLarge
        body += read(size)
        readline(1024)  # the CRLF after each chunk
    while readline(1024) not in (b"\r\n", b"\n", b""):
        pass  # trailers, ignored
    return bytes(body)


def listen_address(env: Mapping[str, str]) -> tuple[str, int]:
    host = env.get("DELTARUN_LISTEN_HOST") or "0.0.0.0"
    port_text = env.get("DELTARUN_LISTEN_PORT") or str(DEFAULT_PORT)
    if not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"DELTARUN_LISTEN_PORT must be a port number, not {port_text!r}")
    return host, int(port_text)


def main() -> int:
    env = os.environ
    try:
        upstream = Upstream(env.get("DELTARUN_UPSTREAM", ""), env.get("DELTARUN_UPSTREAM_KEY"))
        budget = Budget.from_env(env)
        listen = listen_address(env)
    except ValueError as exc:
        print(f"deltarun model proxy: {exc}", file=sys.stderr, flush=True)
        return 2
    Handler.upstream = upstream
    Handler.budget = budget
    server = ThreadingHTTPServer(listen, Handler)
    server.daemon_threads = True
    target = f"{upstream.prefix}/... to {upstream.host_header}{budget.describe()}"
    print(
        f"deltarun model proxy: listening on {listen[0]}:{server.server_port}, forwarding {target}",
        file=sys.stderr,
        flush=True,
    )
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
