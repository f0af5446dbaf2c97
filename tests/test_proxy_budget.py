"""The model proxy's budgets: once the trial's tokens or dollars are spent, a request is
answered in its API's error shape and not forwarded. The real proxy.py runs as a process
on the host against a fake upstream on 127.0.0.1 (tests/proxy_support.py); no Docker.
"""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

from runner.errors import UserError
from runner.sandbox.gateway_container import Exchange, GatewaySpec, ModelGateway
from tests.proxy_answers import ANTHROPIC_JSON, CHAT_JSON
from tests.proxy_support import (
    REAL_KEY,
    WAIT_S,
    Answer,
    FakeUpstream,
    RunningProxy,
    proxy_environment,
    proxy_running,
    start_proxy,
)

pytestmark = pytest.mark.timeout(120)

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC = {"anthropic-version": "2023-06-01", "x-api-key": "placeholder"}
PRICE = {"input": 1.0, "output": 2.0, "cache_read": 0.1, "cache_write": 1.25}


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream()
    yield fake
    fake.close()


def chat_answer(prompt: int, completion: int) -> Answer:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    return Answer(json.dumps({**CHAT_JSON, "usage": usage}).encode())


def assert_refused(
    proxy: RunningProxy, upstream: FakeUpstream, path: str, method: str = "POST"
) -> tuple[int, Any]:
    """Ask ``path``; it must be refused for the budget, unforwarded: the status and body."""
    before = len(upstream.seen)
    headers = ANTHROPIC if "messages" in path else {}
    reply = proxy.ask(path, REQUEST, headers, method)
    assert len(upstream.seen) == before, "a request past the budget reached the upstream"
    assert reply.headers["x-should-retry"] == "false"
    assert reply.headers["content-type"] == "application/json"
    exchange = Exchange.parse(reply.log_line)
    assert exchange == Exchange(path, reply.status, None, 0, 0, budget_exhausted=True)
    text = reply.body.decode()
    # No number and no "rate limit" wording: litellm would take either for a rate limit.
    assert "deltarun: budget exhausted" in text
    assert not re.search(r"\d", text) and "rate" not in text.lower()
    return reply.status, reply.json()


def test_the_token_budget_stops_forwarding_once_spent(upstream: FakeUpstream) -> None:
    env = proxy_environment(upstream.url, REAL_KEY, DELTARUN_BUDGET_TOKENS="100")
    with proxy_running(env) as proxy:
        upstream.answer = chat_answer(40, 10)
        assert proxy.ask("/v1/chat/completions", REQUEST).status == 200  # 50 of 100
        upstream.answer = chat_answer(40, 10)
        assert proxy.ask("/v1/chat/completions", REQUEST).status == 200  # 100 of 100: spent
        assert len(upstream.seen) == 2
        status, body = assert_refused(proxy, upstream, "/v1/chat/completions")
        assert status == 402
        assert body == {
            "error": {
                "message": body["error"]["message"],
                "type": "insufficient_quota",
                "param": None,
                "code": "insufficient_quota",
            }
        }
        assert "token budget" in body["error"]["message"]
        status, body = assert_refused(proxy, upstream, "/v1/responses")
        assert status == 400 and body["error"]["code"] == "insufficient_quota"
        status, body = assert_refused(proxy, upstream, "/v1/messages")
        assert status == 400
        assert body == {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": body["error"]["message"]},
        }
        assert assert_refused(proxy, upstream, "/v1/models", method="GET")[0] == 402
        assert proxy.process.poll() is None and proxy.ready()


def test_a_request_that_crosses_the_budget_still_completes(upstream: FakeUpstream) -> None:
    env = proxy_environment(upstream.url, REAL_KEY, DELTARUN_BUDGET_TOKENS="100")
    with proxy_running(env) as proxy:
        upstream.answer = chat_answer(99, 0)
        assert proxy.ask("/v1/chat/completions", REQUEST).status == 200
        upstream.answer = chat_answer(500, 500)  # spent 99: forwarded, and it counts whole
        reply = proxy.ask("/v1/chat/completions", REQUEST)
        assert reply.status == 200 and reply.log["prompt_tokens"] == 500
        assert assert_refused(proxy, upstream, "/v1/chat/completions")[0] == 402


def test_an_answer_the_client_hung_up_on_still_counts(upstream: FakeUpstream) -> None:
    env = proxy_environment(upstream.url, REAL_KEY, DELTARUN_BUDGET_TOKENS="100")
    with proxy_running(env) as proxy:
        upstream.answer = dataclasses.replace(chat_answer(80, 20), delay_s=0.5)
        body = json.dumps(REQUEST).encode()
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}"
        client = socket.create_connection(("127.0.0.1", proxy.port))
        client.sendall(head.encode() + b"\r\n\r\n" + body)
        deadline = time.monotonic() + WAIT_S
        while not upstream.seen and time.monotonic() < deadline:
            time.sleep(0.01)
        # Reset (not closed): the proxy's write of the answer fails.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        log = json.loads(proxy.lines.get(timeout=WAIT_S))
        assert (log["status"], log["prompt_tokens"], log["completion_tokens"]) == (200, 80, 20)
        assert assert_refused(proxy, upstream, "/v1/chat/completions")[0] == 402


def test_the_dollar_budget_prices_cache_reads_and_writes(upstream: FakeUpstream) -> None:
    # Per million: 1 000 fresh input × $1 + 100 000 cache reads × $0.10 + 10 000 cache writes
    # × $1.25 + 2 000 output × $2 = $0.0275 an answer. Cache reads at the input price would
    # make it $0.1175 and spend the budget at once.
    usage = {
        "input_tokens": 1000,
        "cache_read_input_tokens": 100_000,
        "cache_creation_input_tokens": 10_000,
        "output_tokens": 2000,
    }
    answer = Answer(json.dumps({**ANTHROPIC_JSON, "usage": usage}).encode())
    env = proxy_environment(
        upstream.url, REAL_KEY, DELTARUN_BUDGET_USD="0.05", DELTARUN_PRICE=json.dumps(PRICE)
    )
    with proxy_running(env) as proxy:
        upstream.answer = answer
        first = proxy.ask("/v1/messages", REQUEST, ANTHROPIC)
        assert first.status == 200 and first.log["prompt_tokens"] == 111_000
        assert proxy.ask("/v1/messages", REQUEST, ANTHROPIC).status == 200  # $0.0275 < $0.05
        status, body = assert_refused(proxy, upstream, "/v1/messages")  # $0.055
        assert status == 400 and "dollar budget" in body["error"]["message"]


def test_without_a_budget_nothing_is_refused(upstream: FakeUpstream) -> None:
    with proxy_running(proxy_environment(upstream.url, REAL_KEY)) as proxy:
        upstream.answer = chat_answer(10**8, 10**8)
        for _ in range(3):
            reply = proxy.ask("/v1/chat/completions", REQUEST)
            assert reply.status == 200 and reply.log["budget_exhausted"] is False
        assert len(upstream.seen) == 3


@pytest.mark.parametrize(
    "env,message",
    [
        ({"DELTARUN_BUDGET_USD": "1"}, "DELTARUN_BUDGET_USD needs DELTARUN_PRICE"),
        ({"DELTARUN_BUDGET_USD": "-1", "DELTARUN_PRICE": json.dumps(PRICE)}, "0 or more"),
        ({"DELTARUN_BUDGET_USD": "nan", "DELTARUN_PRICE": json.dumps(PRICE)}, "0 or more"),
        ({"DELTARUN_BUDGET_TOKENS": "ten"}, "DELTARUN_BUDGET_TOKENS must be a whole number"),
        ({"DELTARUN_BUDGET_TOKENS": "-5"}, "DELTARUN_BUDGET_TOKENS must be a whole number"),
        ({"DELTARUN_PRICE": "{"}, "DELTARUN_PRICE is not JSON"),
        ({"DELTARUN_PRICE": '{"input": 1}'}, "with input and output"),
        (
            {"DELTARUN_PRICE": '{"input": 1, "output": "2"}'},
            "DELTARUN_PRICE.output must be a number",
        ),
        ({"DELTARUN_PRICE": '{"input": 1, "output": 2, "cached": 1}'}, "unknown keys ['cached']"),
        ({"DELTARUN_PRICE": '{"input": 1, "output": -2}'}, "0 or more"),
        ({"DELTARUN_LISTEN_PORT": "http"}, "DELTARUN_LISTEN_PORT must be a port number"),
    ],
)
def test_a_budget_it_could_not_enforce_stops_it_at_start(env: dict[str, str], message: str) -> None:
    started = start_proxy({**proxy_environment("http://127.0.0.1:9/v1", REAL_KEY), **env})
    assert not isinstance(started, RunningProxy)
    assert started.returncode == 2
    assert message in started.stderr.decode()
    assert REAL_KEY not in started.stderr.decode()


def test_the_gateway_spec_sets_what_the_proxy_enforces(upstream: FakeUpstream) -> None:
    spec = GatewaySpec(upstream.url, REAL_KEY, {}, budget_tokens=7, budget_usd=0.05, price=PRICE)
    env = spec.budget_environment()
    assert env == {
        "DELTARUN_BUDGET_TOKENS": "7",
        "DELTARUN_BUDGET_USD": "0.05",
        "DELTARUN_PRICE": json.dumps(PRICE, sort_keys=True),
    }
    with proxy_running(proxy_environment(upstream.url, REAL_KEY, **env)) as proxy:
        assert proxy.stderr[0].endswith("budget 7 tokens and 0.05 USD")
        upstream.answer = chat_answer(4, 3)
        assert proxy.ask("/v1/chat/completions", REQUEST).status == 200
        assert assert_refused(proxy, upstream, "/v1/chat/completions")[0] == 402


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"budget_usd": 1.0}, "a dollar budget needs the model's price"),
        ({"budget_usd": -1.0, "price": PRICE}, "budget must be a finite number, 0 or more"),
        ({"budget_usd": float("inf"), "price": PRICE}, "budget must be a finite number"),
        ({"budget_tokens": -1}, "token budget must be a whole number"),
        ({"price": {"input": 1.0}}, "a price names input and output"),
        ({"price": {**PRICE, "cached": 1.0}}, "a price names input and output"),
        ({"price": {"input": 1.0, "output": "2"}}, "the price output must be a number"),
        ({"price": {"input": 1.0, "output": float("nan")}}, "price output must be a finite"),
    ],
)
def test_a_gateway_spec_refuses_a_budget_the_proxy_could_not_enforce(
    fields: dict[str, Any], message: str
) -> None:
    spec = GatewaySpec("http://m/v1", REAL_KEY, {}, **fields)
    with pytest.raises(UserError, match=message):
        ModelGateway(cast(Any, None), spec)  # refused before anything is started
