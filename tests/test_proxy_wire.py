"""The model proxy on the wire: every API the agent CLIs speak, streamed and not, the key
in each API's header, and hostile answers. The real proxy.py runs as a process on the host
against a fake upstream on 127.0.0.1 (tests/proxy_support.py); no Docker.

What it logs is read back with the harness's own parser (``Exchange.parse``), so the two
sides of the log are held to one contract.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from runner.sandbox.gateway_container import Exchange
from tests.proxy_answers import CASES, CHAT_JSON, Case
from tests.proxy_support import (
    PLACEHOLDER,
    REAL_KEY,
    Answer,
    FakeUpstream,
    RunningProxy,
    proxy_environment,
    proxy_running,
    sse,
)

pytestmark = pytest.mark.timeout(120)

AGENT_HEADERS = {  # what an agent sends: only ever a placeholder, in every header style
    "Authorization": f"Bearer {PLACEHOLDER}",
    "x-api-key": PLACEHOLDER,
    "api-key": PLACEHOLDER,
}
AGENT_HEADERS_LOWER = {name.lower() for name in AGENT_HEADERS}
ANTHROPIC_HEADERS = {**AGENT_HEADERS, "anthropic-version": "2023-06-01"}
REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
MAX_OUT = 777  # the hostile tests' request maximum
BOUNDED = {**REQUEST, "max_tokens": MAX_OUT}
IN_MAX = len(json.dumps(BOUNDED).encode())  # its input maximum: one token per byte at most


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream()
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def proxy(upstream: FakeUpstream) -> Iterator[RunningProxy]:
    with proxy_running(proxy_environment(upstream.url, REAL_KEY)) as running:
        yield running


def exchange_of(line: str) -> Exchange:
    parsed = Exchange.parse(line)
    assert parsed is not None, line
    return parsed


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_each_api_logs_the_usage_it_served(
    proxy: RunningProxy, upstream: FakeUpstream, case: Case
) -> None:
    upstream.answer = Answer(case.body, case.content_type)
    headers = ANTHROPIC_HEADERS if case.anthropic else AGENT_HEADERS
    reply = proxy.ask(case.path + "?beta=true", REQUEST, headers)
    assert reply.status == 200 and reply.body == case.body  # forwarded unchanged, whole
    assert reply.headers["content-type"] == case.content_type
    exchange = exchange_of(reply.log_line)
    assert exchange == Exchange(
        case.path,
        200,
        case.model,
        case.prompt,
        case.completion,
        case.cache_read,
        case.cache_write,
        exchange.latency_ms,
        case.tool_calls,
        False,
        (case.model,),  # one model name, and nothing flagged: every real answer reads whole
    )
    assert 0 <= exchange.latency_ms < 10_000
    seen = upstream.seen[-1]
    assert seen.path == case.path + "?beta=true"
    # The real key, once, in the style of the API; the placeholder nowhere.
    assert PLACEHOLDER not in json.dumps(seen.headers)
    if case.anthropic:
        assert seen.header("x-api-key") == REAL_KEY and seen.header("authorization") is None
        assert seen.header("anthropic-version") == "2023-06-01"
    else:
        assert seen.header("authorization") == f"Bearer {REAL_KEY}"
        assert seen.header("x-api-key") is None
    assert seen.header("api-key") is None
    assert [k for k, _ in seen.headers if k.lower() in ("authorization", "x-api-key")] == [
        "x-api-key" if case.anthropic else "Authorization"
    ]


def test_the_key_style_follows_the_api(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    upstream.answer = Answer(b'{"input_tokens": 10}')
    # Anthropic's token count, or the model listing with an anthropic-version header: x-api-key.
    for path, headers, method in (
        ("/v1/messages/count_tokens", AGENT_HEADERS, "POST"),
        ("/v1/models", ANTHROPIC_HEADERS, "GET"),
    ):
        reply = proxy.ask(path, {}, headers, method)
        assert upstream.seen[-1].header("x-api-key") == REAL_KEY, path
        assert upstream.seen[-1].header("authorization") is None
        # count_tokens' input_tokens is not usage, and neither endpoint bills: nothing counted.
        assert (reply.log["prompt_tokens"], reply.log["completion_tokens"]) == (0, 0)
        assert reply.log["flags"] == []
    proxy.ask("/v1/models", None, AGENT_HEADERS, "GET")
    assert upstream.seen[-1].header("authorization") == f"Bearer {REAL_KEY}"
    assert upstream.seen[-1].header("x-api-key") is None


def test_without_a_key_no_key_header_reaches_the_upstream(upstream: FakeUpstream) -> None:
    with proxy_running(proxy_environment(upstream.url, None)) as keyless:
        upstream.answer = Answer(CASES[0].body)
        for path, headers in (
            ("/v1/messages", ANTHROPIC_HEADERS),
            ("/v1/responses", AGENT_HEADERS),
        ):
            assert keyless.ask(path, REQUEST, headers).status == 200
            seen = upstream.seen[-1]
            assert [k for k, _ in seen.headers if k.lower() in AGENT_HEADERS_LOWER] == []


def test_nothing_of_the_key_is_logged(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    upstream.answer = Answer(b'{"error": {"message": "bad key"}}', status=401)
    assert proxy.ask("/v1/chat/completions?key=q", REQUEST, AGENT_HEADERS).status == 401
    everything = "\n".join(proxy.stdout + proxy.stderr)
    assert REAL_KEY not in everything and PLACEHOLDER not in everything
    assert "key=q" not in everything  # no query string either


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


GARBAGE_SSE = b"".join(
    [
        b": a comment\n\n",
        b"\xff\xfe\x00binary\n\n",
        b"data: {not json\n\n",
        b"data: [1, 2]\n\n",
        b"data: " + _deep(100_000) + b"\n\n",
        b"data: " + b"9" * 5000 + b"\n\n",  # over Python's integer-digits limit
        sse(
            (None, {"usage": {"prompt_tokens": -5, "completion_tokens": "7"}}),
            (None, {"usage": {"prompt_tokens": True, "completion_tokens": 1.5}}),
            (None, {"usage": {"prompt_tokens": 10**12, "completion_tokens": 10**30}}),
            (None, {"usage": [1], "model": 5, "choices": "x", "output": {"a": 1}}),
            (
                None,
                {
                    "choices": [
                        {
                            "delta": {
                                "tool_calls": [{"function": {"name": 5}}, "junk", {"function": "x"}]
                            }
                        },
                        7,
                    ]
                },
            ),
            (
                None,
                {
                    "item": {"type": "function_call", "name": ["x"]},
                    "content_block": {"type": "tool_use"},
                },
            ),
            (None, {"type": "message_start", "message": "not a message"}),
        ),
        b'data: {"usage": {"prompt_tokens": 5,\r\ndata: "completion_tokens": 2}, "model": "m-9"}\r\n\r\n',
        b"data: [DONE]\n\n",
        b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error"}}\n',
    ]
)
TOOL_FLOOD: dict[str, Any] = {
    **CHAT_JSON,
    "usage": {"prompt_tokens": 50, "completion_tokens": 9},
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "x" * 1000, "arguments": "{}"},
                    }
                    for n in range(1000)
                ],
            },
        }
    ],
}
DENSE = b'{"model": "m-3", "x": [' + b"{}," * 1_000_000 + b'{}], "usage": {"prompt_tokens": 3}}'
BIG = {"model": "m-4", "x": "y" * (20 << 20), "usage": {"prompt_tokens": 6, "completion_tokens": 2}}
# Keys that are text inside a string: not the usage (the real one is not an object).
FAKE_KEYS = {
    "x": ',"usage": {"prompt_tokens": 9}, "model": "m"' * (1 << 17),
    "model": 7,
    "usage": [1],
}
BIG_EVENT = {
    "type": "response.completed",
    "response": {
        "model": "m-5",
        "output": [
            {"type": "message", "content": [{"type": "output_text", "text": "z" * (5 << 20)}]}
        ],
        "usage": {"input_tokens": 8, "output_tokens": 1},
    },
}
HOSTILE = [
    # name, answer, status the client gets, (prompt, completion) logged, model logged. A
    # billed (2xx) answer without its closing usage, or not read whole, counts at least the
    # request's maximum (IN_MAX, MAX_OUT), flagged "estimated"; an error status bills nothing.
    ("not-json", Answer(b"<html>oops</html>"), 200, (IN_MAX, MAX_OUT), None),
    ("html-error", Answer(b"<html>bad gateway</html>", "text/html", 500), 500, (0, 0), None),
    ("empty", Answer(b""), 200, (IN_MAX, MAX_OUT), None),
    ("deep-json", Answer(_deep(200_000)), 200, (IN_MAX, MAX_OUT), None),
    # Too dense or too big to decode whole: the usage and the model are still found, alone.
    ("dense-json", Answer(DENSE), 200, (3, MAX_OUT), "m-3"),
    ("big-json", Answer(json.dumps(BIG).encode()), 200, (6, 2), "m-4"),
    ("big-json-fake-keys", Answer(json.dumps(FAKE_KEYS).encode()), 200, (IN_MAX, MAX_OUT), None),
    ("big-sse-event", Answer(sse((None, BIG_EVENT)), "text/event-stream"), 200, (8, 1), "m-5"),
    ("garbage-sse", Answer(GARBAGE_SSE, "text/event-stream"), 200, (5, MAX_OUT), "m-9"),
    (
        "sse-as-text",
        Answer(
            sse((None, {"model": "m-2", "usage": {"prompt_tokens": 4, "completion_tokens": 1}})),
            "text/plain",
        ),
        200,
        (4, 1),
        "m-2",
    ),
    (
        "bogus-counts",
        Answer(
            json.dumps(
                {
                    "model": "m",
                    "usage": {
                        "prompt_tokens": -1,
                        "completion_tokens": 2**70,
                        "prompt_tokens_details": {"cached_tokens": 9},
                    },
                }
            ).encode()
        ),
        200,
        (IN_MAX, MAX_OUT),
        "m",
    ),
    ("huge", Answer(b"{" + b" " * (33 << 20) + b"}"), 502, (IN_MAX, MAX_OUT), None),
    ("tool-flood", Answer(json.dumps(TOOL_FLOOD).encode()), 200, (50, 9), CHAT_JSON["model"]),
]


@pytest.mark.parametrize("name,answer,status,counts,model", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_answers_never_crash_it_or_count_falsely(
    proxy: RunningProxy,
    upstream: FakeUpstream,
    name: str,
    answer: Answer,
    status: int,
    counts: tuple[int, int],
    model: str | None,
) -> None:
    upstream.answer = answer
    reply = proxy.ask("/v1/chat/completions", BOUNDED, AGENT_HEADERS)
    assert reply.status == status
    if status == 200:
        assert reply.body == answer.body
    log = reply.log
    assert (log["prompt_tokens"], log["completion_tokens"], log["model"]) == (*counts, model)
    assert ("estimated" in log["flags"]) == (counts[1] == MAX_OUT)
    assert log["cache_read_tokens"] == log["cache_write_tokens"] == 0
    names = log["tool_calls"]
    assert len(names) <= 64 and all(isinstance(n, str) and len(n) <= 128 for n in names)
    if name == "tool-flood":
        assert names == ["x" * 128] * 64
    else:
        assert names == []
    assert exchange_of(reply.log_line).tool_calls == tuple(names)
    assert proxy.process.poll() is None and proxy.ready()
    assert not [line for line in proxy.stderr if "Traceback" in line or "unread" in line]


def test_an_answer_cut_off_counts_what_arrived_and_its_maximum(
    proxy: RunningProxy, upstream: FakeUpstream
) -> None:
    start = CASES[1].body.split(b"\n\n")[0] + b"\n\n"  # Anthropic's message_start alone
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    upstream.answer = Answer(raw=head + b"%x\r\n" % len(start) + start + b"\r\n")
    reply = proxy.ask("/v1/messages", BOUNDED, ANTHROPIC_HEADERS)
    assert reply.status == 502 and "cut off" in reply.json()["error"]["message"]
    log = reply.log
    # The input side message_start reported; the output at the request's maximum.
    assert (log["model"], log["prompt_tokens"], log["completion_tokens"]) == (
        CASES[1].model,
        1075,
        MAX_OUT,
    )
    assert {"cut", "estimated"} <= set(log["flags"])
    assert (log["cache_read_tokens"], log["cache_write_tokens"]) == (1000, 50)
    assert proxy.process.poll() is None and proxy.ready()


def test_refusals_are_logged_without_usage(proxy: RunningProxy, upstream: FakeUpstream) -> None:
    before = len(upstream.seen)
    reply = proxy.ask("/v2/messages", REQUEST, ANTHROPIC_HEADERS)
    assert reply.status == 403 and len(upstream.seen) == before
    assert exchange_of(reply.log_line) == Exchange("/v2/messages", 403, None, 0, 0)
