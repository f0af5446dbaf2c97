"""What the fake model (tests/fake_models.py) says, in the wire format of each API the agent
CLIs speak, streamed (server-sent events) and as one JSON body, field for field as the model
APIs send them:

    Anthropic Messages        message_start, content_block_start/delta (text_delta,
                              input_json_delta)/stop, message_delta (stop_reason, usage),
                              message_stop; or one ``message``
    OpenAI Chat Completions   one ``chat.completion`` (tool_calls or text); or its chunks,
                              the last with the usage, then ``[DONE]``
    OpenAI Responses          response.created, response.output_item.added/done
                              (``function_call`` or ``message`` items), output_text deltas,
                              response.completed with the usage; or one ``response``

``Usage`` is in the gateway's terms: ``prompt`` counts every input token, cached or not, so
Anthropic's ``input_tokens`` (which leave the cache out) are rendered as the rest.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Api = Literal["anthropic", "chat", "responses"]


@dataclass(frozen=True)
class Call:
    """One tool call the model asks for: the tool's name and its arguments (an object)."""

    name: str
    arguments: Mapping[str, Any]

    @property
    def encoded(self) -> str:
        return json.dumps(dict(self.arguments))


@dataclass(frozen=True)
class Usage:
    """Tokens of one answer as the gateway logs them: ``prompt`` counts every input token,
    cached or not; ``cache_read`` and ``cache_write`` are parts of it."""

    prompt: int
    completion: int
    cache_read: int = 0
    cache_write: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt + other.prompt,
            self.completion + other.completion,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
        )


NO_USAGE = Usage(0, 0)


@dataclass(frozen=True)
class Reply:
    """What the model says: text, tool calls (in order), and the usage it reports."""

    text: str = ""
    calls: tuple[Call, ...] = ()
    usage: Usage = Usage(100, 10)


JSON = "application/json"
SSE = "text/event-stream; charset=utf-8"
_ids = itertools.count(1)


def sse(events: Iterable[tuple[str | None, Any]]) -> bytes:
    """Server-sent events: each ``(event name or None, data)``, data as JSON unless bytes."""
    out = bytearray()
    for name, data in events:
        if name is not None:
            out += f"event: {name}\n".encode()
        payload = data if isinstance(data, bytes) else json.dumps(data).encode()
        out += b"data: " + payload + b"\n\n"
    return bytes(out)


# Anthropic Messages ------------------------------------------------------------------------


def _anthropic_usage(usage: Usage) -> dict[str, int]:
    """Anthropic's ``input_tokens`` leave the cache reads and writes out."""
    return {
        "input_tokens": usage.prompt - usage.cache_read - usage.cache_write,
        "cache_creation_input_tokens": usage.cache_write,
        "cache_read_input_tokens": usage.cache_read,
        "output_tokens": usage.completion,
    }


def _anthropic_blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    blocks += [
        {
            "type": "tool_use",
            "id": f"toolu_{next(_ids):04d}",
            "name": c.name,
            "input": dict(c.arguments),
        }
        for c in reply.calls
    ]
    return blocks


def anthropic(reply: Reply, model: str, streamed: bool) -> bytes:
    blocks = _anthropic_blocks(reply)
    stop = "tool_use" if reply.calls else "end_turn"
    message = {
        "id": f"msg_{next(_ids):04d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": _anthropic_usage(reply.usage),
    }
    if not streamed:
        return json.dumps(message).encode()
    start_usage = {**_anthropic_usage(reply.usage), "output_tokens": 1}
    start = {**message, "content": [], "stop_reason": None, "usage": start_usage}
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(blocks):
        events += _anthropic_block_events(index, block)
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": reply.usage.completion},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return sse(events)


def _anthropic_block_events(index: int, block: dict[str, Any]) -> list[tuple[str | None, Any]]:
    if block["type"] == "text":
        opening = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": block["text"]}
    else:
        opening = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    start = {"type": "content_block_start", "index": index, "content_block": opening}
    return [
        ("content_block_start", start),
        ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


# OpenAI Chat Completions -------------------------------------------------------------------


def _chat_usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt,
        "completion_tokens": usage.completion,
        "total_tokens": usage.prompt + usage.completion,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read},
    }


def _chat_calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {
            "id": f"call_{next(_ids):04d}",
            "type": "function",
            "function": {"name": c.name, "arguments": c.encoded},
        }
        for c in reply.calls
    ]


def chat(reply: Reply, model: str, streamed: bool) -> bytes:
    calls = _chat_calls(reply)
    finish = "tool_calls" if calls else "stop"
    base = {"id": f"chatcmpl-{next(_ids):04d}", "created": int(time.time()), "model": model}
    if not streamed:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if calls:
            message["tool_calls"] = calls
        choice = {"index": 0, "message": message, "finish_reason": finish}
        document = {**base, "object": "chat.completion", "choices": [choice]}
        return json.dumps({**document, "usage": _chat_usage(reply.usage)}).encode()

    def chunk(
        delta: dict[str, Any] | None, finish_reason: str | None = None, usage: Any = None
    ) -> Any:
        choices = (
            [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
        )
        return {**base, "object": "chat.completion.chunk", "choices": choices, "usage": usage}

    events: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": ""}))]
    if reply.text:
        events.append((None, chunk({"content": reply.text})))
    for index, call in enumerate(calls):
        events.append((None, chunk({"tool_calls": [{"index": index, **call}]})))
    events += [
        (None, chunk({}, finish)),
        (None, chunk(None, usage=_chat_usage(reply.usage))),
        (None, b"[DONE]"),
    ]
    return sse(events)


# OpenAI Responses --------------------------------------------------------------------------


def _responses_items(reply: Reply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.text:
        part = {"type": "output_text", "text": reply.text, "annotations": []}
        items.append(
            {
                "id": f"msg_{next(_ids):04d}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    items += [
        {
            "id": f"fc_{next(_ids):04d}",
            "type": "function_call",
            "status": "completed",
            "call_id": f"call_{next(_ids):04d}",
            "name": c.name,
            "arguments": c.encoded,
        }
        for c in reply.calls
    ]
    return items


def _responses_usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt,
        "input_tokens_details": {"cached_tokens": usage.cache_read},
        "output_tokens": usage.completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt + usage.completion,
    }


def responses(reply: Reply, model: str, streamed: bool) -> bytes:
    items = _responses_items(reply)
    response = {
        "id": f"resp_{next(_ids):04d}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": items,
        "usage": _responses_usage(reply.usage),
    }
    if not streamed:
        return json.dumps(response).encode()
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    numbers = itertools.count()
    events: list[tuple[str | None, Any]] = [
        ("response.created", {"type": "response.created", "response": pending}),
        ("response.in_progress", {"type": "response.in_progress", "response": pending}),
    ]
    for index, item in enumerate(items):
        events += _responses_item_events(index, item)
    events.append(("response.completed", {"type": "response.completed", "response": response}))
    return sse((name, {**data, "sequence_number": next(numbers)}) for name, data in events)


def _responses_item_events(index: int, item: dict[str, Any]) -> list[tuple[str | None, Any]]:
    def event(kind: str, **fields: Any) -> tuple[str, Any]:
        return kind, {"type": kind, "output_index": index, **fields}

    if item["type"] == "function_call":
        return [
            event(
                "response.output_item.added",
                item={**item, "status": "in_progress", "arguments": ""},
            ),
            event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                delta=item["arguments"],
            ),
            event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                arguments=item["arguments"],
            ),
            event("response.output_item.done", item=item),
        ]
    text = item["content"][0]["text"]
    empty = {"type": "output_text", "text": "", "annotations": []}
    where = {"item_id": item["id"], "content_index": 0}
    return [
        event("response.output_item.added", item={**item, "status": "in_progress", "content": []}),
        event("response.content_part.added", **where, part=empty),
        event("response.output_text.delta", **where, delta=text),
        event("response.output_text.done", **where, text=text),
        event("response.content_part.done", **where, part=item["content"][0]),
        event("response.output_item.done", item=item),
    ]


RENDERERS: dict[Api, Callable[[Reply, str, bool], bytes]] = {
    "anthropic": anthropic,
    "chat": chat,
    "responses": responses,
}
