"""The ``openai`` agent: deltarun drives a model through a chat-completions tool loop.

Every action the model takes is a tool call that passes the harness: checked by
the tool policy (``policy``), carried out in the sandbox by the ``toolbox``,
counted, timed and written to the transcript. The loop ends when the model calls
``submit`` or ``abstain``, replies without a tool call, sends malformed calls
three turns running, reaches ``max_turns``, or the task's wall-clock limit.

Route lock: every reply must name the pinned model (or one of
``route.accept_models``); another name ends the trial as ``route_mismatch``,
which stops a scored run. Endpoint trouble (429, 5xx, a lost connection) is
retried by ``ChatEndpoint`` as infrastructure; what is left is an ``error``
outcome with the reason, never an agent failure. The API key is read on the
worker from the variable ``route.api_key_env`` names; it goes only into the
request header, never into the sandbox, the transcript or the record.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.agents.interface import AgentContext, AgentResult
from runner.agents.loop.client import ChatEndpoint, DeadlineReached
from runner.agents.loop.tool_policy import tool_definitions
from runner.agents.loop.toolbox import Toolbox, ToolPolicy, ToolResult
from runner.config.arms import OpenAIAgent, Route, Toggles
from runner.config.model_keys import model_key, where_keys_are
from runner.errors import EndpointError
from runner.records import AnswerTask
from runner.sandbox.base import SandboxLost

MALFORMED_TURNS_LIMIT = 3
MAX_CALLS_PER_TURN = 32  # a reply with more gets an error for the rest, not a longer trial


def api_key_of(route: Route, environ: Mapping[str, str]) -> str | None:
    """The key the route names, from ``environ`` or its key directory
    (``runner.config.model_keys``); None when it names none."""
    if route.api_key_env is None:
        return None
    return model_key(route.api_key_env, route.base_url, environ)


@dataclass
class Transcript:
    """The conversation as stored with the trial, capped at ``cap`` bytes of JSON."""

    cap: int
    entries: list[dict[str, Any]] = field(default_factory=list)
    size: int = 2
    dropped: int = 0

    def add(self, entry: dict[str, Any]) -> None:
        size = len(json.dumps(entry, ensure_ascii=False)) + 1
        if self.dropped or self.size + size > self.cap:
            self.dropped += 1
            return
        self.entries.append(entry)
        self.size += size

    def final(self) -> tuple[list[dict[str, Any]], bool]:
        if not self.dropped:
            return self.entries, False
        note = {"role": "deltarun", "content": f"transcript capped: {self.dropped} entries dropped"}
        return [*self.entries, note], True


@dataclass
class _Loop:
    """The running state of one trial's loop."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0
    violation: bool = False
    malformed_turns: int = 0
    stop_reason: str | None = None
    error: str | None = None
    route_mismatch: bool = False
    timed_out: bool = False
    ending: ToolResult | None = None
    lost: str | None = None  # why a command the model ran ended the sandbox


class ModelAgent:
    """Implements the ``Agent`` protocol for ``type: openai`` arms."""

    needs_agent_dir = False
    runs_programs = True

    def __init__(
        self,
        spec: OpenAIAgent,
        route: Route,
        policy: ToolPolicy,
        *,
        seed: int,
        transcript_cap: int,
        toggles: Toggles | None = None,
    ) -> None:
        self.spec = spec
        self.route = route
        self.policy = policy
        self.seed = seed
        self.transcript_cap = transcript_cap
        self.toggles = toggles

    def run(self, ctx: AgentContext) -> AgentResult:
        deadline = time.monotonic() + ctx.timeout_s
        transcript = Transcript(self.transcript_cap)
        state = _Loop()
        key = api_key_of(self.route, os.environ)
        if self.route.api_key_env is not None and key is None:
            state.stop_reason = "endpoint_error"
            state.error = (
                "EndpointError: the model key of route.api_key_env is not on this worker: "
                f"{where_keys_are(self.route.api_key_env)}"
            )
        else:
            endpoint = ChatEndpoint(
                self.route.base_url,
                key,
                max_attempts=self.route.max_attempts,
                request_timeout_s=self.route.request_timeout_s,
            )
            try:
                self._loop(ctx, endpoint, deadline, state, transcript)
            except SandboxLost as lost:  # the trial is the agent's; its tokens stay counted
                state.stop_reason, state.lost = "sandbox_lost", f"the sandbox ended: {lost}"
        entries, truncated = transcript.final()
        ending = state.ending
        log = f"stop: {state.stop_reason}" + (f" ({state.error})" if state.error else "")
        return AgentResult(
            exit_code=None,
            timed_out=state.timed_out,
            abstain_reason=ending.abstain_reason if ending else None,
            answer=ending.answer if ending else None,
            answer_present=bool(ending and ending.answer_present),
            tool_calls=state.tool_calls,
            tool_violation=state.violation,
            prompt_tokens=state.prompt_tokens,
            completion_tokens=state.completion_tokens,
            log=log,
            stop_reason=state.stop_reason,
            error=state.error,
            route_mismatch=state.route_mismatch,
            transcript=entries,
            transcript_truncated=truncated,
            reason=state.lost,
        )

    def _loop(
        self,
        ctx: AgentContext,
        endpoint: ChatEndpoint,
        deadline: float,
        state: _Loop,
        transcript: Transcript,
    ) -> None:
        hidden = ctx.hidden_test
        if hidden is None and not isinstance(ctx.task, AnswerTask):
            # A repository task without a hidden test is a negative control. It answers
            # "fail" like any unsolved task: "no test here" would tell the model to abstain.
            hidden = _never_passes
        toolbox = Toolbox(ctx.sandbox, self.policy, hidden, deadline)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.spec.system_prompt},
            {"role": "user", "content": ctx.prompt},
        ]
        for message in messages:
            transcript.add(message)
        tools = tool_definitions(self.policy.allowlist)
        for turn in range(1, self.spec.max_turns + 1):
            calls = self._turn(ctx, endpoint, deadline, state, transcript, messages, tools, turn)
            if calls is None:
                return
            if not calls:
                state.stop_reason = "no_tool_call"
                return
            if self._act(calls, toolbox, messages, transcript, state):
                return
        state.stop_reason = "turn_limit"

    def _turn(
        self,
        ctx: AgentContext,
        endpoint: ChatEndpoint,
        deadline: float,
        state: _Loop,
        transcript: Transcript,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        turn: int,
    ) -> list[dict[str, Any]] | None:
        """One request and its reply: the tool calls asked for, or None when the loop ends
        (deadline, endpoint failure, route mismatch; the reason in ``state``)."""
        body = {
            "model": self.route.model,
            "messages": messages,
            "tools": tools,
            "tool_choice": "auto",
            "temperature": self.route.temperature,
            "seed": self.seed + ctx.repeat,
            "max_tokens": self.route.max_output_tokens,
        }
        try:
            reply = endpoint.complete(body, deadline)
        except DeadlineReached:
            state.timed_out, state.stop_reason = True, "deadline"
            return None
        except EndpointError as exc:
            state.stop_reason, state.error = "endpoint_error", f"EndpointError: {exc}"
            return None
        state.prompt_tokens += reply.prompt_tokens
        state.completion_tokens += reply.completion_tokens
        calls = _tool_calls(reply.message)
        assistant: dict[str, Any] = {"role": "assistant", "content": reply.message.get("content")}
        if calls:
            assistant["tool_calls"] = calls
        messages.append(assistant)
        transcript.add(
            {
                **assistant,
                "turn": turn,
                "model": reply.model,
                "usage": [reply.prompt_tokens, reply.completion_tokens],
                "attempts": reply.attempts,
            }
        )
        mismatch = self.route.mismatch(reply.model)
        if mismatch is not None:
            state.route_mismatch, state.stop_reason, state.error = True, "route_mismatch", mismatch
            return None
        return calls

    def _act(
        self,
        calls: list[dict[str, Any]],
        toolbox: Toolbox,
        messages: list[dict[str, Any]],
        transcript: Transcript,
        state: _Loop,
    ) -> bool:
        """Carry out one turn's calls; True when the trial ends."""
        malformed = 0
        for index, call in enumerate(calls):
            state.tool_calls += 1
            function = call["function"]
            if index < MAX_CALLS_PER_TURN:
                result = toolbox.call(function["name"], function["arguments"])
            else:
                result = ToolResult(
                    f"error: not run; at most {MAX_CALLS_PER_TURN} calls per reply", refused=True
                )
            state.violation = state.violation or result.violation
            if result.refused and not result.violation:
                malformed += 1
            message = {"role": "tool", "tool_call_id": call["id"], "content": result.content}
            messages.append(message)
            entry: dict[str, Any] = {**message, "name": function["name"]}
            if result.refused:
                entry["refused"] = result.rule or "error"
            transcript.add(entry)
            if result.deadline_hit:
                state.timed_out, state.stop_reason = True, "deadline"
                return True
            if result.end is not None:
                state.ending, state.stop_reason = result, result.end
                return True
        state.malformed_turns = state.malformed_turns + 1 if malformed == len(calls) else 0
        if state.malformed_turns >= MALFORMED_TURNS_LIMIT:
            state.stop_reason = "malformed_tool_calls"
            return True
        return False


def _never_passes() -> bool:
    return False


def _tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The reply's tool calls in a clean shape; arguments always as a JSON string."""
    calls: list[dict[str, Any]] = []
    raw = message.get("tool_calls") or []
    if not isinstance(raw, list):
        return calls
    for index, call in enumerate(raw):
        if not isinstance(call, dict):
            continue
        function = call.get("function") or {}
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        calls.append(
            {
                "id": str(call.get("id") or f"call_{index}"),
                "type": "function",
                "function": {"name": str(function.get("name") or ""), "arguments": arguments},
            }
        )
    return calls
