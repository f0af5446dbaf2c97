"""Codex (npm ``@openai/codex``): its musl-static binary from the platform build
(``<version>-linux-x64``), run as ``codex exec --json`` with its own approvals and sandbox
off (the harness's sandbox is the boundary; bubblewrap cannot nest in it), analytics and
plugin sync off, and a model provider that points at the gateway.

Wire: OpenAI Responses (``POST /v1/responses``, streamed). Extension points live under
``$CODEX_HOME`` (``~/.codex``): ``AGENTS.md`` (global instructions), skills and prompts.
Codex has no per-tool switch: a non-empty allowlist is enforced by counting the calls the
model asks for outside it. Session log: the ``--json`` events on stdout and
``~/.codex/sessions``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from runner.agents.installed.kind import (
    HOME,
    INSTALL_DIR,
    PLACEHOLDER_KEY,
    Api,
    Artifact,
    Invocation,
    Launch,
    Step,
)
from runner.agents.installed.session_log import count, excerpt, json_lines

name = "codex"
api: Api = "openai-responses"
needs_python = False
needs_glibc = False
settings = {"reasoning_effort": "model_reasoning_effort (minimal, low, medium, high)."}
setting_choices = {"reasoning_effort": ("minimal", "low", "medium", "high")}
config_dir = ".codex"
toggle_targets = ("AGENTS.md", "skills", "prompts")
session_logs = (".codex/sessions",)
tool_names = {
    "run_command": ("exec_command", "shell", "local_shell", "write_stdin", "exec"),
    "apply_patch": ("apply_patch",),
    "write_file": ("apply_patch",),
    "read_file": ("read_file", "view_image"),
    "list_dir": ("list_dir",),
    "search": ("grep_files",),
}
always_allowed = ("update_plan",)
KEY_VARIABLE = "DELTARUN_GATEWAY_KEY"
_PLATFORM = "x86_64-unknown-linux-musl"


def artifacts(version: str) -> list[Artifact]:
    return [
        Artifact(
            "npm",
            "@openai/codex",
            f"{version}-linux-x64",
            {
                f"package/vendor/{_PLATFORM}/bin/codex": "bin/codex",
                f"package/vendor/{_PLATFORM}/codex-path/rg": "bin/rg",
            },
        )
    ]


def config_toml(launch: Launch) -> str:
    """``$CODEX_HOME/config.toml``: the gateway as the only provider, nothing else on."""
    lines = [
        f"model = {json.dumps(launch.model)}",
        'model_provider = "deltarun"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
        f"model_max_output_tokens = {launch.max_output_tokens}",
    ]
    if "reasoning_effort" in launch.settings:
        lines.append(
            f"model_reasoning_effort = {json.dumps(str(launch.settings['reasoning_effort']))}"
        )
    lines += [
        "",
        "[model_providers.deltarun]",
        'name = "deltarun gateway"',
        f"base_url = {json.dumps(launch.base_url)}",
        f'env_key = "{KEY_VARIABLE}"',
        'wire_api = "responses"',
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[features]",
        "plugins = false",
        "",
    ]
    return "\n".join(lines)


def invocation(launch: Launch) -> Invocation:
    argv = (
        f"{INSTALL_DIR}/bin/codex",
        "exec",
        "--dangerously-bypass-approvals-and-sandbox",
        "--skip-git-repo-check",
        "--json",
        launch.prompt,
    )
    env = {
        "CODEX_HOME": f"{HOME}/{config_dir}",
        KEY_VARIABLE: PLACEHOLDER_KEY,
        "HOME": HOME,
        "PATH": f"{INSTALL_DIR}/bin:/usr/local/bin:/usr/bin:/bin",
    }
    files = {f"{HOME}/{config_dir}/config.toml": config_toml(launch).encode("utf-8")}
    return Invocation(argv, env, files)


def steps(logs: Mapping[str, bytes]) -> list[Step]:
    """``--json`` events: ``item.completed`` items (agent messages, commands with their
    output, file changes) and ``turn.completed`` usage."""
    found: list[Step] = []
    for event in json_lines(logs.get("stdout", b"")):
        item = event.get("item")
        if event.get("type") == "item.completed" and isinstance(item, dict):
            step = _item(item)
            if step is not None:
                found.append(step)
        usage = event.get("usage")
        if event.get("type") == "turn.completed" and isinstance(usage, dict) and found:
            last = found[-1]
            found[-1] = Step(
                last.role,
                last.text,
                last.tool,
                last.arguments,
                last.result,
                count(usage.get("input_tokens")),
                count(usage.get("output_tokens")),
            )
    return found


def _item(item: dict[str, object]) -> Step | None:
    kind = item.get("type") or item.get("item_type")
    if kind in ("agent_message", "assistant_message"):
        return Step("assistant", excerpt(item.get("text")))
    if kind == "command_execution":
        return Step(
            "assistant",
            tool="exec_command",
            arguments=excerpt(item.get("command")),
            result=excerpt(item.get("aggregated_output")),
        )
    if kind == "file_change":
        changes = json.dumps(item.get("changes"), ensure_ascii=False, sort_keys=True)
        return Step("assistant", tool="apply_patch", arguments=excerpt(changes))
    return None
