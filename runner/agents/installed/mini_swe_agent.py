"""mini-swe-agent (PyPI ``mini-swe-agent``): one ``bash`` tool, run as ``mini -y
--exit-immediately`` with litellm's price map local, its first-run prompt skipped and cost
tracking tolerant of an unpriced model. The model name needs litellm's ``openai/`` prefix.

Wire: OpenAI Chat Completions, not streamed. Extension point: a config file
(``~/.config/mini-swe-agent/.env``). Session log: the trajectory file it writes after every
step (``~/traj.json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from runner.agents.installed.kind import (
    HOME,
    PLACEHOLDER_KEY,
    Api,
    Artifact,
    Invocation,
    Launch,
    Step,
)
from runner.agents.installed.python_cli import launcher
from runner.agents.installed.session_log import count, excerpt, loads

name = "mini-swe-agent"
api: Api = "openai-chat"
needs_python = True
needs_glibc = True
settings: dict[str, str] = {}
setting_choices: dict[str, tuple[str, ...]] = {}
config_dir = ".config/mini-swe-agent"
toggle_targets = (".env",)
session_logs = ("traj.json",)
tool_names = {"run_command": ("bash",)}
always_allowed: tuple[str, ...] = ()
TRAJECTORY = f"{HOME}/traj.json"
MAX_TRAJECTORY_BYTES = 16 << 20
ROLES = ("user", "assistant", "tool", "system")


def artifacts(version: str) -> list[Artifact]:
    return [Artifact("pypi", "mini-swe-agent", version)]


def invocation(launch: Launch) -> Invocation:
    argv = (
        *launcher("minisweagent.run.mini", "app"),
        "-y",
        "--exit-immediately",
        "-m",
        f"openai/{launch.model}",
        "-t",
        launch.prompt,
        "-o",
        TRAJECTORY,
    )
    env = {
        "MSWEA_CONFIGURED": "true",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENAI_API_KEY": PLACEHOLDER_KEY,
        "OPENAI_BASE_URL": launch.base_url,
        "HOME": HOME,
    }
    return Invocation(argv, env)


def steps(logs: Mapping[str, bytes]) -> list[Step]:
    """The trajectory's ``messages``: role, content, and each tool call's arguments; an
    answer's tokens (its ``extra.response.usage``) go to its last step."""
    data = logs.get("traj.json", b"")
    if len(data) > MAX_TRAJECTORY_BYTES:
        return []
    trajectory = loads(data)
    messages = trajectory.get("messages") if isinstance(trajectory, dict) else None
    found: list[Step] = []
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") in ROLES:
            before = len(found)
            found += _message(message)
            if len(found) > before and message["role"] == "assistant":
                found[-1] = _with_usage(found[-1], message)
    return found


def _message(message: dict[str, Any]) -> list[Step]:
    role = message["role"]
    found = []
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            found.append(
                Step(
                    "assistant",
                    tool=excerpt(function.get("name")),
                    arguments=excerpt(function.get("arguments")),
                )
            )
    content = message.get("content")
    if isinstance(content, str) and content.strip():
        found.append(
            Step(
                role,
                excerpt(content) if role != "tool" else "",
                result=(excerpt(content) if role == "tool" else None),
            )
        )
    return found


def _with_usage(step: Step, message: dict[str, Any]) -> Step:
    extra = message.get("extra")
    response = extra.get("response") if isinstance(extra, dict) else None
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return step
    return replace(
        step,
        input_tokens=count(usage.get("prompt_tokens")),
        output_tokens=count(usage.get("completion_tokens")),
    )
