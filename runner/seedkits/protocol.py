"""Seed 000: a protocol YAML and its JSON Lines of answer tasks, mapped to deltarun.

::

    protocol_id        -> protocol_id
    dataset.path       -> the task file (or the TASKS argument); its lines -> answer tasks
    dataset.sha256     -> checked against the file's bytes (exit 3 on a mismatch)
    metrics.functions  -> each task's metrics: deltarun's built-ins of the same names
    metrics.module     -> not executed (warning): the built-ins compute the same rules
    control.name/kind  -> the control arm (kind scripted: a scripted no-op)
    runtime.python     -> checked in the image, which is then pinned by ID (python_pin)
    runtime.timeout_s  -> runtime.timeout_s and each task's hard kill
    runtime.seed       -> runtime.seed
    candidate.name     -> the arm given with --arm NAME=DIR (else a warning)

A task line ``{id, prompt, expect, deadline_s}`` becomes an answer task with the
protocol's metrics; ``json_schema_ok`` (the answer is an object holding every key of
``expect``) becomes a JSON Schema requiring those keys. ``docs/seed-formats.md``
has the whole table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runner.errors import UsageError
from runner.grading.metrics import BUILTIN
from runner.hashing import sha256_bytes
from runner.paths import inside
from runner.seedkits.fields import Fields, Warn, check_digest, read_bytes, read_jsonl
from runner.seedkits.fields import read_yaml_mapping as read_mapping
from runner.seedkits.seed_arms import NOOP, GivenArm, arm_name
from runner.seedkits.writer import Plan, check_lines

FORMAT = "a seed-000 protocol"
KEYS = ("protocol_id", "dataset", "metrics", "control", "runtime", "candidate")
TASK_KEYS = ("id", "prompt", "expect", "deadline_s", "schema", "tags", "kind")
PYTHON_RE = re.compile(r"\A3\.\d+(?:\.\d+)?\Z")


def read_protocol(
    protocol: Path, tasks: Path | None, given: Sequence[GivenArm], image: str, warn: Warn
) -> Plan:
    """The import of ``protocol`` (and its tasks) as a ``Plan``; warnings to ``warn``."""
    doc = read_mapping(protocol, "pass the seed-000 protocol YAML")
    doc.check_keys(KEYS, FORMAT)
    protocol_id = doc.text("protocol_id", required=True) or ""
    tasks_path, data = _dataset(doc, protocol, tasks, warn)
    functions = _metrics(doc, protocol, warn)
    runtime = _runtime(doc, image, warn)
    control, seed_arms = _control(doc, given, warn)
    _candidate(doc, given, warn)
    lines, where = _task_lines(tasks_path, functions, runtime.get("timeout_s"), warn)
    plan = Plan(
        command="seed000",
        sources=[
            (protocol, sha256_bytes(read_bytes(protocol, ""))),
            (tasks_path, sha256_bytes(data)),
        ],
        protocol_id=protocol_id,
        lines=lines,
        runtime=runtime,
        tools={"forbidden_paths": [".git/"]},
        seed_arms=seed_arms,
        control=control,
        python=_python(doc, warn),
    )
    check_lines(plan, where)
    return plan


def _dataset(doc: Fields, protocol: Path, tasks: Path | None, warn: Warn) -> tuple[Path, bytes]:
    dataset = doc.section("dataset", required=True)
    assert dataset is not None
    dataset.check_keys(("path", "sha256"), FORMAT)
    named = dataset.text("path")
    if tasks is None and named is None:
        raise dataset.fail("path", "missing; name the tasks file or pass it as TASKS")
    if tasks is not None:
        path = tasks  # the TASKS argument: the user's own choice
    else:
        path = inside(protocol.parent, str(named), file=protocol, field="dataset.path")
    data = read_bytes(path, "the protocol's dataset.path (relative to it) or the TASKS argument")
    check_digest(dataset, "sha256", data, path, warn, "write the file's digest")
    return path, data


def _metrics(doc: Fields, protocol: Path, warn: Warn) -> list[str]:
    metrics = doc.section("metrics", required=True)
    assert metrics is not None
    metrics.check_keys(("module", "functions"), FORMAT)
    functions = metrics.strings("functions")
    if not functions:
        raise metrics.fail("functions", "missing or empty; list the metric functions")
    for name in functions:
        if name not in BUILTIN:
            raise UsageError(
                f"{protocol}: metrics.functions: {name!r} cannot map: deltarun scores answers "
                f"only with its built-ins ({', '.join(BUILTIN)}) or a metrics module whose "
                "functions take (answer, task, wall_s) and return a bool, not the seed's "
                "(got, expect) -> float; port it (docs/seed-formats.md) or drop it"
            )
    module = metrics.text("module")
    if module is not None:
        warn(
            f"warning: {protocol}: metrics.module {module}: not executed; "
            f"{', '.join(functions)} are deltarun's built-in metrics of the same names, with "
            "the rules the seed gives them (docs/seed-formats.md)"
        )
    return list(dict.fromkeys(functions))


def _runtime(doc: Fields, image: str, warn: Warn) -> dict[str, Any]:
    runtime = doc.section("runtime")
    found: dict[str, Any] = {"repeats": 1, "max_retries": 0}
    if runtime is None:
        warn(f"warning: {doc.where}: runtime missing: deltarun's defaults (seed 0, 120 s)")
        return {**found, "network": "none", "image": image}
    runtime.check_keys(("python", "timeout_s", "seed"), FORMAT)
    seed = runtime.integer("seed")
    timeout_s = runtime.number("timeout_s", minimum=0)
    if seed is not None:
        found["seed"] = seed
    if timeout_s is not None:
        found["timeout_s"] = timeout_s
    return {**found, "network": "none", "image": image}


def _python(doc: Fields, warn: Warn) -> str | None:
    runtime = doc.section("runtime")
    raw = runtime.get("python") if runtime is not None else None
    if runtime is None or raw is None:
        warn(
            f"warning: {doc.where}: runtime.python missing: the image's Python is not checked "
            "or pinned (the seed calls this pin the one that breaks first)"
        )
        return None
    if isinstance(raw, float):
        raise runtime.fail(
            "python",
            f'the number {raw:g}; write the version quoted, like "3.11" (YAML reads '
            "an unquoted 3.10 as 3.1)",
        )
    version = runtime.text("python") or ""
    if not PYTHON_RE.match(version):
        raise runtime.fail("python", f'{version!r} is not a Python version; write it like "3.11"')
    return version


def _control(
    doc: Fields, given: Sequence[GivenArm], warn: Warn
) -> tuple[str, list[dict[str, Any]]]:
    control = doc.section("control", required=True)
    assert control is not None
    control.check_keys(("name", "kind"), FORMAT)
    raw = control.text("name", required=True) or ""
    name = arm_name(raw)
    if name != raw:
        warn(f"warning: {doc.where}: control.name {raw!r}: an arm name is {name!r}")
    kind = control.text("kind") or "scripted"
    if any(arm.name == name for arm in given):
        return name, []
    if kind != "scripted":
        raise UsageError(
            f"{doc.where}: control.kind {kind!r} cannot map by itself: deltarun builds only a "
            f"scripted control from the protocol; give the control's answers or program with "
            f"--arm {name}=DIR"
        )
    warn(
        f"warning: {doc.where}: control {name} (kind scripted): a scripted no-op, which answers "
        "nothing (every answer task a miss); to replay fixed answers give "
        f"--arm {name}=DIR of <task_id>.answer.json"
    )
    return name, [{"name": name, "agent": dict(NOOP)}]


def _candidate(doc: Fields, given: Sequence[GivenArm], warn: Warn) -> None:
    candidate = doc.section("candidate")
    if candidate is None:
        return
    candidate.check_keys(("name",), FORMAT)
    name = arm_name(candidate.text("name", required=True) or "")
    if not any(arm.name == name for arm in given):
        warn(
            f"warning: {doc.where}: candidate.name {name}: the protocol does not say how it "
            f"runs, so no arm is written for it; add --arm {name}=DIR (its "
            "<task_id>.answer.json files, or a program with --command)"
        )


def _task_lines(
    path: Path, functions: list[str], timeout_s: float | None, warn: Warn
) -> tuple[list[dict[str, Any]], list[str]]:
    lines: list[dict[str, Any]] = []
    where: list[str] = []
    inexact: list[str] = []
    for row in read_jsonl(path, "write one seed-000 task object per line"):
        row.check_keys(TASK_KEYS, "a seed-000 task line")
        lines.append(_task_line(row, functions, timeout_s))
        where.append(row.where)
        if _loose_equal(row.get("expect")):
            inexact.append(str(row.get("id")))
    if inexact and "exact_match" in functions:
        warn(
            f"warning: {path}: expect of {', '.join(inexact[:5])}: exact_match compares JSON "
            "text, so 3 and 3.0 differ, where the seed's == counts them equal"
        )
    return lines, where


def _task_line(row: Fields, functions: list[str], timeout_s: float | None) -> dict[str, Any]:
    if "expect" not in row.data:
        raise row.fail("expect", "missing; the answer task's oracle is required")
    deadline = row.number("deadline_s", minimum=0)
    if deadline is None and "within_deadline" in functions:
        raise row.fail("deadline_s", "missing; within_deadline needs each task's deadline")
    deadline = deadline if deadline is not None else (timeout_s or 120.0)
    line: dict[str, Any] = {
        "id": row.text("id", required=True),
        "kind": row.text("kind") or "ordinary",
        "prompt": row.text("prompt", required=True),
        "expect": row.get("expect"),
        "metrics": list(functions),
        "deadline_s": deadline,
        "tags": row.strings("tags") or [],
    }
    if timeout_s is not None and timeout_s < deadline:
        raise UsageError(
            f"{row.where}: deadline_s {deadline:g} is past runtime.timeout_s {timeout_s:g}, the "
            "hard kill: a late answer would be a timeout, not a within_deadline miss; lower "
            "deadline_s or raise runtime.timeout_s"
        )
    if timeout_s is not None and timeout_s != deadline:
        line["timeout_s"] = timeout_s
    schema = row.get("schema")
    if schema is not None:
        line["schema"] = schema
    elif "json_schema_ok" in functions:
        line["schema"] = _keys_schema(row)
    return line


def _keys_schema(row: Fields) -> dict[str, Any]:
    """The seed's json_schema_ok as a JSON Schema: an object holding every key of expect."""
    expect = row.get("expect")
    if not isinstance(expect, dict):
        raise UsageError(
            f"{row.where}: json_schema_ok cannot map: the seed checks the answer holds every "
            "key of expect, and this expect is not an object; give the line a 'schema' (a "
            "JSON Schema) or drop json_schema_ok"
        )
    return {"type": "object", "required": sorted(expect)}


def _loose_equal(value: Any) -> bool:
    """Whether ``value`` holds a float, which Python's == equals to an int and JSON not."""
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_loose_equal(v) for v in value.values())
    if isinstance(value, list):
        return any(_loose_equal(v) for v in value)
    return False
