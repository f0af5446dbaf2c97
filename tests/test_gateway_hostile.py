"""The model gateway under a hostile agent and a hostile upstream (issue 37), for Anthropic
Messages, Chat Completions and Responses alike: every billed token counted, every model
name held to the route lock, only the APIs' own endpoints forwarded, the key never sent
back. The real proxy (runner/gateway) runs as a process on the host against a scripted
upstream on 127.0.0.1 that speaks the real wire formats (tests/fake_wire.py) and misbehaves
on purpose; its ledger is read with the harness's own reader. No Docker.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from runner.agents.guarded import model_usage
from runner.agents.interface import AgentResult
from runner.config.arms import Route
from runner.gateway.wire import read_answer
from runner.sandbox.gateway_container import GatewaySpec
from tests.fake_wire import SSE, Api, Usage
from tests.proxy_support import (
    APIS,
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
    totals_of,
)

pytestmark = pytest.mark.timeout(180)


def request_bytes(api: Api) -> int:
    return len(json.dumps(request_for(api)).encode())


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


def send(proxy: RunningProxy, method: str, target: str, body: bytes = b"") -> int:
    """One raw request (the target as written, never normalised by a client); its status."""
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=WAIT_S)
    try:
        connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", "model-gateway")
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


# Tokens billed but not counted ---------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_a_flood_of_refused_requests_cannot_push_a_billed_exchange_out(
    api: Api, proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    upstream.answer = Answer(answer_of(api, True), SSE)
    assert proxy.ask(PATHS[api], request_for(api), HEADERS[api]).status == 200
    long_path = "/v1/" + "x" * 60_000
    for _ in range(120):
        assert send(proxy, "POST", long_path, b"{}") == 403
    assert len(upstream.seen) == 1
    exchanges = ledger_of(env)
    billed = [e for e in exchanges if e.status == 200]
    assert [(e.prompt_tokens, e.completion_tokens) for e in billed] == [(32_000, 900)]
    assert sum(e.prompt_tokens for e in exchanges) == 32_000
    assert billed[0].models == (PINNED,)
    totals = totals_of(env)
    assert totals["refused"] == {"endpoint": 120} and totals["prompt_tokens"] == 32_000
    # Refused requests are counted on a bounded line each, never their 60 kB path.
    lines = (proxy.stdout[-1], *(e.path for e in exchanges))
    assert max(len(text) for text in lines) < 1024


@pytest.mark.parametrize("api", APIS)
def test_the_ledger_holds_an_answer_before_the_agent_gets_it(
    api: Api, proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    upstream.answer = Answer(answer_of(api, False, Usage(700, 70)))
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=WAIT_S)
    body = json.dumps(request_for(api))
    connection.request("POST", PATHS[api], body=body, headers=HEADERS[api])
    response = connection.getresponse()
    totals = totals_of(env)  # read the moment the answer's status line arrived
    response.read()
    connection.close()
    assert response.status == 200
    assert (totals["prompt_tokens"], totals["completion_tokens"], totals["pending"]) == (
        700,
        70,
        [],
    )


@pytest.mark.parametrize("api", APIS)
def test_an_answer_in_flight_when_the_gateway_dies_counts_at_its_maximum(
    api: Api, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    upstream.answer = Answer(answer_of(api, True), SSE, delay_s=WAIT_S)
    with proxy_running(env) as proxy:
        body = json.dumps(request_for(api)).encode()

        def ask() -> None:
            try:
                proxy.ask(PATHS[api], request_for(api), HEADERS[api])
            except Exception:
                pass  # the proxy is killed under it

        threading.Thread(target=ask, daemon=True).start()
        deadline = time.monotonic() + WAIT_S
        while not upstream.seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert upstream.seen, "the request never reached the upstream"
        os.kill(proxy.process.pid, signal.SIGKILL)  # the 128 MiB limit, say
        proxy.process.wait(timeout=WAIT_S)
    lost = [e for e in ledger_of(env) if "lost" in e.flags]
    assert [(e.path, e.prompt_tokens, e.completion_tokens) for e in lost] == [
        (PATHS[api], len(body), MAX_OUT)
    ]


# Endpoints and encoded paths ------------------------------------------------------------------

REFUSED = [
    ("POST", "/v1/messages/batches"),  # 20 of these once billed 160,240 tokens unmetered
    ("GET", "/v1/messages/batches/msgbatch_1/results"),
    ("POST", "/v1/files"),
    ("POST", "/v1/embeddings"),
    ("GET", "/v1/responses/resp_1"),
    ("POST", "/v1/chat/completions/c1/messages"),
    ("DELETE", "/v1/responses"),
    ("GET", "/v1/messages"),
    ("POST", "/v1/%252e%252e/admin"),
    ("POST", "/v1/messages/%252e%252e/batches"),
    ("POST", "/v1/..%5cadmin"),
    ("POST", "/v1/..\\admin"),
    ("POST", "/v1/..;/admin"),
    ("POST", "/v1/messages;/batches"),
    ("POST", "/v1/chat/completions;x=1"),
    ("POST", "/v1/%2e%2e/v1/messages"),
    ("POST", "/v1/./messages"),
    ("POST", "/v1//messages"),
    ("POST", "/v1/messages%00"),
    ("POST", "/v1/messages%ff"),
    ("POST", "/v1/%25252525252e%25252525252e/x"),  # still changing after four decodings
    ("POST", "/v1/responses?x=%2e%2e"),
    ("POST", "http://127.0.0.1:1/v1/messages"),
]


def test_only_each_apis_endpoints_are_forwarded(
    proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    upstream.answer = Answer(answer_of("chat", False))
    for method, target in REFUSED:
        assert send(proxy, method, target, b"{}") == 403, target
    assert upstream.seen == []
    assert totals_of(env)["refused"] == {"endpoint": len(REFUSED)}
    # An encoding that decodes to an endpoint is forwarded as that endpoint, decoded.
    for target, forwarded in (
        ("/v1/chat%2Fcompletions", "/v1/chat/completions"),
        ("/v1/%72esponses?beta=true", "/v1/responses?beta=true"),
        ("/v1/messages/count%5Ftokens", "/v1/messages/count_tokens"),
    ):
        assert send(proxy, "POST", target, b"{}") == 200
        assert upstream.seen[-1].path == forwarded
    # Every answer forwarded is metered: the three endpoints that bill each counted.
    assert totals_of(env)["forwarded"] == 3


# Answers the gateway cannot read --------------------------------------------------------------


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("shape", ["over-cap", "deep", "cut"])
def test_answers_not_read_whole_count_at_least_their_maximum(
    api: Api, shape: str, proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    streamed = answer_of(api, True, Usage(5_000, 40))
    if shape == "over-cap":  # the usage events first, then more than the 32 MiB cap
        body = streamed + b": " + b"p" * (33 << 20) + b"\n\n"
        upstream.answer = Answer(body, SSE)
    elif shape == "deep":  # a JSON answer nested 3,000 deep around its real usage
        document = json.loads(answer_of(api, False, Usage(5_000, 40)))
        body = json.dumps({**document, "x": json.loads(_deep(900))}).encode()
        body = body[:-1] + b', "y": ' + _deep(3000) + b"}"
        upstream.answer = Answer(body)
    else:  # the stream stops after its first event (Anthropic's: the input side only)
        first = streamed.split(b"\n\n")[0] + b"\n\n"
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 99999\r\n\r\n"
        )
        upstream.answer = Answer(raw=head + first)
    reply = proxy.ask(PATHS[api], request_for(api), HEADERS[api])
    line = ledger_of(env)[0]
    assert "estimated" in line.flags, (reply.status, line)
    assert line.completion_tokens == MAX_OUT
    assert line.prompt_tokens >= min(5_000, request_bytes(api))
    assert totals_of(env)["completion_tokens"] == MAX_OUT
    assert proxy.process.poll() is None and proxy.ready()


def test_no_agent_can_starve_the_gateways_memory(upstream: FakeUpstream) -> None:
    """Bodies held open take room from one bounded pool: an answer that cannot get room is
    cut there and counted at its maximum, the proxy lives on, and room comes back."""
    env = proxy_environment(
        upstream.url, REAL_KEY, DELTARUN_POOL_BYTES=str(12 << 20), DELTARUN_POOL_WAIT_S="1"
    )
    big = answer_of("anthropic", True, Usage(25_000, 400))
    upstream.answer = Answer(big + b": " + b"p" * (6 << 20) + b"\n\n", SSE)
    with proxy_running(env) as proxy:
        held = socket.create_connection(("127.0.0.1", proxy.port))
        head = f"POST /v1/messages HTTP/1.1\r\nHost: g\r\nContent-Length: {8 << 20}\r\n\r\n"
        held.sendall(head.encode() + b"{")  # 8 MiB promised, one byte sent: held open
        time.sleep(0.5)
        reply = proxy.ask("/v1/messages", request_for("anthropic"), HEADERS["anthropic"])
        assert reply.status == 502 and "memory" in reply.json()["error"]["message"]
        assert {"memory", "estimated"} <= set(reply.log["flags"])
        assert (reply.log["prompt_tokens"], reply.log["completion_tokens"]) == (25_000, MAX_OUT)
        held.close()
        time.sleep(0.5)
        upstream.answer = Answer(answer_of("anthropic", False, Usage(10, 1)))
        again = proxy.ask("/v1/messages", request_for("anthropic"), HEADERS["anthropic"])
        assert again.status == 200 and proxy.process.poll() is None


# The route lock -------------------------------------------------------------------------------


def mixed_models(api: Api, streamed: bool) -> bytes:
    """An answer whose first naming of the model is another model, and whose later
    events (or fields) name the pinned one."""
    answer = answer_of(api, streamed).decode()
    pinned = json.dumps(PINNED)
    if api == "anthropic" and streamed:
        answer = answer.replace(
            '"type": "message_delta", ', f'"type": "message_delta", "model": {pinned}, '
        )
    elif api == "anthropic":
        answer = answer.replace(
            '"stop_reason"', f'"metadata": {{"model": {pinned}}}, "stop_reason"'
        )
    elif not streamed:
        answer = answer.replace(
            '"usage"', f'"choices_model": 1, "meta": {{"model": {pinned}}}, "usage"'
        )
    return answer.replace(pinned, json.dumps("impostor-model"), 1).encode()


@pytest.mark.parametrize("streamed", [True, False], ids=["sse", "json"])
@pytest.mark.parametrize("api", APIS)
def test_every_model_name_of_an_answer_is_held_to_the_route_lock(
    api: Api, streamed: bool, proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    upstream.answer = Answer(mixed_models(api, streamed), SSE if streamed else "application/json")
    assert proxy.ask(PATHS[api], request_for(api), HEADERS[api]).status == 200
    calls = [e.call() for e in ledger_of(env)]
    assert {"impostor-model", PINNED} <= {m for c in calls for m in c.models}
    route = Route(base_url="http://127.0.0.1/v1", model=PINNED)
    judged = model_usage(AgentResult(), calls, route)
    assert judged.route_mismatch and "impostor-model" in (judged.error or "")
    # An answer naming only the pinned model (and an accepted alias) holds.
    upstream.answer = Answer(answer_of(api, streamed), SSE if streamed else "application/json")
    proxy.ask(PATHS[api], request_for(api), HEADERS[api])
    honest = [e.call() for e in ledger_of(env)][-1:]
    assert not model_usage(AgentResult(), honest, route).route_mismatch


# The key --------------------------------------------------------------------------------------


def split_key_stream(api: Api) -> bytes:
    """A streamed answer whose text carries the key split over two deltas."""
    half = len(REAL_KEY) // 2
    whole = answer_of(api, True, Usage(300, 30)).decode()
    marker = json.dumps("Done.")[1:-1]
    first = whole.replace(marker, "key: " + REAL_KEY[:half], 1)
    # The fake renders the text as one delta: a second delta carries the rest.
    events = first.split("\n\n")
    index = next(i for i, e in enumerate(events) if REAL_KEY[:half] in e and "delta" in e)
    events.insert(index + 1, events[index].replace("key: " + REAL_KEY[:half], REAL_KEY[half:]))
    return "\n\n".join(events).encode()


def reflections(api: Api) -> list[tuple[str, Answer]]:
    escaped = json.dumps(REAL_KEY).replace("s", "\\u0073")[1:-1]
    plain = answer_of(api, False, Usage(300, 30)).decode()
    return [
        ("header", Answer(plain.encode(), headers=[("X-Echo", f"Bearer {REAL_KEY}")])),
        ("json-body", Answer(plain.replace("Done.", f"your key is {REAL_KEY}").encode())),
        ("escaped", Answer(plain.replace("Done.", f"key {escaped}").encode())),
        ("split-deltas", Answer(split_key_stream(api), SSE)),
        (
            "error-page",
            Answer(f"<html>x-api-key: {REAL_KEY}</html>".encode(), "text/html", 500),
        ),
        (
            "split-chunks",
            Answer(
                raw=b"HTTP/1.1 500 Oops\r\nContent-Type: text/plain\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + b"".join(
                    b"%x\r\n%s\r\n" % (len(part), part)
                    for part in (b"key=" + REAL_KEY[:4].encode(), REAL_KEY[4:].encode())
                )
                + b"0\r\n\r\n"
            ),
        ),
    ]


@pytest.mark.parametrize("api", APIS)
def test_the_key_never_comes_back_toward_the_sandbox(
    api: Api, proxy: RunningProxy, upstream: FakeUpstream, env: dict[str, str]
) -> None:
    for name, answer in reflections(api):
        upstream.answer = answer
        reply = proxy.ask(PATHS[api], request_for(api), HEADERS[api])
        assert REAL_KEY not in reply.body.decode("utf-8", "replace"), name
        assert REAL_KEY not in json.dumps(reply.headers), name
        decoded = read_answer(reply.body, reply.headers.get("content-type", ""), REAL_KEY)
        assert not decoded.secret_seen, name  # not escaped, not split over deltas either
        assert "key_reflected" in reply.log["flags"], name
    # Counted all the same: each 2xx reflection's tokens (the 500s bill nothing).
    billed = [e for e in ledger_of(env) if e.prompt_tokens]
    assert {(e.prompt_tokens, e.completion_tokens) for e in billed} == {(300, 30)}
    assert len(billed) == 4


def test_a_body_cut_short_is_never_forwarded(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    upstream.answer = Answer(answer_of("chat", False))
    with socket.create_connection(("127.0.0.1", proxy.port)) as client:
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 100\r\n\r\n{}"
        )
        client.shutdown(socket.SHUT_WR)  # 2 of 100 bytes, then the end
        client.settimeout(WAIT_S)
        assert client.recv(12)[9:12] == b"400"
    assert upstream.seen == []


def test_the_routes_maximum_bounds_a_request_that_names_none(upstream: FakeUpstream) -> None:
    spec = GatewaySpec("http://127.0.0.1/v1", None, {}, max_output_tokens=123)
    assert spec.budget_environment()["DELTARUN_MAX_OUTPUT_TOKENS"] == "123"
    env = proxy_environment(upstream.url, REAL_KEY, DELTARUN_MAX_OUTPUT_TOKENS="123")
    upstream.answer = Answer(b"<html>not an answer</html>")
    with proxy_running(env) as proxy:
        request = {"model": PINNED, "messages": [{"role": "user", "content": "hi"}]}
        reply = proxy.ask("/v1/chat/completions", request)
    assert reply.log["completion_tokens"] == 123 and "estimated" in reply.log["flags"]
