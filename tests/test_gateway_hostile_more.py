"""More of the model gateway under a hostile agent and a hostile upstream (issue 37): the
variants tests/test_gateway_hostile.py does not try. Encoded answers, usage that shrinks
later in a stream, the key in encoded forms or split between interleaved parts, model names
absent or not text, request maxima the gateway misread, methods and request heads
http.server answers itself, headers that re-route a request upstream, and memory held by
request heads or by idle connections. The real proxy runs as a process on the host against
a scripted upstream on 127.0.0.1 speaking the real wire formats; no Docker.
"""

from __future__ import annotations

import base64
import gzip
import html
import http.client
import json
import socket
import time
import urllib.parse
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.agents.guarded import model_usage
from runner.agents.interface import AgentResult
from runner.config.arms import Route
from tests.fake_wire import SSE, Api, Usage
from tests.proxy_support import (
    APIS,
    BILLED,
    HEADERS,
    MAX_OUT,
    PATHS,
    PINNED,
    REAL_KEY,
    WAIT_S,
    Answer,
    FakeUpstream,
    RunningProxy,
    answer_of,
    ledger_of,
    proxy_environment,
    proxy_running,
    request_for,
    sse,
    totals_of,
)

pytestmark = pytest.mark.timeout(180)

ROUTE = Route(base_url="http://127.0.0.1/v1", model=PINNED)


def mismatch(env: dict[str, str]) -> bool:
    calls = [e.call() for e in ledger_of(env)]
    return model_usage(AgentResult(), calls, ROUTE).route_mismatch


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream()
    yield fake
    fake.close()


@pytest.fixture
def env(upstream: FakeUpstream) -> dict[str, str]:
    return proxy_environment(upstream.url, REAL_KEY)


@pytest.fixture
def proxy(env: dict[str, str]) -> Iterator[RunningProxy]:
    with proxy_running(env) as running:
        yield running


def raw_request(proxy: RunningProxy, data: bytes) -> bytes:
    """Bytes written to the proxy as they are; the first bytes of what comes back."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=WAIT_S) as client:
        client.sendall(data)
        client.shutdown(socket.SHUT_WR)
        out = b""
        while len(out) < 64 and (piece := client.recv(4096)):
            out += piece
        return out


# Encoded answers ------------------------------------------------------------------------------

ENCODERS = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "x-gzip": gzip.compress,
    "gzip, gzip": lambda data: gzip.compress(gzip.compress(data)),
}


@pytest.mark.parametrize("encoding", list(ENCODERS))
@pytest.mark.parametrize("api", APIS)
def test_an_encoded_answer_is_metered_locked_and_scrubbed_after_decoding(
    api: Api, encoding: str, proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    plain = answer_of(api, True, text=f"key {REAL_KEY}").replace(
        json.dumps(PINNED).encode(), b'"impostor-model"', 1
    )
    upstream.answer = Answer(
        ENCODERS[encoding](plain), SSE, headers=[("Content-Encoding", encoding)]
    )
    reply = proxy.ask(PATHS[api], request_for(api), HEADERS[api])
    assert upstream.seen[-1].header("Accept-Encoding") == "identity"
    assert "content-encoding" not in reply.headers  # sent on decoded, as identity
    assert REAL_KEY.encode() not in reply.body
    assert "key_reflected" in reply.log["flags"]
    assert (reply.log["prompt_tokens"], reply.log["completion_tokens"]) == (32_000, 900)
    assert "estimated" not in reply.log["flags"]
    assert "impostor-model" in reply.log["models"] and mismatch(env)


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, br", "bogus"])
def test_an_answer_in_an_encoding_the_gateway_cannot_read_is_withheld_and_counted_high(
    encoding: str, proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    body = b"\x1b\x00" + REAL_KEY.encode()[::-1] + b"opaque"
    upstream.answer = Answer(body, SSE, headers=[("Content-Encoding", encoding)])
    reply = proxy.ask(PATHS["chat"], request_for("chat"), HEADERS["chat"])
    assert reply.status == 502 and b"opaque" not in reply.body
    assert {"encoded", "estimated"} <= set(reply.log["flags"])
    assert reply.log["completion_tokens"] == MAX_OUT


def test_a_gzip_bomb_is_cut_at_the_cap_and_counted_high(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    bomb = gzip.compress(b" " * (40 << 20))  # 40 MiB of spaces in about 40 kB
    upstream.answer = Answer(bomb, "application/json", headers=[("Content-Encoding", "gzip")])
    reply = proxy.ask(PATHS["anthropic"], request_for("anthropic"), HEADERS["anthropic"])
    assert reply.status == 502
    assert {"over_cap", "estimated"} <= set(reply.log["flags"])
    assert reply.log["completion_tokens"] == MAX_OUT
    assert proxy.process.poll() is None and proxy.ready()


# Usage reported more than once -----------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_a_later_smaller_usage_never_lowers_the_count(
    api: Api, proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """A stream that reports its real usage, then (a second message, a repeated closing
    event) a smaller one: the larger of each count is kept."""
    stream = answer_of(api, True, BILLED) + answer_of(api, True, Usage(3, 1))
    upstream.answer = Answer(stream, SSE)
    reply = proxy.ask(PATHS[api], request_for(api), HEADERS[api])
    assert (reply.log["prompt_tokens"], reply.log["completion_tokens"]) == (32_000, 900)


def test_anthropic_input_reported_at_the_start_is_not_zeroed_by_the_closing_usage(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    stream = answer_of("anthropic", True, BILLED).replace(
        b'"usage": {"output_tokens": 900}',
        b'"usage": {"input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 900}',
    )
    upstream.answer = Answer(stream, SSE)
    reply = proxy.ask(PATHS["anthropic"], request_for("anthropic"), HEADERS["anthropic"])
    assert (reply.log["prompt_tokens"], reply.log["completion_tokens"]) == (32_000, 900)


# Model names -------------------------------------------------------------------------------------


def without_model(api: Api, streamed: bool, replacement: bytes | None) -> bytes:
    """An answer whose every ``"model"`` key is dropped (``None``) or given another value."""
    document = answer_of(api, streamed).decode()
    pinned = f'"model": {json.dumps(PINNED)}'
    if replacement is None:
        return document.replace(pinned + ", ", "").encode()
    return document.replace(pinned, '"model": ' + replacement.decode()).encode()


@pytest.mark.parametrize("value", [None, b'["impostor-model"]', b'{"id": "impostor"}', b"null"])
@pytest.mark.parametrize("streamed", [True, False], ids=["sse", "json"])
@pytest.mark.parametrize("api", APIS)
def test_an_answer_that_names_no_model_breaks_the_route_lock(
    api: Api,
    streamed: bool,
    value: bytes | None,
    proxy: RunningProxy,
    upstream: FakeUpstream,
    env: dict[str, str],
) -> None:
    body = without_model(api, streamed, value)
    assert PINNED.encode() not in body
    upstream.answer = Answer(body, SSE if streamed else "application/json")
    reply = proxy.ask(PATHS[api], request_for(api), HEADERS[api])
    assert reply.status == 200 and (reply.log["prompt_tokens"] == 32_000)
    assert mismatch(env), reply.log


@pytest.mark.parametrize(
    "name", [PINNED.upper(), f" {PINNED}", f"{PINNED}\n", PINNED + "x" * 300, f"{PINNED}\u200b"]
)
def test_near_misses_of_the_pinned_name_break_the_route_lock(
    name: str, proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    body = answer_of("chat", True).replace(json.dumps(PINNED).encode(), json.dumps(name).encode())
    upstream.answer = Answer(body, SSE)
    proxy.ask(PATHS["chat"], request_for("chat"), HEADERS["chat"])
    assert mismatch(env)


# The key, in other forms ------------------------------------------------------------------------


def key_forms() -> dict[str, str]:
    bearer = f"Bearer {REAL_KEY}"
    return {
        "url-encoded": urllib.parse.quote(REAL_KEY, safe=""),
        "url-encoded-all": "".join(f"%{b:02X}" for b in REAL_KEY.encode()),
        "base64": base64.b64encode(REAL_KEY.encode()).decode(),
        "base64-bearer": base64.b64encode(bearer.encode()).decode(),
        "base64-offset": base64.b64encode(b"xx:" + REAL_KEY.encode()).decode(),
        "base64url-offset": base64.urlsafe_b64encode(b"x" + REAL_KEY.encode()).decode(),
        "hex": REAL_KEY.encode().hex(),
        "html-entities": "".join(f"&#{ord(c)};" for c in REAL_KEY),
        "html-hex": html.escape(REAL_KEY).replace("s", "&#x73;"),
        "mixed-escapes": REAL_KEY.replace("s", "%73").replace("r", "\\u0072"),
    }


@pytest.mark.parametrize("form", list(key_forms()))
@pytest.mark.parametrize("where", ["body", "header", "error-page"])
def test_the_key_in_an_encoded_form_never_comes_back(
    form: str, where: str, proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    text = key_forms()[form]
    plain = answer_of("responses", False)
    if where == "body":
        upstream.answer = Answer(plain.replace(b"Done.", text.encode()))
    elif where == "header":
        upstream.answer = Answer(plain, headers=[("Location", f"https://x/?k={text}")])
    else:
        upstream.answer = Answer(f"<html>{text}</html>".encode(), "text/html", 500)
    reply = proxy.ask(PATHS["responses"], request_for("responses"), HEADERS["responses"])
    assert text not in reply.body.decode("utf-8", "replace")
    assert text not in json.dumps(reply.headers)
    assert "key_reflected" in reply.log["flags"]


def test_the_key_escaped_in_an_answer_too_big_to_decode_never_comes_back(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    escaped = json.dumps(REAL_KEY).replace("s", "\\u0073")[1:-1]
    document = json.loads(answer_of("chat", False))
    document["padding"] = "p" * (5 << 20)  # past the size decoded whole: only scanned
    body = json.dumps(document).replace("Done.", escaped).encode()
    upstream.answer = Answer(body)
    reply = proxy.ask(PATHS["chat"], request_for("chat"), HEADERS["chat"])
    assert escaped.encode() not in reply.body and "key_reflected" in reply.log["flags"]


@pytest.mark.parametrize("api", APIS)
def test_the_key_split_between_interleaved_parts_never_comes_back(
    api: Api, proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """Two parts streamed at once (content blocks, choices, output items), the key's halves
    in one of them with a delta of the other between: a client joins each part's deltas."""
    half = len(REAL_KEY) // 2
    first, second = REAL_KEY[:half], REAL_KEY[half:]

    def delta(part: int, text: str) -> tuple[str | None, Any]:
        if api == "anthropic":
            body = {"type": "content_block_delta", "index": part}
            return "content_block_delta", {**body, "delta": {"type": "text_delta", "text": text}}
        if api == "chat":
            choice = {"index": part, "delta": {"content": text}, "finish_reason": None}
            return None, {"id": "c", "model": PINNED, "choices": [choice]}
        event = "response.output_text.delta"
        where = {"output_index": part, "item_id": f"msg_{part}", "content_index": 0}
        return event, {"type": event, **where, "delta": text}

    events = sse(delta(0, first), delta(1, "other"), delta(0, second))
    whole = answer_of(api, True)
    upstream.answer = Answer(events + whole, SSE)
    reply = proxy.ask(PATHS[api], request_for(api), HEADERS[api])
    assert first.encode() not in reply.body or second.encode() not in reply.body
    assert "key_reflected" in reply.log["flags"]


# The request's maximum --------------------------------------------------------------------------


def cut_answer(api: Api) -> Answer:
    first = answer_of(api, True, Usage(0, 0)).split(b"\n\n")[0] + b"\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 99999\r\n\r\n"
    return Answer(raw=head + first.replace(b'"input_tokens": 0', b'"input_tokens": 10'))


@pytest.mark.parametrize(
    ("api", "body", "expected"),
    [
        ("anthropic", b'{"model": "m", "max\\u005ftokens": 60000, "messages": []}', 60_000),
        ("anthropic", b'{"model": "m", "max_tokens": 6e4, "messages": []}', 60_000),
        ("anthropic", b'{"model": "m", "max_tokens": 60000.0, "messages": []}', 60_000),
        ("chat", b'{"model": "m", "max_tokens": 1000, "n": 3, "messages": []}', 3_000),
        ("chat", b'{"model": "m", "max_completion_tokens": 900, "n": 2, "messages": []}', 1_800),
        ("responses", b'{"model": "m", "max_output_tokens": 5e4, "input": "x"}', 50_000),
    ],
)
def test_a_request_maximum_is_read_as_the_upstream_reads_it(
    api: Api, body: bytes, expected: int, proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    upstream.answer = cut_answer(api)
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=WAIT_S)
    try:
        headers = {"Content-Type": "application/json", **HEADERS[api]}
        connection.request("POST", PATHS[api], body=body, headers=headers)
        connection.getresponse().read()
    finally:
        connection.close()
    line = json.loads(proxy.lines.get(timeout=WAIT_S))
    assert "estimated" in line["flags"]
    assert line["completion_tokens"] >= expected


# Requests http.server would answer itself -------------------------------------------------------


@pytest.mark.parametrize("method", ["post", "PROPFIND", "TRACE", "CONNECT", "M-SEARCH"])
def test_every_method_is_refused_and_counted(
    method: str, proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    head = f"{method} /v1/messages HTTP/1.1\r\nHost: g\r\nContent-Length: 2\r\n\r\n{{}}"
    out = raw_request(proxy, head.encode())
    assert out[9:12] == b"403", out
    assert upstream.seen == []
    assert totals_of(env)["refused"] == {"endpoint": 1}


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v1/messages HTTP/9.9\r\nHost: g\r\n\r\n",
        b"POST /v1/messages\r\n\r\n",
        b"POST /v1/messages HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n",
        b"POST /v1/messages HTTP/1.1\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64 + b"\r\n\r\n",
    ],
    ids=["version", "http-0.9", "many-headers", "long-header", "tls-hello"],
)
def test_a_malformed_request_is_refused_and_counted(
    head: bytes, proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    raw_request(proxy, head)
    deadline = time.monotonic() + WAIT_S
    while not totals_of(env)["refused"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sum(totals_of(env)["refused"].values()) == 1
    assert upstream.seen == []


def test_a_request_whose_headers_together_are_too_big_is_refused(
    proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    headers = b"".join(b"X-H%d: %s\r\n" % (i, b"a" * 40_000) for i in range(2))
    out = raw_request(proxy, b"POST /v1/messages HTTP/1.1\r\nHost: g\r\n" + headers + b"\r\n")
    assert out[9:12] == b"431", out
    assert upstream.seen == [] and sum(totals_of(env)["refused"].values()) == 1


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))


def threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads")))


def test_request_heads_held_open_cannot_starve_the_gateway(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """Connections that each send megabytes of headers and never end them: each is cut
    at the head's cap, so what they hold together stays small."""
    before = rss_kib(proxy.process.pid)
    held = []
    line = b"X-Pad: " + b"a" * 60_000 + b"\r\n"
    for _ in range(40):
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=WAIT_S)
        client.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: g\r\n")
        try:
            for _ in range(99):
                client.sendall(line)
        except OSError:
            pass  # the proxy refused the head and closed
        held.append(client)
    time.sleep(1.0)
    grown = rss_kib(proxy.process.pid) - before
    for client in held:
        client.close()
    assert grown < 64 << 10, f"the proxy grew by {grown} KiB"
    upstream.answer = Answer(answer_of("anthropic", False))
    reply = proxy.ask(PATHS["anthropic"], request_for("anthropic"), HEADERS["anthropic"])
    assert reply.status == 200


def test_idle_connections_cannot_take_every_thread(
    proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    """The gateway's container has 64 pids: connections past a bound are refused at once
    (503, counted), never each a thread, and room comes back when they close."""
    held = [socket.create_connection(("127.0.0.1", proxy.port)) for _ in range(150)]
    time.sleep(1.0)
    assert threads(proxy.process.pid) <= 60
    assert totals_of(env)["refused"].get("busy", 0) >= 150 - 60
    for client in held:
        client.close()
    time.sleep(1.0)
    upstream.answer = Answer(answer_of("chat", False))
    assert proxy.ask(PATHS["chat"], request_for("chat"), HEADERS["chat"]).status == 200


# Request headers ---------------------------------------------------------------------------------

REROUTING = {
    "X-HTTP-Method-Override": "GET",
    "X-HTTP-Method": "DELETE",
    "X-Method-Override": "PUT",
    "X-Original-URL": "/v1/messages/batches",
    "X-Rewrite-URL": "/v1/files",
    "X-Original-URI": "/v1/files",
    "X-Forwarded-Prefix": "/admin",
    "X-Forwarded-Host": "internal",
    "X-Forwarded-For": "10.0.0.1",
    "X-Forwarded-Proto": "https",
    "X-Real-IP": "10.0.0.1",
    "Forwarded": "for=10.0.0.1;host=internal",
    "X-Envoy-Original-Path": "/v1/files",
}


def test_headers_that_reroute_a_request_upstream_are_dropped(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    upstream.answer = Answer(answer_of("anthropic", False))
    reply = proxy.ask(
        PATHS["anthropic"],
        request_for("anthropic"),
        {**HEADERS["anthropic"], **REROUTING, "anthropic-beta": "x"},
    )
    assert reply.status == 200
    seen = {name.lower() for name, _ in upstream.seen[-1].headers}
    assert not seen & {name.lower() for name in REROUTING}
    assert "anthropic-beta" in seen  # what the CLIs need still goes


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "identity, gzip"])
def test_a_request_body_in_an_encoding_is_refused_and_counted(
    encoding: str, proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    body = gzip.compress(json.dumps(request_for("chat", max_tokens=90_000)).encode())
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=WAIT_S)
    try:
        headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
        connection.request("POST", PATHS["chat"], body=body, headers=headers)
        status = connection.getresponse().status
    finally:
        connection.close()
    assert status == 415 and upstream.seen == []
    assert sum(totals_of(env)["refused"].values()) == 1


# Statuses and usage the upstream leaves out --------------------------------------------------------


@pytest.mark.parametrize("interim", [b"103 Early Hints", b"102 Processing", b"101 Switching"])
@pytest.mark.parametrize("api", APIS)
def test_an_interim_status_before_the_answer_counts_the_answer(
    api: Api, interim: bytes, proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """A 1xx head, then the real (billed) answer: the gateway never takes the 1xx for the
    answer and counts nothing (a 101 switches protocols: counted at the maximum)."""
    body = answer_of(api, True)
    final = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
    head = b"HTTP/1.1 " + interim + b"\r\nLink: </x>; rel=preload\r\n\r\n"
    upstream.answer = Answer(raw=head + final % len(body) + body)
    reply = proxy.ask(PATHS[api], request_for(api), HEADERS[api])
    log = reply.log
    if interim.startswith(b"101"):  # another protocol: nothing more is read, all estimated
        assert reply.status == 502 and "estimated" in log["flags"]
        assert log["completion_tokens"] == MAX_OUT
    else:
        assert log["prompt_tokens"] >= 32_000 and log["completion_tokens"] >= 900, log


@pytest.mark.parametrize("api", APIS)
def test_an_answer_that_reports_no_input_counts_the_requests(
    api: Api, proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """The closing usage names the output alone (no message_start, no input count): the
    input is counted at the request's maximum, flagged."""
    if api == "anthropic":
        events = [e for e in answer_of(api, True).split(b"\n\n") if b"message_start" not in e and e]
        body = b"\n\n".join(events) + b"\n\n"
    else:
        usage = b'"input_tokens": 32000' if api == "responses" else b'"prompt_tokens": 32000'
        body = answer_of(api, True).replace(usage + b", ", b"")
    assert b"32000" not in body
    upstream.answer = Answer(body, SSE)
    request = request_for(api)
    reply = proxy.ask(PATHS[api], request, HEADERS[api])
    assert reply.log["prompt_tokens"] >= len(json.dumps(request))
    assert "estimated" in reply.log["flags"]


def test_a_model_listing_with_a_body_is_not_forwarded(
    proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    upstream.answer = Answer(b'{"data": []}')
    body = json.dumps(request_for("chat")).encode()
    head = b"GET /v1/models HTTP/1.1\r\nHost: g\r\nContent-Length: %d\r\n\r\n" % len(body)
    out = raw_request(proxy, head + body)
    assert out[9:12] == b"400" and upstream.seen == []
    assert sum(totals_of(env)["refused"].values()) == 1


# Keys given twice, keys in another case ------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_a_model_or_usage_given_twice_is_read_both_ways(
    api: Api, proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    """``{"model": "impostor", "model": "pinned"}``: Python keeps the last, a client's
    parser may keep the first; so with ``usage``."""
    document = answer_of(api, False).decode()
    pinned = f'"model": {json.dumps(PINNED)}'
    document = document.replace(pinned, f'"model": "impostor-model", {pinned}', 1)
    big = '"usage": {"input_tokens": 90000, "output_tokens": 9000}, "usage": '
    document = document.replace('"usage": ', big, 1)
    upstream.answer = Answer(document.encode())
    reply = proxy.ask(PATHS[api], request_for(api), HEADERS[api])
    assert "impostor-model" in reply.log["models"] and mismatch(env)
    assert reply.log["prompt_tokens"] >= 90_000 and reply.log["completion_tokens"] >= 9000


@pytest.mark.parametrize(
    "where",
    ["header-name-title", "header-value-upper", "body-upper"],
)
def test_the_key_in_another_case_never_comes_back(
    where: str, proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """Go title-cases a reflected header's name; a message may upper-case it."""
    plain = answer_of("chat", False)
    title = "-".join(part.capitalize() for part in REAL_KEY.split("-"))
    if where == "header-name-title":
        upstream.answer = Answer(plain, headers=[(title, "1")])
        text = title
    elif where == "header-value-upper":
        upstream.answer = Answer(plain, headers=[("X-Debug", f"KEY={REAL_KEY.upper()}")])
        text = REAL_KEY.upper()
    else:
        upstream.answer = Answer(plain.replace(b"Done.", REAL_KEY.upper().encode()))
        text = REAL_KEY.upper()
    reply = proxy.ask(PATHS["chat"], request_for("chat"), HEADERS["chat"])
    assert text.lower() not in (reply.body.decode() + json.dumps(reply.headers)).lower()
    assert "key_reflected" in reply.log["flags"]


# What already held ---------------------------------------------------------------------------------

MORE_REFUSED = [
    "/v1/messages.",
    "/v1/messages%2e",
    "/v1/messages/",
    "/v1/MESSAGES",
    "/V1/messages",
    "/v1/messages%E3%80%82",  # an ideographic full stop
    "/v1/%C0%AEmessages",  # an overlong UTF-8 dot
    "/v1/messages%23x",
    "/v1/messages#x",
    "/v1/messages%09",
    "/v1/messages%20",
    "/v1/messages?%00",
    "/v1/messages?x=%0d%0aHost:evil",
    "/v1/messages;a=b",
    "/v1/%6d%65%73%73%61%67%65%73/batches",
    "/v1/./chat/completions",
    "/v1/chat//completions",
    "//v1/messages",
    "/v1/v1/v1/messages",
    "*",
]


def test_more_path_variants_are_refused(
    proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    for target in MORE_REFUSED:
        head = f"POST {target} HTTP/1.1\r\nHost: g\r\nContent-Length: 2\r\n\r\n{{}}"
        out = raw_request(proxy, head.encode())
        assert out[9:12] in (b"400", b"403"), (target, out)
    assert upstream.seen == []
    assert sum(totals_of(env)["refused"].values()) == len(MORE_REFUSED)


def test_a_chunked_body_with_a_content_length_is_forwarded_as_decoded(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    upstream.answer = Answer(answer_of("chat", False))
    body = json.dumps(request_for("chat")).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:7], body[7:])) + b"0\r\n\r\n"
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 3\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    out = raw_request(proxy, head + chunks)
    assert out[9:12] == b"200", out
    seen = upstream.seen[-1]
    assert seen.body == body and seen.header("Content-Length") == str(len(body))
    assert seen.header("Transfer-Encoding") is None


def test_a_folded_header_neither_crashes_the_request_nor_reaches_the_upstream(
    proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    upstream.answer = Answer(answer_of("chat", False))
    body = json.dumps(request_for("chat")).encode()
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nX-Folded: a\r\n b\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    out = raw_request(proxy, head + body)
    assert out[9:12] == b"200", out
    assert upstream.seen[-1].header("X-Folded") is None
    assert totals_of(env)["forwarded"] == 1 and totals_of(env)["pending"] == []


def test_a_websocket_upgrade_is_not_tunnelled(
    proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    head = (
        b"GET /v1/responses HTTP/1.1\r\nHost: g\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    assert raw_request(proxy, head)[9:12] == b"403"
    assert upstream.seen == []


def test_the_key_split_between_deltas_a_client_joins_by_one_mark_never_comes_back(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    """The OpenAI client joins output text by ``output_index``: halves under one index
    but two item ids, another item's delta between them."""
    half = len(REAL_KEY) // 2
    event = "response.output_text.delta"

    def delta(index: int, item: str, text: str) -> tuple[str | None, Any]:
        where = {"output_index": index, "item_id": item, "content_index": 0}
        return event, {"type": event, **where, "delta": text}

    events = sse(delta(0, "a", REAL_KEY[:half]), delta(1, "c", "x"), delta(0, "b", REAL_KEY[half:]))
    upstream.answer = Answer(events + answer_of("responses", True), SSE)
    reply = proxy.ask(PATHS["responses"], request_for("responses"), HEADERS["responses"])
    assert "key_reflected" in reply.log["flags"] and reply.status == 502


def test_the_key_split_at_the_end_of_an_event_too_big_to_decode_never_comes_back(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    half = len(REAL_KEY) // 2

    def chunk(text: str) -> tuple[str | None, Any]:
        return None, {"model": PINNED, "choices": [{"index": 0, "delta": {"content": text}}]}

    padded = "z" * (5 << 20) + REAL_KEY[:half]  # past the size decoded whole: only scanned
    events = sse(chunk(padded), chunk(REAL_KEY[half:]))
    upstream.answer = Answer(events + answer_of("chat", True), SSE)
    reply = proxy.ask(PATHS["chat"], request_for("chat"), HEADERS["chat"])
    assert "key_reflected" in reply.log["flags"] and reply.status == 502


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16", "utf-32-be"])
def test_the_key_in_a_wide_text_encoding_never_comes_back(
    codec: str, proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    text = answer_of("chat", True, text=f"key {REAL_KEY}").decode()
    upstream.answer = Answer(text.encode(codec), f"{SSE}; charset={codec}")
    reply = proxy.ask(PATHS["chat"], request_for("chat"), HEADERS["chat"])
    assert REAL_KEY not in reply.body.decode(codec, "replace")
    assert "key_reflected" in reply.log["flags"]


@pytest.mark.parametrize(
    "answer",
    [
        Answer(b""),
        Answer(sse(("error", {"type": "error", "error": {"type": "overloaded_error"}})), SSE),
        Answer(
            raw=b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 9\r\n\r\n"
        ),
    ],
    ids=["empty", "error-event", "cut"],
)
def test_an_answer_with_no_model_turn_is_counted_high_not_a_mismatch(
    answer: Answer, proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    """An empty answer, an error event, a stream cut before its first event: counted at
    the maximum, and no route mismatch (a network fault is not another model)."""
    upstream.answer = answer
    reply = proxy.ask(PATHS["anthropic"], request_for("anthropic"), HEADERS["anthropic"])
    assert "estimated" in reply.log["flags"] and reply.log["completion_tokens"] == MAX_OUT
    assert not mismatch(env)
