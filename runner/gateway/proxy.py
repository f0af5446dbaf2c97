"""deltarun model proxy: the one road out of a ``network: model-only`` sandbox.

The sandbox sits on an internal Docker network with no route out; this proxy is the only
other member, reachable as ``http://model-gateway:8080``. It forwards the model endpoints
of the route's API (routes.py) to the one upstream host and nothing else, so the agent can
talk to its model but cannot reach any other address or endpoint. The API key lives only
in this container's environment: the sandbox holds at most a placeholder, which is
dropped here, and the key (if any) is added here.

Configuration (environment):
    DELTARUN_UPSTREAM      base URL of the model, e.g. http://fake-model:8000/v1 or https://...
    DELTARUN_UPSTREAM_KEY  optional; the API key sent upstream
    DELTARUN_LEDGER        optional; the ledger's directory (ledger.py), default /ledger
    DELTARUN_MAX_OUTPUT_TOKENS  optional; a request's output maximum when it names none
    DELTARUN_POOL_BYTES, DELTARUN_POOL_WAIT_S  optional; the memory bodies and answers may
                           hold together, and how long a request waits for room (upstream.py)
    DELTARUN_LISTEN_HOST   optional; the address to listen on, default 0.0.0.0
    DELTARUN_LISTEN_PORT   optional; default 8080 (0: a free port, named on the start-up line)
    DELTARUN_BUDGET_TOKENS, DELTARUN_BUDGET_USD, DELTARUN_PRICE: optional; see budget.py
A bad value stops the proxy at start (exit 2), never a budget silently not enforced.

Rules:
    * ``GET /__deltarun_ready`` answers 200 (the harness waits for it).
    * A request for an endpoint of routes.ENDPOINTS under the upstream's prefix, its path
      decoded until stable, is forwarded to that canonical path with its query; anything
      else gets 403 and is counted as refused, whatever its method; so does a request
      http.server refuses itself (``malformed``). Hop-by-hop, re-routing and malformed
      headers are dropped (upstream.forwarded_headers) and ``Host`` names the upstream. A
      request body in a content encoding gets 415; a GET with a body, 400.
    * The agent's ``Authorization``, ``x-api-key`` and ``api-key`` headers are always dropped.
      With a key, it is added in the style of the request's API: ``x-api-key`` for Anthropic
      Messages, ``Authorization: Bearer`` for everything else. The key never goes back
      (keyguard.py): it is replaced in an answer's headers and bytes, and an answer that
      carries it in another form is withheld (502).
    * Request bodies over 8 MiB get 413, upstream answers over 32 MiB are cut there (502),
      the upstream has 600 s to answer, and one that cannot be reached gives 502. What
      bodies and answers hold together is bounded (upstream.Pool): 503 when it is full.
    * The whole upstream answer is read before it is sent on: a streamed (SSE) answer
      arrives in one piece at the end, which the model clients accept. A gzip or deflate
      answer is decoded and sent on as identity; interim (1xx) heads are read past.
    * At most ``front.MAX_CONNECTIONS`` connections are served at once (503 past it,
      counted ``busy``), and a request's head is read to 64 KiB (431 past it).
    * With the route's shared rate limits (the relay wrote ``rate-permits`` into the ledger's
      directory), a model request waits for a permit, and a 429 is waited out (its
      ``Retry-After``) and asked again (permits.py).
    * With a budget, a request made once it is spent is answered here, not forwarded
      (budget.py: the status and shape per API). So is every request once the harness has
      written ``run-budget-spent`` into the ledger's directory (the run's budget is spent
      across the fleet; the ledger line carries the flag ``run_budget``).
    * Every request goes into the ledger (ledger.py) before its answer is sent: a forwarded
      one with the models, counts and tool-call names its answer reports (wire.py), or its
      maximum when the answer could not be read whole (``estimated``); a refused one as a
      count. An answer that arrived whole with a usage or tool calls (a model turn) but
      names no model is entered with ``NO_MODEL``, which no route pins (one cut off, or
      with nothing in it, is only counted at its maximum). The key, headers and bodies
      are never written.

Standard library only, so it runs on the sandbox image itself.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler

from .budget import RUN, Budget, refusal, run_spent
from .front import MAX_HEAD_BYTES, HeadReader, Server
from .keyguard import WITHHELD, KeyGuard
from .ledger import DEFAULT_MAX_OUTPUT_TOKENS, Ledger, Line, request_maximum, settle
from .permits import RateGate, send_paced
from .routes import ANTHROPIC, Route, route
from .upstream import (
    MAX_REQUEST_BYTES,
    POOL_BYTES,
    POOL_WAIT_S,
    Answer,
    Pool,
    TooLarge,
    Upstream,
    forwarded_headers,
    read_chunked,
)
from .wire import Usage, read_answer

DEFAULT_PORT = 8080
READY_PATH = "/__deltarun_ready"
DISCARD_LIMIT_BYTES = 64 << 20  # read and dropped after a 413, so the client sees the answer
CLIENT_IDLE_TIMEOUT_S = 660.0
METERED = {"messages", "chat/completions", "responses"}  # endpoints that bill tokens
PARSE_LOCK = threading.Lock()  # one body read at a time: its decoding's memory is bounded
NO_MODEL = "(no model named)"  # a billed answer that names no model: no route pins it
MALFORMED = "(malformed request)"
RUN_FLAG = "run_budget"  # a refusal because the run's budget (not the trial's) is spent


class Handler(BaseHTTPRequestHandler):
    """Forwards allowed requests to the upstream; refuses everything else."""

    protocol_version = "HTTP/1.1"
    server_version = "deltarun-model-proxy"
    timeout = CLIENT_IDLE_TIMEOUT_S  # an idle client connection is closed, freeing its thread
    # Set in main().
    upstream: Upstream
    budget: Budget
    ledger: Ledger
    pool: Pool
    keyguard: KeyGuard
    max_output: int = DEFAULT_MAX_OUTPUT_TOKENS
    gate: RateGate | None = None  # the route's shared rate limits (permits.py)

    def do_GET(self) -> None:
        if self.path == READY_PATH:
            self.reply_json(200, {"ready": True})
            return
        self.forward()

    def forward(self) -> None:
        allowed = route(
            self.upstream.prefix, self.command, self.path, "anthropic-version" in self.headers
        )
        if allowed is None:
            self.drain_request()
            message = f"only {self.upstream.prefix}/... is forwarded, and only the model API's"
            self.ledger.refused(self.path, 403, "endpoint")
            self.reply_json(403, error(message + " endpoints"))
            return
        encodings = self.headers.get_all("Content-Encoding") or []
        if any(c.strip().lower() not in ("", "identity") for v in encodings for c in v.split(",")):
            # A body the gateway cannot read for its maximum (nor the key) is not forwarded.
            self.drain_request()
            self.ledger.refused(self.path, 415, "encoded")
            self.reply_json(415, error("request bodies are taken without a content encoding"))
            return
        size = self.body_size()
        if size is None:
            return
        if not self.pool.take(size):
            self.close_connection = True
            self.ledger.refused(self.path, 503, "busy")
            self.reply_json(503, error("the gateway is busy: too many requests held open"))
            return
        try:
            self.forward_allowed(allowed)
        finally:
            self.pool.give(size)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = forward

    def __getattr__(self, name: str) -> object:
        """Any other method (``post``, ``PROPFIND``, ``CONNECT``) is refused and counted
        like a wrong endpoint, not answered 501 by http.server unseen."""
        if name.startswith("do_"):
            return self.forward
        raise AttributeError(name)

    def parse_request(self) -> bool:
        """http.server's, with the request's head read to ``MAX_HEAD_BYTES`` at most, and
        ``path`` the target as sent (http.server folds a leading ``//`` into one ``/``:
        the route is decided on the bytes the agent sent, never on a rewrite of them)."""
        stream = self.rfile
        self.rfile = HeadReader(stream, MAX_HEAD_BYTES)  # type: ignore[assignment]
        try:
            parsed = super().parse_request()
        finally:
            self.rfile = stream
        words = self.requestline.split()
        if parsed and len(words) == 3:
            self.path = words[1]
        return parsed

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A request http.server refuses itself (a bad request line, version or head) is
        counted too."""
        self.ledger.refused(MALFORMED, code, "malformed")
        self.close_connection = True
        super().send_error(code, message, explain)

    def forward_allowed(self, allowed: Route) -> None:
        received, body = self.receive()
        if not received:
            return
        spent = self.budget.exhausted()
        if spent is not None:
            status, payload = refusal(allowed.api, spent)
            self.ledger.refused(allowed.target, status, "budget", budget=True)
            self.reply_json(status, payload, {"x-should-retry": "false"})
            return
        if run_spent(self.ledger.directory):
            status, payload = refusal(allowed.api, RUN)
            self.ledger.refused(
                allowed.target, status, "run_budget", budget=True, flags=(RUN_FLAG,)
            )
            self.reply_json(status, payload, {"x-should-retry": "false"})
            return
        if body and self.command == "GET":  # a listing takes no body: nothing to meter
            self.close_connection = True
            self.ledger.refused(allowed.target, 400, "bad_body")
            self.reply_json(400, error("a GET request takes no body"))
            return
        self.relay(allowed, body)

    def body_size(self) -> int | None:
        """Bytes the request's body may take (its length, or the cap when chunked);
        ``None`` when it is refused here (answered and counted)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return MAX_REQUEST_BYTES
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            self.ledger.refused(self.path, 400, "bad_body")
            self.reply_json(400, error("bad request body: bad Content-Length"))
            return None
        if length > MAX_REQUEST_BYTES:
            self.refuse_too_large()
            return None
        return length

    def refuse_too_large(self) -> None:
        # Read the rest first (up to a limit) so the client is not reset before it can read
        # the answer; the connection closes either way.
        self.discard_body(DISCARD_LIMIT_BYTES)
        self.close_connection = True
        self.ledger.refused(self.path, 413, "too_large")
        self.reply_json(413, error(f"request body over {MAX_REQUEST_BYTES} bytes"))

    def receive(self) -> tuple[bool, bytes | None]:
        """The request body (``None`` when there is none); answers and counts a bad one."""
        try:
            return True, self.read_request_body()
        except TooLarge:
            self.refuse_too_large()
        except ValueError as exc:
            self.close_connection = True
            self.ledger.refused(self.path, 400, "bad_body")
            self.reply_json(400, error(f"bad request body: {exc}"))
        return False, None

    def relay(self, allowed: Route, body: bytes | None) -> None:
        """Forward the request, count what its answer used, then send the answer on."""
        metered = allowed.endpoint in METERED
        gate = self.gate if metered and self.gate is not None and self.gate.active() else None
        if gate is not None and not gate.acquire():
            self.ledger.refused(allowed.target, 503, "rate_wait")
            self.reply_json(503, error("the route's shared rate limit held the request too long"))
            return
        with PARSE_LOCK:
            maximum = request_maximum(body, self.max_output) if metered else (0, 0)
        ident = self.ledger.begin(allowed.target, maximum)
        started = time.monotonic()
        anthropic = allowed.api == ANTHROPIC
        headers = forwarded_headers(self.headers, self.upstream, anthropic, body)

        def send() -> Answer:
            return self.upstream.exchange(self.command, allowed.target, headers, body, self.pool)

        held = False
        if gate is None:
            answer = send()
        else:
            answer, held = send_paced(gate, send, lambda spent: self.pool.give(spent.held))
        try:
            latency_ms = round((time.monotonic() - started) * 1000)
            self.settle_and_send(allowed, answer, maximum, metered, latency_ms, ident)
        finally:
            self.pool.give(answer.held)
            if held and gate is not None:
                gate.release()

    def settle_and_send(
        self,
        allowed: Route,
        answer: Answer,
        maximum: tuple[int, int],
        metered: bool,
        latency_ms: int,
        ident: int,
    ) -> None:
        """Counted and entered in the ledger before it is sent on: a client gone by now
        (timed out, or hung up on purpose) does not make what the model used vanish."""
        with PARSE_LOCK:
            usage = usage_of(answer.data, answer.content_type, self.upstream.key)
        billed = answer.sent and (answer.status == 0 or 200 <= answer.status < 300)
        usage = settle(usage, maximum, metered=metered, whole=answer.trouble is None, billed=billed)
        turn = usage.final_usage or usage.input_reported or bool(usage.tool_calls)
        whole = 200 <= answer.status < 300 and answer.trouble is None
        if metered and whole and turn and not usage.models:
            usage.models.append(NO_MODEL)  # a model turn that names no model: no lock holds
        flags = list(usage.flags) + ([answer.trouble] if answer.trouble else [])
        with PARSE_LOCK:  # a scrubbed copy of the body is held one at a time too
            data, literal, encoded = self.keyguard.scrub_body(answer.data)
            headers, in_headers = self.keyguard.scrub_headers(answer.headers)
        if literal or encoded or in_headers or usage.secret_seen:
            flags.append("key_reflected")
        status, message = answer.status, ""
        if usage.secret_seen or encoded:
            status, message = 502, WITHHELD
        elif answer.trouble is not None:
            status, message = 502, f"upstream answer {TROUBLE[answer.trouble]}"
        self.budget.spend(
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
        )
        line = Line(
            allowed.target,
            status,
            usage.model,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            latency_ms,
            list(usage.tool_calls),
            models=list(usage.models),
            flags=flags,
        )
        self.ledger.finish(ident, line)
        if message:
            self.reply_json(status, error(message))
            return
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def read_request_body(self) -> bytes | None:
        """The request body, at most ``MAX_REQUEST_BYTES``; ``None`` when there is none."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return read_chunked(self.rfile, MAX_REQUEST_BYTES)
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            return None
        length = int(length_text)  # checked by body_size
        if length > MAX_REQUEST_BYTES:
            raise TooLarge
        body = self.rfile.read(length)
        if len(body) < length:  # the client hung up part-way: nothing is forwarded
            raise ValueError("the body ended before its Content-Length")
        return body

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

    def version_string(self) -> str:
        return self.server_version  # without the Python version

    def log_message(self, format: str, *args: object) -> None:
        """Silence the default access log: it would print query strings."""


TROUBLE = {
    "unreachable": "unreachable",
    "lost": "lost before it began",
    "cut": "cut off",
    "over_cap": "over the gateway's size cap",
    "memory": "cut: the gateway's memory for answers is full",
    "encoded": "in a content encoding the gateway does not read",
    "status": "without a final status the gateway relays",
}


def usage_of(data: bytes | bytearray, content_type: str, secret: str | None) -> Usage:
    """What the answer reports (wire.read_answer); nothing but the flag ``unreadable``,
    should reading it ever fail, rather than no ledger line."""
    try:
        return read_answer(data, content_type, secret)
    except Exception as exc:  # a bug reading a hostile answer must not cost the line
        print(f"deltarun model proxy: usage unread: {type(exc).__name__}", file=sys.stderr)
        return Usage(flags=["unreadable"], secret_seen=secret is not None)


def error(message: str) -> dict[str, object]:
    """An OpenAI-shaped error body, so model clients show the message."""
    return {"error": {"message": f"deltarun model gateway: {message}", "type": "gateway_error"}}


def listen_address(env: Mapping[str, str]) -> tuple[str, int]:
    """The host and port to listen on (a port of 0: any free one)."""
    host = env.get("DELTARUN_LISTEN_HOST") or "0.0.0.0"
    port_text = env.get("DELTARUN_LISTEN_PORT") or str(DEFAULT_PORT)
    if not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"DELTARUN_LISTEN_PORT must be a port number, not {port_text!r}")
    return host, int(port_text)


def positive(env: Mapping[str, str], name: str, default: float, most: float) -> float:
    """A positive number from the environment, at most ``most``; ``default`` when unset."""
    text = env.get(name) or str(default)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= most:
        raise ValueError(f"{name} must be a positive number up to {most:g}, not {text!r}")
    return value


def pool(env: Mapping[str, str]) -> Pool:
    """The memory pool of bodies and answers; never larger than ``POOL_BYTES``, which the
    container's memory limit is sized for."""
    size = int(positive(env, "DELTARUN_POOL_BYTES", POOL_BYTES, POOL_BYTES))
    return Pool(size, positive(env, "DELTARUN_POOL_WAIT_S", POOL_WAIT_S, 3600))


def main() -> int:
    env = os.environ
    try:
        upstream = Upstream(env.get("DELTARUN_UPSTREAM", ""), env.get("DELTARUN_UPSTREAM_KEY"))
        budget = Budget.from_env(env)
        listen = listen_address(env)
        Handler.max_output = int(
            positive(env, "DELTARUN_MAX_OUTPUT_TOKENS", DEFAULT_MAX_OUTPUT_TOKENS, 10**9)
        )
        Handler.pool = pool(env)
        Handler.ledger = Ledger(env.get("DELTARUN_LEDGER") or "/ledger")
        Handler.gate = RateGate(Handler.ledger.directory, Handler.ledger.note_rate)
    except (ValueError, OSError) as exc:
        print(f"deltarun model proxy: {exc}", file=sys.stderr, flush=True)
        return 2
    Handler.upstream = upstream
    Handler.budget = budget
    Handler.keyguard = KeyGuard(upstream.key)
    ledger = Handler.ledger
    server = Server(listen, Handler, lambda: ledger.refused("(connection)", 503, "busy"))
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
