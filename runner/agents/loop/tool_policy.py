"""The tool layer's policy: which calls a model may make, and on which paths. Pure code.

A model-driven agent acts only through these tools; ``runner.agents.loop.toolbox`` carries
out what this module allows, inside the sandbox. Every call passes ``check``:

1. the arguments are a JSON object of the tool's schema (else an error goes back
   to the model; a malformed call is not a violation, the model may correct it);
2. the tool is in ``tools.allowlist`` (``submit`` and ``abstain`` always are);
3. every path is normalised, relative to ``/workspace`` (an absolute path must
   lie inside it), free of ``..`` escapes and not under a forbidden path.

A refused call (2 or 3) returns an error to the model, is counted as a tool
violation and is recorded in the transcript. The sandbox then resolves symlinks
and the resolved path is checked again (``check_resolved``): a symlink the
agent made cannot lead a tool out of the workspace or into a forbidden path.
The agent's uid stays the last line of defence either way.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.bounded_json import BoundsError, JsonBounds, loads_bounded
from runner.gitpatch import PatchError, touched_paths
from runner.paths import is_forbidden
from runner.sandbox.base import WORKSPACE

ALWAYS_ALLOWED = frozenset({"submit", "abstain"})
# A model's tool arguments: a patch or a file's content fits, a hostile value does not.
ARG_BOUNDS = JsonBounds(max_bytes=16 << 20, max_depth=32, max_number_chars=64)
MAX_PATCH_BYTES = 4 << 20
MAX_WRITE_BYTES = 4 << 20

_STR = {"type": "string"}
SCHEMAS: dict[str, dict[str, Any]] = {
    "read_file": {
        "description": "Read a text file of the repository.",
        "parameters": {
            "type": "object",
            "properties": {"path": {**_STR, "description": "Path relative to the repository."}},
            "required": ["path"],
        },
    },
    "list_dir": {
        "description": "List a directory of the repository (type, size, name).",
        "parameters": {
            "type": "object",
            "properties": {"path": {**_STR, "description": "Directory; '.' is the root."}},
            "required": [],
        },
    },
    "search": {
        "description": "Search file contents with an extended regular expression (grep -E).",
        "parameters": {
            "type": "object",
            "properties": {
                "pattern": {**_STR, "description": "Extended regular expression."},
                "path": {**_STR, "description": "Directory or file to search; '.' by default."},
            },
            "required": ["pattern"],
        },
    },
    "write_file": {
        "description": "Create or overwrite a file with the given content.",
        "parameters": {
            "type": "object",
            "properties": {"path": _STR, "content": _STR},
            "required": ["path", "content"],
        },
    },
    "apply_patch": {
        "description": "Apply a unified diff (paths relative to the repository, a/ b/ prefixes).",
        "parameters": {
            "type": "object",
            "properties": {"patch": _STR},
            "required": ["patch"],
        },
    },
    "run_command": {
        "description": "Run a shell command in the repository; returns exit code and output.",
        "parameters": {
            "type": "object",
            "properties": {"command": _STR},
            "required": ["command"],
        },
    },
    "run_tests": {
        "description": "Run the repository's visible tests; returns exit code and output.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
    "run_hidden_test": {
        "description": "Grade the current changes with the hidden test; returns pass or fail only.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
    "submit": {
        "description": "Finish. For a task that asks for an answer, pass it as 'answer'.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"description": "The answer (any JSON value), if asked."}},
            "required": [],
        },
    },
    "abstain": {
        "description": "Decline the task because it cannot be done as asked; give the reason.",
        "parameters": {
            "type": "object",
            "properties": {"reason": _STR},
            "required": ["reason"],
        },
    },
}
# Which arguments of each tool are repository paths, and their default.
_PATH_ARGS: dict[str, tuple[str, str | None]] = {
    "read_file": ("path", None),
    "list_dir": ("path", "."),
    "search": ("path", "."),
    "write_file": ("path", None),
}
_STRING_ARGS: dict[str, tuple[str, ...]] = {
    "search": ("pattern",),
    "write_file": ("content",),
    "apply_patch": ("patch",),
    "run_command": ("command",),
    "abstain": ("reason",),
}


def tool_definitions(allowlist: Sequence[str]) -> list[dict[str, Any]]:
    """The ``tools`` of a chat-completions request: the allowed tools, in a fixed order."""
    offered = [name for name in SCHEMAS if name in allowlist or name in ALWAYS_ALLOWED]
    return [{"type": "function", "function": {"name": n, **SCHEMAS[n]}} for n in offered]


@dataclass(frozen=True)
class Allowed:
    """A call that passed the policy: the tool, its arguments, its checked paths."""

    name: str
    args: dict[str, Any]
    paths: tuple[str, ...] = ()  # normalised, relative to the workspace ("." is the root)


@dataclass(frozen=True)
class Refused:
    """A call the harness will not carry out; ``violation`` counts it against the agent."""

    message: str
    violation: bool = True
    detail: dict[str, Any] = field(default_factory=dict)


def check(
    name: str, raw_arguments: str, allowlist: Sequence[str], forbidden: Sequence[str]
) -> Allowed | Refused:
    """Check one tool call against the policy (before anything runs)."""
    if name not in SCHEMAS or (name not in allowlist and name not in ALWAYS_ALLOWED):
        return Refused(f"tool {name!r} is not allowed here", detail={"rule": "allowlist"})
    try:
        args = loads_bounded((raw_arguments or "{}").encode("utf-8", "surrogatepass"), ARG_BOUNDS)
    except BoundsError as exc:
        return Refused(f"arguments are not acceptable JSON ({exc}); send a JSON object", False)
    if not isinstance(args, dict):
        return Refused("arguments must be a JSON object", violation=False)
    for key in _STRING_ARGS.get(name, ()):
        if not isinstance(args.get(key), str):
            return Refused(f"argument {key!r} must be a string", violation=False)
    paths: list[str] = []
    if name in _PATH_ARGS:
        key, default = _PATH_ARGS[name]
        value = args.get(key, default)
        if not isinstance(value, str):
            return Refused(f"argument {key!r} must be a string path", violation=False)
        checked = check_path(value, forbidden)
        if isinstance(checked, Refused):
            return checked
        paths.append(checked)
    if name == "apply_patch":
        if len(args["patch"].encode("utf-8", "surrogatepass")) > MAX_PATCH_BYTES:
            return Refused(f"patch over {MAX_PATCH_BYTES} bytes", violation=False)
        try:
            touched = patch_paths(args["patch"])
        except PatchError as exc:
            return Refused(f"git cannot read this patch ({exc})", violation=False)
        for path in touched:
            checked = check_path(path, forbidden)
            if isinstance(checked, Refused):
                return checked
            paths.append(checked)
    if name == "write_file" and len(args["content"].encode("utf-8", "surrogatepass")) > (
        MAX_WRITE_BYTES
    ):
        return Refused(f"content over {MAX_WRITE_BYTES} bytes", violation=False)
    return Allowed(name, args, tuple(paths))


def check_path(path: str, forbidden: Sequence[str]) -> str | Refused:
    """A path as the model wrote it → normalised and relative to the workspace, or refused."""
    if "\x00" in path:
        return Refused("a path cannot contain NUL", detail={"rule": "path", "path": path})
    text = path.strip() or "."
    if text.startswith("/"):
        absolute = posixpath.normpath(text)
        if absolute != WORKSPACE and not absolute.startswith(WORKSPACE + "/"):
            return Refused(
                f"path {path!r} is outside the workspace", detail={"rule": "escape", "path": path}
            )
        text = posixpath.relpath(absolute, WORKSPACE)
    relative = posixpath.normpath(text)
    if relative == ".." or relative.startswith("../"):
        return Refused(
            f"path {path!r} leaves the workspace", detail={"rule": "escape", "path": path}
        )
    if relative != "." and is_forbidden(relative, forbidden):
        return Refused(f"path {path!r} is forbidden", detail={"rule": "forbidden", "path": path})
    return relative


def check_resolved(requested: str, resolved: str, forbidden: Sequence[str]) -> str | Refused:
    """The path the sandbox resolved (symlinks followed) must pass the same checks."""
    if resolved != WORKSPACE and not resolved.startswith(WORKSPACE + "/"):
        return Refused(
            f"path {requested!r} resolves outside the workspace (through a symlink)",
            detail={"rule": "symlink", "path": requested},
        )
    relative = posixpath.relpath(resolved, WORKSPACE)
    if relative != "." and is_forbidden(relative, forbidden):
        return Refused(
            f"path {requested!r} resolves to a forbidden path (through a symlink)",
            detail={"rule": "symlink", "path": requested},
        )
    return relative


def patch_paths(patch: str) -> list[str]:
    """Every path ``git apply --recount`` would touch (``runner.gitpatch``, git's own rules);
    raises ``PatchError`` where git would refuse the patch."""
    return touched_paths(patch.encode("utf-8", "surrogateescape"), recount=True)
