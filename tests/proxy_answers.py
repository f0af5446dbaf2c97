"""Answers in the real wire formats the agent CLIs meet, each streamed and not, as the model
APIs send them (field for field, shortened texts), with what the proxy must log for each.

Anthropic Messages (Claude Code), OpenAI Chat Completions (aider, mini-swe-agent) and OpenAI
Responses (Codex). ``prompt_tokens`` as logged counts cached input too: for Anthropic the
cache reads and writes are added to ``input_tokens``; OpenAI's counts include them already.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.proxy_support import sse

CLAUDE = "claude-sonnet-4-5-20250929"
GPT = "gpt-4.1-2025-04-14"
CODEX = "gpt-5-codex"


@dataclass(frozen=True)
class Case:
    """One answer, the request path it answers, and what the proxy must log."""

    name: str
    path: str
    body: bytes
    content_type: str
    model: str
    prompt: int
    completion: int
    cache_read: int
    cache_write: int
    tool_calls: tuple[str, ...]

    @property
    def anthropic(self) -> bool:
        return self.path.endswith("/messages")


ANTHROPIC_JSON: dict[str, Any] = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": CLAUDE,
    "content": [
        {"type": "text", "text": "I'll look first."},
        {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "ls"}},
        {"type": "tool_use", "id": "toolu_02", "name": "Edit", "input": {"file_path": "a.py"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "cache_creation_input_tokens": 20,
        "cache_read_input_tokens": 100,
        "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 34,
        "service_tier": "standard",
    },
}

_START = {
    "type": "message_start",
    "message": {
        **{k: v for k, v in ANTHROPIC_JSON.items() if k not in ("content", "usage")},
        "content": [],
        "stop_reason": None,
        "usage": {
            "input_tokens": 25,
            "cache_creation_input_tokens": 50,
            "cache_read_input_tokens": 1000,
            "output_tokens": 1,
        },
    },
}
_TOOL = {"type": "tool_use", "id": "toolu_03", "name": "Bash", "input": {}}
ANTHROPIC_SSE = sse(
    ("message_start", _START),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    ("ping", {"type": "ping"}),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Fixing."},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": _TOOL}),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {
                "type": "input_json_delta",
                "partial_json": '{"command": "sed -i s/-/+/ calc/__init__.py"',
            },
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": ', "description": "fix"}'},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 77},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
)


def _tool_call(index: int, name: str, arguments: str) -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    return {"index": index, "id": f"call_{index}", "type": "function", "function": function}


CHAT_JSON: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1764633600,
    "model": GPT,
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        k: v
                        for k, v in _tool_call(0, "bash", '{"command":"ls"}').items()
                        if k != "index"
                    }
                ],
                "refusal": None,
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 50,
        "completion_tokens": 9,
        "total_tokens": 59,
        "prompt_tokens_details": {"cached_tokens": 32, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    },
    "system_fingerprint": "fp_1",
}


def _chunk(delta: dict[str, Any] | None, usage: Any = None, finish: str | None = None) -> Any:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    base = {"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 1764633600}
    return {**base, "model": GPT, "choices": choices, "usage": usage}


def _arguments(index: int, text: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, "function": {"arguments": text}}]}


CHAT_SSE = sse(
    (None, _chunk({"role": "assistant", "content": None})),
    (None, _chunk({"tool_calls": [_tool_call(0, "bash", "")]})),
    (None, _chunk(_arguments(0, '{"command":'))),
    (None, _chunk(_arguments(0, '"ls"}'))),
    (None, _chunk({"tool_calls": [_tool_call(1, "read_file", "")]})),
    (None, _chunk(_arguments(1, "{}"))),
    (None, _chunk({}, finish="tool_calls")),
    (
        None,
        _chunk(
            None,
            usage={
                **CHAT_JSON["usage"],
                "prompt_tokens": 120,
                "completion_tokens": 33,
                "total_tokens": 153,
                "prompt_tokens_details": {"cached_tokens": 64},
            },
        ),
    ),
    (None, b"[DONE]"),
)

_REASONING = {"id": "rs_1", "type": "reasoning", "summary": []}
_FUNCTION = {
    "id": "fc_1",
    "type": "function_call",
    "status": "completed",
    "arguments": '{"cmd":"ls"}',
    "call_id": "call_1",
    "name": "exec_command",
}
_CUSTOM = {
    "id": "ctc_1",
    "type": "custom_tool_call",
    "status": "completed",
    "call_id": "call_2",
    "name": "apply_patch",
    "input": "*** Begin Patch",
}
_SHELL = {
    "id": "lsh_1",
    "type": "local_shell_call",
    "status": "completed",
    "call_id": "call_3",
    "action": {"type": "exec", "command": ["ls"]},
}
_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "done", "annotations": []}],
}
RESPONSES_USAGE = {
    "input_tokens": 3000,
    "input_tokens_details": {"cached_tokens": 2048},
    "output_tokens": 150,
    "output_tokens_details": {"reasoning_tokens": 64},
    "total_tokens": 3150,
}
RESPONSES_JSON: dict[str, Any] = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1764633600,
    "status": "completed",
    "model": CODEX,
    "output": [_REASONING, _FUNCTION, _CUSTOM, _SHELL, _MESSAGE],
    "usage": RESPONSES_USAGE,
}


def _response(status: str, output: list[Any], usage: Any) -> dict[str, Any]:
    return {**RESPONSES_JSON, "status": status, "output": output, "usage": usage}


def _item(event: str, index: int, item: dict[str, Any]) -> tuple[str, Any]:
    return event, {"type": event, "sequence_number": 3 + index, "output_index": index, "item": item}


RESPONSES_SSE = sse(
    (
        "response.created",
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": _response("in_progress", [], None),
        },
    ),
    (
        "response.in_progress",
        {
            "type": "response.in_progress",
            "sequence_number": 1,
            "response": _response("in_progress", [], None),
        },
    ),
    _item("response.output_item.added", 0, _REASONING),
    _item("response.output_item.done", 0, _REASONING),
    _item("response.output_item.added", 1, {**_FUNCTION, "status": "in_progress", "arguments": ""}),
    (
        "response.function_call_arguments.delta",
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 1,
            "delta": '{"cmd":"ls"}',
        },
    ),
    _item("response.output_item.done", 1, _FUNCTION),
    _item("response.output_item.added", 2, {**_CUSTOM, "input": ""}),
    _item("response.output_item.done", 2, _CUSTOM),
    (
        "response.completed",
        {
            "type": "response.completed",
            "sequence_number": 9,
            "response": _response("completed", [_REASONING, _FUNCTION, _CUSTOM], RESPONSES_USAGE),
        },
    ),
)

_JSON, _SSE = "application/json", "text/event-stream; charset=utf-8"
CASES = [
    Case(
        "anthropic",
        "/v1/messages",
        json.dumps(ANTHROPIC_JSON).encode(),
        _JSON,
        CLAUDE,
        132,
        34,
        100,
        20,
        ("Bash", "Edit"),
    ),
    Case(
        "anthropic-sse", "/v1/messages", ANTHROPIC_SSE, _SSE, CLAUDE, 1075, 77, 1000, 50, ("Bash",)
    ),
    Case(
        "chat",
        "/v1/chat/completions",
        json.dumps(CHAT_JSON).encode(),
        _JSON,
        GPT,
        50,
        9,
        32,
        0,
        ("bash",),
    ),
    Case(
        "chat-sse",
        "/v1/chat/completions",
        CHAT_SSE,
        _SSE,
        GPT,
        120,
        33,
        64,
        0,
        ("bash", "read_file"),
    ),
    Case(
        "responses",
        "/v1/responses",
        json.dumps(RESPONSES_JSON).encode(),
        _JSON,
        CODEX,
        3000,
        150,
        2048,
        0,
        ("exec_command", "apply_patch", "local_shell"),
    ),
    Case(
        "responses-sse",
        "/v1/responses",
        RESPONSES_SSE,
        _SSE,
        CODEX,
        3000,
        150,
        2048,
        0,
        ("exec_command", "apply_patch"),
    ),
]
