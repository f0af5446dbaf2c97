"""aider (PyPI ``aider-chat``): one chat completion per turn, no tools; its edits are text in
the reply (whole files, SEARCH/REPLACE blocks or a unified diff, per ``edit_format``). Run
with git, auto-commits, update checks, analytics and the repository map off, its histories
kept in ``HOME`` (out of the patch), and the model listed in a metadata file so it fetches no
price list. ``--no-stream``: it then counts tokens from the server's usage.

Wire: OpenAI Chat Completions. Extension point: a conventions file (``CONVENTIONS.md``
under ``~/.aider``), read into the chat with ``--read`` on the -on leg. Session log:
``~/.aider.chat.history.md``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

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
from runner.agents.installed.session_log import excerpt

name = "aider"
api: Api = "openai-chat"
needs_python = True
needs_glibc = True
settings = {"edit_format": "whole, diff or udiff (default whole)."}
setting_choices = {"edit_format": ("whole", "diff", "udiff")}
config_dir = ".aider"
toggle_targets = ("CONVENTIONS.md",)
session_logs = (".aider.chat.history.md",)
tool_names: dict[str, tuple[str, ...]] = {}
always_allowed: tuple[str, ...] = ()
HISTORY = f"{HOME}/.aider.chat.history.md"
METADATA = f"{HOME}/{config_dir}/model.metadata.json"
CONVENTIONS = f"{HOME}/{config_dir}/CONVENTIONS.md"


def artifacts(version: str) -> list[Artifact]:
    return [Artifact("pypi", "aider-chat", version)]


def invocation(launch: Launch) -> Invocation:
    model = f"openai/{launch.model}"
    edit_format = str(launch.settings.get("edit_format", "whole"))
    argv = (
        *launcher("aider.main", "main"),
        "--model", model,
        "--openai-api-base", launch.base_url,
        "--openai-api-key", PLACEHOLDER_KEY,
        "--model-metadata-file", METADATA,
        "--edit-format", edit_format,
        "--message", launch.prompt,
        "--yes-always", "--no-git", "--no-auto-commits", "--no-check-update",
        "--analytics-disable", "--no-show-model-warnings", "--no-show-release-notes",
        "--no-pretty", "--no-fancy-input", "--no-gitignore", "--no-stream", "--no-auto-lint",
        "--map-tokens", "0",
        "--chat-history-file", HISTORY,
        "--input-history-file", f"{HOME}/.aider.input.history",
        "--read", CONVENTIONS,
    )  # fmt: skip
    metadata = {
        model: {
            "max_tokens": launch.max_output_tokens,
            "max_input_tokens": 128000,
            "max_output_tokens": launch.max_output_tokens,
            "input_cost_per_token": 0,
            "output_cost_per_token": 0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    }
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "TERM": "dumb", "HOME": HOME}
    files = {METADATA: json.dumps(metadata).encode("utf-8")}
    return Invocation(argv, env, files)


def steps(logs: Mapping[str, bytes]) -> list[Step]:
    """The chat history: a run of ``#### `` lines is one user message; aider's notes
    (``> `` lines) separate the model's replies, which are the text between them. What
    comes between a session's heading and its first user message is aider's (its command
    line, over several lines when the prompt has them)."""
    text = logs.get(".aider.chat.history.md", b"").decode("utf-8", "replace")
    found: list[Step] = []
    role = ""  # "user", "assistant", or "" for aider's notes
    lines: list[str] = []
    preamble = False
    for line in text.splitlines():
        user = line == "####" or line.startswith("#### ")
        preamble = line.startswith("# aider chat started") or (preamble and not user)
        kind = "user" if user else "" if preamble or line.startswith(">") else "assistant"
        if kind != role:
            found += _message(role, lines)
            role, lines = kind, []
        lines.append(line[5:].rstrip() if kind == "user" else line)
    return found + _message(role, lines)


def _message(role: str, lines: list[str]) -> list[Step]:
    text = "\n".join(lines).strip()
    if role == "user" and text:
        return [Step("user", excerpt(text))]
    if role == "assistant" and text:
        return [Step("assistant", excerpt(text))]
    return []
