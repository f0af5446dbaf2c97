"""Seed 004: the four-file replay kit (``tasks.jsonl``, ``metrics.py``, ``controls.yaml``,
``replay.sh``) mapped to deltarun.

::

    controls.yaml suite_file / suite_sha256   -> the task file; its bytes checked (exit 3)
    model_base_url, model_name, temperature,
    max_output_tokens                         -> route, and an openai arm named after the model
    seed                                      -> runtime.seed (the route's seed when unset)
    max_retries                               -> runtime.max_retries (0; more cannot map)
    per_task_timeout_s                        -> runtime.timeout_s
    tool_allowlist                            -> tools.allowlist
    forbidden_paths                           -> tools.forbidden_paths; those files move to hidden
    stop_on_control_mismatch: true            -> deltarun always stops (false cannot map)
    tasks.jsonl id, repo, hidden_test,
    timeout_s, size_bucket, tags              -> repository tasks (``runner.seedkits.hidden``)
    metrics.py                                -> deltarun's report (not executed; checked by name)
    replay.sh                                 -> `deltarun run` / `replay` / `export` (not run)

The seed's lines carry no prompt: a line's ``prompt``, else ``prompts/<id>.md`` (or
``.txt``) beside ``tasks.jsonl``, is what the agent is asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runner.config.runtime import TOOL_NAMES
from runner.errors import ArchiveError, UsageError, UserError
from runner.hashing import sha256_bytes
from runner.paths import inside
from runner.seedkits.fields import (
    Fields,
    Warn,
    check_digest,
    is_placeholder,
    read_bytes,
    read_jsonl,
    read_text,
    read_yaml_mapping,
)
from runner.seedkits.hidden import parse_hidden_command, split_fixture
from runner.seedkits.seed_arms import NOOP, arm_name
from runner.seedkits.seed_files import check_metrics_py, note_replay
from runner.seedkits.writer import Plan, check_lines
from runner.trees.archives import Member, build_tar, members_from_dir, read_members

FORMAT = "a seed-004 controls.yaml"
KEYS = (
    "suite_file", "suite_sha256", "model_base_url", "model_name", "temperature", "seed",
    "max_retries", "per_task_timeout_s", "max_output_tokens", "tool_allowlist",
    "forbidden_paths", "stop_on_control_mismatch",
)  # fmt: skip
TASK_KEYS = ("id", "repo", "hidden_test", "timeout_s", "size_bucket", "tags", "prompt", "kind")
DEFAULT_CONTROL = "control"


def read_kit(kit: Path, control: str | None, image: str, warn: Warn) -> Plan:
    """The import of the kit folder ``kit`` as a ``Plan``; warnings to ``warn``."""
    if not kit.is_dir():
        raise UserError(f"{kit}: not a folder; pass the kit folder holding controls.yaml")
    path = inside(kit, "controls.yaml", file=kit, field="controls.yaml")
    ctrl = read_yaml_mapping(path, "a seed-004 kit holds controls.yaml")
    ctrl.check_keys(KEYS, FORMAT)
    if ctrl.boolean("stop_on_control_mismatch") is False:
        raise UsageError(
            f"{path}: stop_on_control_mismatch: false cannot map: deltarun always stops on a "
            "control mismatch (a changed digest, protocol hash or model); set it to true"
        )
    named = ctrl.text("suite_file") or "tasks.jsonl"
    tasks_path = inside(kit, named, file=path, field="suite_file")
    data = read_bytes(tasks_path, "controls.yaml suite_file names the kit's tasks file")
    check_digest(ctrl, "suite_sha256", data, tasks_path, warn, "write the file's digest")
    forbidden = ctrl.strings("forbidden_paths") or []
    route = _route(ctrl, warn)
    tools = _tools(ctrl, forbidden, route is not None, warn)
    check_metrics_py(inside(kit, "metrics.py", file=kit, field="metrics.py"), warn)
    note_replay(kit, warn)
    lines, where, archives = _tasks(tasks_path, forbidden, warn)
    control = control or DEFAULT_CONTROL
    seed_arms: list[dict[str, Any]] = []
    if control == DEFAULT_CONTROL:
        seed_arms.append({"name": DEFAULT_CONTROL, "agent": dict(NOOP)})
    if route is not None:
        name = arm_name(str(route["model"]))
        name = f"{name}-model" if name == DEFAULT_CONTROL else name
        seed_arms.append({"name": name, "agent": {"type": "openai"}})
    plan = Plan(
        command="seed004",
        sources=[(path, sha256_bytes(read_bytes(path, ""))), (tasks_path, sha256_bytes(data))],
        protocol_id=f"seed004-{arm_name(kit.resolve().name)}",
        lines=lines,
        runtime=_runtime(ctrl, image),
        tools=tools,
        seed_arms=seed_arms,
        control=control,
        route=route,
        archives=archives,
    )
    check_lines(plan, where)
    return plan


def _runtime(ctrl: Fields, image: str) -> dict[str, Any]:
    runtime: dict[str, Any] = {"repeats": 1, "max_retries": 0}
    retries = ctrl.integer("max_retries", minimum=0)
    if retries:
        raise UsageError(
            f"{ctrl.where}: max_retries {retries} cannot map: the seed retries a failed trial "
            "(scoring a loop, its own study); deltarun retries only after an infrastructure "
            "error, and its scored channel needs 0; set max_retries: 0"
        )
    seed = ctrl.integer("seed")
    if seed is not None:
        runtime["seed"] = seed
    timeout_s = ctrl.number("per_task_timeout_s", minimum=0)
    if timeout_s is not None:
        runtime["timeout_s"] = timeout_s
    return {**runtime, "network": "none", "image": image}


def _route(ctrl: Fields, warn: Warn) -> dict[str, Any] | None:
    """The model route, when the kit names a real endpoint and model (not placeholders)."""
    base_url = ctrl.text("model_base_url")
    model = ctrl.text("model_name")
    temperature = ctrl.number("temperature")
    max_tokens = ctrl.integer("max_output_tokens", minimum=1)
    if temperature is not None and temperature < 0:
        raise ctrl.fail("temperature", "must be 0 or more")
    missing = [
        f"{key} is {'missing' if value is None else 'the placeholder ' + value}"
        for key, value in (("model_base_url", base_url), ("model_name", model))
        if value is None or is_placeholder(value)
    ]
    if missing:
        if base_url or model or temperature is not None or max_tokens is not None:
            warn(
                f"warning: {ctrl.where}: no model route or model arm written ({'; '.join(missing)}"
                "): model_base_url, model_name, temperature and max_output_tokens map to "
                "route; fill them in (the name the endpoint answers) and import again"
            )
        return None
    route: dict[str, Any] = {"base_url": base_url, "model": model}
    if temperature is not None:
        route["temperature"] = temperature
    if max_tokens is not None:
        route["max_output_tokens"] = max_tokens
    return route


def _tools(ctrl: Fields, forbidden: list[str], model_arm: bool, warn: Warn) -> dict[str, Any]:
    allowlist = ctrl.strings("tool_allowlist")
    for name in allowlist or []:
        if name not in TOOL_NAMES:
            raise UsageError(
                f"{ctrl.where}: tool_allowlist: {name!r} cannot map: deltarun has no such tool, "
                f"so the rules would differ; choose from {', '.join(TOOL_NAMES)}"
            )
    if allowlist and not model_arm:
        warn(
            f"warning: {ctrl.where}: tool_allowlist binds deltarun's model-driven (openai) arm "
            "only, and none is written; patch and command arms run their own programs"
        )
    tools: dict[str, Any] = {"allowlist": list(allowlist)} if allowlist else {}
    tools["forbidden_paths"] = list(dict.fromkeys([".git/", *forbidden]))
    return tools


def _tasks(
    path: Path, forbidden: Sequence[str], warn: Warn
) -> tuple[list[dict[str, Any]], list[str], dict[str, bytes]]:
    lines: list[dict[str, Any]] = []
    where: list[str] = []
    archives: dict[str, bytes] = {}
    for row in read_jsonl(path, "write one seed-004 task object per line"):
        row.check_keys(TASK_KEYS, "a seed-004 task line")
        line, found = _task(row, path.parent, forbidden, warn)
        lines.append(line)
        where.append(row.where)
        archives.update(found)
    return lines, where, archives


def _task(
    row: Fields, base: Path, forbidden: Sequence[str], warn: Warn
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """One task line and its archives (fixture, hidden tests).

    Longer than the house's ~60 lines on purpose: one step per field of the seed's line."""
    task_id = row.text("id", required=True) or ""
    kind = row.text("kind") or "ordinary"
    if kind not in ("ordinary", "negative"):
        raise row.fail("kind", f"{kind!r}: write ordinary or negative")
    repo = row.text("repo", required=True) or ""
    members = _fixture(inside(base, repo, file=row.where, field="repo"), row)
    line: dict[str, Any] = {
        "id": task_id,
        "kind": kind,
        "prompt": _prompt(row, base, task_id),
        "repo": f"fixtures/{task_id}.tar",
        "tags": row.strings("tags") or [],
    }
    archives: dict[str, bytes] = {}
    command = row.text("hidden_test")
    if kind == "negative":
        if command is not None:
            raise row.fail("hidden_test", "a negative task has no hidden test; drop it")
        fixture = [m for m in members if m.path != ".git" and not m.path.startswith(".git/")]
    else:
        if command is None:
            raise row.fail("hidden_test", "missing; an ordinary task needs its test command")
        hidden = parse_hidden_command(command, row.where)
        split = split_fixture(members, hidden, forbidden, f"{row.where}: {repo}")
        if split.stripped:
            warn(
                f"warning: {row.where}: {repo}: every entry sits under {split.stripped}/; the "
                "fixture is that folder's contents (the workspace is the repository root)"
            )
        fixture = split.fixture
        line["hidden"] = f"hidden/{task_id}.tar"
        archives[line["hidden"]] = build_tar(split.hidden, uid=0, gid=0)
        if split.declared is not None:
            line["hidden_tests"] = list(split.declared)
            if hidden.pytest_args:
                line["pytest_args"] = list(hidden.pytest_args)
        else:
            line["hidden_test"] = command
            warn(
                f"warning: {row.where}: hidden_test {command!r} stays a command graded by its "
                f"exit status ({hidden.why}), which deltarun's checklist marks as weaker; "
                "write it as `pytest FILE` to get declared tests"
            )
    archives[line["repo"]] = build_tar(fixture, uid=0, gid=0)
    timeout_s = row.number("timeout_s", minimum=0)
    if timeout_s is not None:
        line["timeout_s"] = timeout_s
    bucket = row.text("size_bucket")
    if bucket is not None:
        line["size_bucket"] = bucket
    return line, archives


def _fixture(path: Path, row: Fields) -> list[Member]:
    """The members of a fixture tar (.tar / .tar.gz) or of a folder (a checkout)."""
    if not path.exists():
        raise row.fail("repo", f"{path} not found; name the fixture tar relative to tasks.jsonl")
    try:
        if path.is_dir():
            found = members_from_dir(path)
            return [m for m in found if m.path != ".git" and not m.path.startswith(".git/")]
        return read_members(path)
    except ArchiveError as exc:
        problem = str(exc).replace("an agent directory", "a fixture folder")
        raise ArchiveError(f"{row.where}: repo: {problem}") from exc


def _prompt(row: Fields, base: Path, task_id: str) -> str:
    prompt = row.text("prompt")
    if prompt is not None:
        return prompt
    for name in (f"prompts/{task_id}.md", f"prompts/{task_id}.txt"):
        found = inside(base, name, file=row.where, field="id (its prompt file)")
        if found.is_file():
            text = read_text(found, "").strip()
            if text:
                return text
    raise row.fail(
        "prompt",
        f"missing: the seed's line has no prompt and there is no prompts/{task_id}.md; write "
        "what the agent is asked into the line's prompt or that file",
    )
