"""Claude Code (npm ``@anthropic-ai/claude-code``): its native binary from the platform
package, run as ``claude -p`` with stream-JSON output, permission prompts skipped (it refuses
that as root; the sandbox runs it as uid 1000), and its update checks and telemetry off.

Wire: Anthropic Messages (``POST /v1/messages``, streamed). Extension points live under
``~/.claude``: skills, the user memory file ``CLAUDE.md``, settings (hooks), subagents and
commands. Session log: the stream-JSON events on stdout, and ``~/.claude/projects``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace

from runner.agents.installed.kind import (
    HOME,
    INSTALL_DIR,
    PLACEHOLDER_KEY,
    Api,
    Artifact,
    Invocation,
    Launch,
    Step,
    denied_tools,
)
from runner.agents.installed.session_log import count, excerpt, json_lines

name = "claude-code"
api: Api = "anthropic"
needs_python = False
needs_glibc = True
settings = {"max_turns": "Model turns at most (claude --max-turns)."}
setting_choices: dict[str, tuple[str, ...]] = {}  # max_turns: a number
config_dir = ".claude"
toggle_targets = ("skills", "CLAUDE.md", "settings.json", "agents", "commands")
session_logs = (".claude/projects",)
# Older versions' names kept beside 2.1's (where Monitor and TaskStop handle background
# commands, Grep, Glob and LS are gone, and Task is called Agent).
tool_names = {
    "run_command": ("Bash", "BashOutput", "KillShell", "KillBash", "Monitor", "TaskStop"),
    "read_file": ("Read",),
    "list_dir": ("LS", "Glob"),
    "search": ("Grep", "Glob"),
    "write_file": ("Write", "Edit", "MultiEdit", "NotebookEdit"),
    "apply_patch": ("Edit", "MultiEdit"),
}
always_allowed = ("TodoWrite", "ExitPlanMode", "Task", "Agent", "ListAgents", "Skill", "ToolSearch")


def artifacts(version: str) -> list[Artifact]:
    return [
        Artifact(
            "npm",
            "@anthropic-ai/claude-code-linux-x64",
            version,
            {"package/claude": "bin/claude"},
        )
    ]


def invocation(launch: Launch) -> Invocation:
    argv = [
        f"{INSTALL_DIR}/bin/claude",
        "-p",
        launch.prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
        "--model",
        launch.model,
    ]
    if "max_turns" in launch.settings:
        argv += ["--max-turns", str(launch.settings["max_turns"])]
    denied = denied_tools(tool_names, launch.allowlist)
    if denied:
        argv += ["--disallowedTools", ",".join(denied)]
    env = {
        "ANTHROPIC_BASE_URL": launch.base_url,
        "ANTHROPIC_API_KEY": PLACEHOLDER_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(launch.max_output_tokens),
        "HOME": HOME,
    }
    return Invocation(tuple(argv), env)


def steps(logs: Mapping[str, bytes]) -> list[Step]:
    """Stream-JSON events: ``assistant`` messages (text and ``tool_use`` blocks), ``user``
    messages carrying ``tool_result`` blocks.

    Each content block of an answer comes as its own event with the answer's usage as it
    stood when the block began (output tokens not yet counted); the session log under
    ``~/.claude/projects`` holds the final usage. An answer's tokens go to its last step
    once: input counts cache reads and writes too, as the record's ``prompt_tokens`` does."""
    final = _session_usage(logs)
    found: list[Step] = []
    last_of: dict[str, int] = {}  # answer id -> index of the step holding its tokens
    for event in json_lines(logs.get("stdout", b"")):
        message = event.get("message")
        if not isinstance(message, dict) or event.get("type") not in ("assistant", "user"):
            continue
        before = len(found)
        for block in message.get("content") or []:
            if isinstance(block, dict) and (step := _block(event["type"], block)) is not None:
                found.append(step)
        if event["type"] != "assistant" or len(found) == before:
            continue
        key = message.get("id") if isinstance(message.get("id"), str) else None
        usage = final.get(key or "") or message.get("usage")
        if not isinstance(usage, dict):
            continue
        if key is not None and key in last_of:  # the same answer's earlier block
            found[last_of[key]] = replace(found[last_of[key]], input_tokens=0, output_tokens=0)
        if key is not None:
            last_of[key] = len(found) - 1
        found[-1] = replace(
            found[-1], input_tokens=_input(usage), output_tokens=count(usage.get("output_tokens"))
        )
    return found


def _session_usage(logs: Mapping[str, bytes]) -> dict[str, dict[str, object]]:
    """Answer id -> its final usage, from the session logs (``.claude/projects/**.jsonl``)."""
    found: dict[str, dict[str, object]] = {}
    for path, data in sorted(logs.items()):
        if not (path.startswith(f"{config_dir}/projects/") and path.endswith(".jsonl")):
            continue
        for event in json_lines(data):
            message = event.get("message")
            if event.get("type") != "assistant" or not isinstance(message, dict):
                continue
            key, usage = message.get("id"), message.get("usage")
            if isinstance(key, str) and isinstance(usage, dict):
                found[key] = usage
    return found


def _input(usage: dict[str, object]) -> int:
    keys = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return sum(count(usage.get(key)) for key in keys)


def _block(role: str, block: dict[str, object]) -> Step | None:
    kind = block.get("type")
    if kind == "text":
        return Step("assistant" if role == "assistant" else "user", excerpt(block.get("text")))
    if kind == "tool_use":
        arguments = json.dumps(block.get("input"), ensure_ascii=False, sort_keys=True)
        return Step("assistant", tool=excerpt(block.get("name")), arguments=excerpt(arguments))
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            content = "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        return Step("tool", result=excerpt(content))
    return None
