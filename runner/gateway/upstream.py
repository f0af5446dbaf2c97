"""The gateway's side of HTTP: the one upstream, one exchange with it, and the memory the
exchanges may hold between them.

Memory: the proxy holds each request body and each answer whole (it reads an answer before
sending it on), so what all of them hold together is drawn from one ``Pool`` of
``POOL_BYTES``: a request body's size before it is read, an answer's bytes as they come. A
request that cannot get room within ``POOL_WAIT_S`` is refused (503, the agent's); an answer
that cannot is cut there and counted at its maximum. With reading one answer at a time
(``proxy.PARSE_LOCK``), the proxy stays under its container's limit whatever the agent holds
open (24 bodies of 8 MiB held open once killed a proxy that had no such bound).
"""

from __future__ import annotations

import contextlib
import http.client
import re
import ssl
import threading
import time
import urllib.parse
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.message import Message
from io import BufferedIOBase
from typing import Any, cast

MAX_REQUEST_BYTES = 8 << 20
MAX_RESPONSE_BYTES = 32 << 20
POOL_BYTES = 96 << 20
POOL_WAIT_S = 30.0
CHUNK_BYTES = 1 << 20
MAX_INTERIM = 8  # interim (1xx) heads read past before an answer
UPSTREAM_TIMEOUT_S = 600.0

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
# Headers a server or a proxy in front of it may take as another method, path or host than
# the request line's (the gateway forwards one method and one canonical path), or as where
# the request came from: never forwarded.
REROUTING = {
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-url",
    "x-original-uri",
    "x-rewrite-url",
    "x-envoy-original-path",
    "x-original-method",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-forwarded-proto",
    "x-forwarded-scheme",
    "x-forwarded-server",
    "x-forwarded-path",
    "x-real-ip",
    "x-client-ip",
    "x-host",
    "forwarded",
    "via",
}
DECODERS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
SET_BY_SERVER = {"content-length", "server", "date"}  # http.server writes its own


class TooLarge(Exception):
    """A body over its cap."""


class Pool:
    """Bytes the proxy may hold for bodies and answers, shared by the handler threads."""

    def __init__(self, size: int, wait_s: float = POOL_WAIT_S) -> None:
        self.size = self.free = size
        self.wait_s = wait_s
        self._changed = threading.Condition()

    def take(self, amount: int) -> bool:
        """Reserve ``amount`` bytes, waiting up to ``wait_s`` for them; reserved?"""
        if amount > self.size:
            return False
        deadline = time.monotonic() + self.wait_s
        with self._changed:
            while self.free < amount:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            self.free -= amount
            return True

    def give(self, amount: int) -> None:
        with self._changed:
            self.free += amount
            self._changed.notify_all()


@dataclass
class Answer:
    """What came back: ``status`` 0 when no answer began; ``trouble`` names what went wrong
    (``unreachable`` before the request was sent, ``lost`` after it, ``status``: no final
    status in 200-599 came, ``cut``, ``over_cap``, ``memory``, ``encoded``); ``sent``: the
    request reached the upstream whole."""

    status: int = 0
    headers: list[tuple[str, str]] = field(default_factory=list)
    data: bytes | bytearray = b""
    trouble: str | None = None
    sent: bool = False
    held: int = 0  # bytes of the pool this answer holds

    @property
    def content_type(self) -> str:
        return next((v for k, v in self.headers if k.lower() == "content-type"), "")


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

    def key_header(self, anthropic: bool) -> tuple[str, str] | None:
        """The key as the request's API expects it, or ``None`` without a key."""
        if self.key is None:
            return None
        if anthropic:
            return "x-api-key", self.key
        return "Authorization", f"Bearer {self.key}"

    def connect(self) -> http.client.HTTPConnection:
        if self.https:
            context = ssl.create_default_context()
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=UPSTREAM_TIMEOUT_S, context=context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=UPSTREAM_TIMEOUT_S)

    def exchange(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes | None,
        pool: Pool,
    ) -> Answer:
        """One request; never raises. The answer's bytes are drawn from ``pool`` (the
        caller gives ``Answer.held`` back)."""
        answer = Answer()
        connection = self.connect()
        try:
            try:
                connection.request(method, target, body=body, headers=headers)
            except (OSError, http.client.HTTPException, ValueError):
                answer.trouble = "unreachable"
                return answer
            answer.sent = True
            try:
                response = _final(connection.getresponse(), method)
            except (OSError, http.client.HTTPException):
                answer.trouble = "lost"
                return answer
            if not 200 <= response.status <= 599:  # 101, too many 1xx heads, 600-999
                answer.trouble = "status"
                return answer
            answer.status = response.status
            ends = HOP_BY_HOP | SET_BY_SERVER | connection_tokens(response.headers)
            answer.headers = [(k, v) for k, v in response.headers.items() if k.lower() not in ends]
            _read_answer(response, answer, pool)
            _decode_answer(answer, pool)
            return answer
        finally:
            with contextlib.suppress(Exception):  # an interim head's stream is closed already
                connection.close()


def _final(response: http.client.HTTPResponse, method: str) -> http.client.HTTPResponse:
    """The answer after any interim (1xx) heads, which http.client takes for the answer
    itself (only ``100`` it skips): read on from the same buffered stream. A ``101``
    (another protocol follows) or more than ``MAX_INTERIM`` heads is returned as it is."""
    for _ in range(MAX_INTERIM):
        if not 100 <= response.status < 200 or response.status == 101:
            return response
        stream = cast(Any, response).fp
        following = http.client.HTTPResponse(cast(Any, _Stream(stream)), method=method)
        following.begin()
        response = following
    return response


class _Stream:
    """A socket whose ``makefile`` is the stream already read from (its buffer kept)."""

    def __init__(self, stream: BufferedIOBase) -> None:
        self.stream = stream

    def makefile(self, mode: str) -> BufferedIOBase:
        return self.stream


def _read_answer(response: http.client.HTTPResponse, answer: Answer, pool: Pool) -> None:
    """The answer's body, within the cap and the pool; what stopped it in ``trouble``."""
    data = bytearray()
    while True:
        if len(data) + CHUNK_BYTES > answer.held:
            if not pool.take(CHUNK_BYTES):
                answer.trouble = "memory"
                break
            answer.held += CHUNK_BYTES
        try:
            chunk = response.read(CHUNK_BYTES)
        except http.client.IncompleteRead as exc:
            data += exc.partial
            answer.trouble = "cut"
            break
        except (OSError, http.client.HTTPException):
            answer.trouble = "cut"
            break
        if not chunk:
            if response.length:  # a Content-Length the upstream did not fill
                answer.trouble = "cut"
            break
        data += chunk
        if len(data) > MAX_RESPONSE_BYTES:
            del data[MAX_RESPONSE_BYTES:]
            answer.trouble = "over_cap"
            break
    answer.data = data  # no copy: the pool holds its size once


def _decode_answer(answer: Answer, pool: Pool) -> None:
    """Undo the answer's content encodings (gzip, deflate; the gateway asks for none, but
    an upstream may send one anyway), so that it is metered, route-locked and searched for
    the key as the client will read it, and sent on as identity. The decoded bytes come
    from the pool and stop at the answer cap; an encoding the gateway cannot undo leaves
    the answer unread (``trouble``: ``encoded``)."""
    values = [v for k, v in answer.headers if k.lower() == "content-encoding"]
    codings = [c.strip().lower() for v in values for c in v.split(",")]
    codings = [c for c in codings if c not in ("", "identity")]
    answer.headers = [(k, v) for k, v in answer.headers if k.lower() != "content-encoding"]
    for coding in reversed(codings):  # the last applied is undone first
        if coding not in DECODERS:
            answer.trouble = answer.trouble or "encoded"
            return
        if not _decode_once(answer, pool, DECODERS[coding], coding == "deflate"):
            return


def _decode_once(answer: Answer, pool: Pool, wbits: int, deflate: bool) -> bool:
    """One layer of gzip or deflate undone in place; whether it decoded whole."""
    source = answer.data
    if deflate and source[:1] and (source[0] & 0x0F) != 8:
        wbits = -zlib.MAX_WBITS  # a raw deflate stream, as some servers send
    out = bytearray()
    held = 0
    decoder = zlib.decompressobj(wbits)
    pending: bytes | bytearray = source
    try:
        while True:
            if len(out) + CHUNK_BYTES > held:
                if not pool.take(CHUNK_BYTES):
                    answer.trouble = "memory"
                    break
                held += CHUNK_BYTES
            piece = decoder.decompress(pending, CHUNK_BYTES)
            out += piece
            pending = decoder.unconsumed_tail
            if len(out) > MAX_RESPONSE_BYTES:
                del out[MAX_RESPONSE_BYTES:]
                answer.trouble = "over_cap"
                break
            if decoder.eof:
                if not decoder.unused_data.strip(b"\0"):
                    break
                pending = decoder.unused_data  # another gzip member follows
                decoder = zlib.decompressobj(wbits)
            elif not pending and not piece:
                break  # the input is spent
    except zlib.error:  # not the encoding it claims
        answer.trouble = answer.trouble or "encoded"
    if answer.trouble is None and not decoder.eof:
        answer.trouble = "cut"  # the compressed stream ended before its end
    answer.data = out
    pool.give(answer.held)  # the encoded bytes are let go; the decoded ones are held
    answer.held = held
    return answer.trouble is None


def forwarded_headers(
    incoming: Message, upstream: Upstream, anthropic: bool, body: bytes | None
) -> dict[str, str]:
    """The request's end-to-end headers, without the agent's key headers, headers that
    re-route (``REROUTING``) and malformed ones, with the real key, the upstream's
    ``Host`` and an identity encoding (so the usage can be read)."""
    dropped = HOP_BY_HOP | KEY_HEADERS | SET_HERE | REROUTING | connection_tokens(incoming)
    headers = {
        k: v
        for k, v in incoming.items()
        if k.lower() not in dropped and _TOKEN.fullmatch(k) and not _CONTROL.search(v)
    }
    headers["Host"] = upstream.host_header
    headers["Accept-Encoding"] = "identity"
    key = upstream.key_header(anthropic)
    if key is not None:
        headers[key[0]] = key[1]
    if body is not None:
        headers["Content-Length"] = str(len(body))
    return headers


# A header's name as RFC 9110 allows it, and what no value may hold: a header folded over
# lines (which an upstream may unfold into a header of its own, a method override, say),
# or a name or value http.client refuses, is not forwarded.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def connection_tokens(headers: Message) -> set[str]:
    """Header names listed in ``Connection`` are hop-by-hop too."""
    values: Iterable[str] = headers.get_all("Connection") or []
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
        if size < 0:
            raise ValueError("bad chunk size")
        if size == 0:
            break
        if len(body) + size > cap:
            raise TooLarge
        chunk = read(size)
        if len(chunk) < size:
            raise ValueError("the body ended inside a chunk")
        body += chunk
        readline(1024)  # the CRLF after each chunk
    while readline(1024) not in (b"\r\n", b"\n", b""):
        pass  # trailers, ignored
    return bytes(body)
