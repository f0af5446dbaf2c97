"""What an import writes, and writing it: a deltarun suite beside its ``controls.yaml``.

::

    OUT/controls.yaml            the controls (a comment names the seed files read)
    OUT/suite/tasks.jsonl        one task line per seed task
    OUT/suite/fixtures/<id>.tar  repository tasks: the tree the agent gets
    OUT/suite/hidden/<id>.tar    repository tasks: the hidden test files
    OUT/arms/<name>/             each arm given with --arm, copied

Everything is written into a fresh folder beside ``OUT`` and sealed there; only a
sealed import becomes ``OUT`` (renamed), so a failed import writes nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runner.config.controls import Controls
from runner.config.loader import parse_controls
from runner.errors import UserError
from runner.paths import new_folder
from runner.seedkits.seed_arms import GivenArm, arm_list, copy_arms
from runner.suite.load import parse_task_line

SANDBOX_IMAGE = "deltarun/sandbox-python:bookworm"


@dataclass
class Plan:
    """An import, mapped and checked, before anything is written."""

    command: str  # "seed000" / "seed004"
    sources: list[tuple[Path, str]]  # each seed file read, with its SHA-256
    protocol_id: str
    lines: list[dict[str, Any]]
    runtime: dict[str, Any]
    tools: dict[str, Any]
    seed_arms: list[dict[str, Any]]
    control: str
    route: dict[str, Any] | None = None
    python: str | None = None  # the Python version the seed pins (seed 000's runtime.python)
    archives: dict[str, bytes] = field(default_factory=dict)  # suite-relative path -> tar


def check_lines(plan: Plan, where: Sequence[str]) -> None:
    """Every task line is one deltarun accepts (its error names the seed's line)."""
    seen: dict[str, str] = {}
    for line, source in zip(plan.lines, where, strict=True):
        task_id = str(line.get("id"))
        if task_id in seen:
            raise UserError(f"{source}: id {task_id!r} repeats {seen[task_id]}; ids are unique")
        seen[task_id] = source
        parse_task_line(json.dumps(line), f"{source} (as a deltarun task)")


def controls_document(plan: Plan, given: Sequence[GivenArm], control: str) -> dict[str, Any]:
    """The controls as a mapping, in the order ``deltarun schema controls`` lists them."""
    document: dict[str, Any] = {
        "protocol_id": plan.protocol_id,
        "channel": "exploratory",
        "suite": {"file": "suite/tasks.jsonl"},
        "runtime": plan.runtime,
        "tools": plan.tools,
    }
    if plan.route is not None:
        document["route"] = plan.route
    document["arms"] = arm_list(plan.seed_arms, given, control)
    return document


def checked_controls(document: dict[str, Any], source: str) -> Controls:
    """The document as deltarun reads it (one line naming the field when it is not)."""
    return parse_controls(yaml.safe_dump(document, sort_keys=False), source)


def controls_text(plan: Plan, document: dict[str, Any]) -> str:
    read = "\n".join(f"#   {path} (sha256 {digest})" for path, digest in plan.sources)
    header = (
        f"# Written by `deltarun import {plan.command}` from:\n{read}\n"
        "# How each seed field maps: docs/seed-formats.md. Channel exploratory: to publish,\n"
        "# validate the suite, seal, then set channel: scored (it refuses what is not pinned).\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def check_out(out: Path) -> None:
    """``out`` is new or an empty folder (checked first, and again before writing)."""
    new_folder(out)


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A fresh folder beside ``out`` that becomes ``out`` when the block ends without an
    error, and is removed otherwise."""
    check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.part-"))
    try:
        yield work
        check_out(out)  # again: nothing took its place meanwhile
        if out.exists():
            out.rmdir()
        os.replace(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def write_plan(plan: Plan, document: dict[str, Any], given: Sequence[GivenArm], work: Path) -> Path:
    """The suite, the arms and the controls into ``work``; the controls' path."""
    suite = work / "suite"
    suite.mkdir()
    for relative, data in sorted(plan.archives.items()):
        path = suite / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (suite / "tasks.jsonl").write_text(
        "".join(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n" for line in plan.lines),
        encoding="utf-8",
    )
    copy_arms(given, work)
    controls = work / "controls.yaml"
    controls.write_text(controls_text(plan, document), encoding="utf-8")
    return controls


def summary(plan: Plan, document: dict[str, Any], out: Path, say: Callable[[str], None]) -> None:
    control = next(str(arm["name"]) for arm in document["arms"] if arm.get("control"))
    others = [str(arm["name"]) for arm in document["arms"] if not arm.get("control")]
    more = f", other arms {', '.join(others)}" if others else ", no other arm"
    say(f"wrote {out}: {len(plan.lines)} tasks; control arm {control}{more}")
