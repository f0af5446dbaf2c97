"""SWE-bench instances: the JSON Lines / JSON array files and the task-directory layout.

An instance names a repository (``owner/name``), the commit the agent starts from
(``base_commit``), the gold ``patch``, the ``test_patch`` that adds or changes the
tests, the ``problem_statement`` and the tests that decide it: ``FAIL_TO_PASS``
(must pass after the fix) and ``PASS_TO_PASS`` (must keep passing). Both lists
are JSON-encoded strings in the published datasets and lists elsewhere; both
forms are read. Bad input is a ``UserError`` naming the file, the line and the
field. Pure: the callers read the files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.errors import UserError
from runner.models import TASK_ID_RE
from runner.swebench.rows import json_rows

REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
COMMIT_RE = re.compile(r"^[0-9a-f]{7,64}$")
REQUIRED = ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement")


@dataclass(frozen=True)
class Instance:
    """One SWE-bench instance, as deltarun uses it."""

    instance_id: str
    repo: str  # owner/name
    base_commit: str
    patch: str  # the gold patch
    test_patch: str
    problem_statement: str
    hints_text: str
    version: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    dockerfile: str | None = None  # the task-directory layout's own Dockerfile

    @property
    def tests(self) -> tuple[str, ...]:
        """Every test that must pass for the instance to be resolved, once each, in order."""
        return tuple(dict.fromkeys(self.fail_to_pass + self.pass_to_pass))


def parse_instances(text: str, source: str) -> list[Instance]:
    """The instances of a JSON Lines file, a JSON array or an ``{id: row}`` object; ids must
    be unique."""
    rows = json_rows(text, source, "instance")
    if not rows:
        raise UserError(f"{source}: no instances")
    found: list[Instance] = []
    seen: dict[str, str] = {}
    for where, row in rows:
        instance = instance_of(row, where)
        if instance.instance_id in seen:
            raise UserError(
                f"{where}: instance_id {instance.instance_id!r} repeats "
                f"{seen[instance.instance_id]}; ids must be unique"
            )
        seen[instance.instance_id] = where
        found.append(instance)
    return found


def instance_of(row: Any, where: str, dockerfile: str | None = None) -> Instance:
    """One instance from its fields (``where`` names it in errors)."""
    if not isinstance(row, Mapping):
        raise UserError(f"{where}: an instance must be a JSON object")
    for name in REQUIRED:
        if not isinstance(row.get(name), str):
            raise UserError(f"{where}: field {name!r} is missing or not a string")
    instance_id = row["instance_id"]
    if not TASK_ID_RE.match(instance_id):
        raise UserError(
            f"{where}: instance_id {instance_id!r} is not usable as a task id "
            "(1-128 of letters, digits, '.', '_' or '-')"
        )
    if not REPO_RE.match(row["repo"]):
        raise UserError(f"{where}: repo {row['repo']!r} must be owner/name")
    if not COMMIT_RE.match(row["base_commit"]):
        raise UserError(f"{where}: base_commit {row['base_commit']!r} is not a commit id")
    fail_to_pass = _tests(row.get("FAIL_TO_PASS"), f"{where}: FAIL_TO_PASS")
    if not fail_to_pass:
        raise UserError(
            f"{where}: FAIL_TO_PASS is empty; an instance needs a test that the fix makes pass"
        )
    return Instance(
        instance_id=instance_id,
        repo=row["repo"],
        base_commit=row["base_commit"],
        patch=row["patch"],
        test_patch=row["test_patch"],
        problem_statement=row["problem_statement"],
        hints_text=str(row.get("hints_text") or ""),
        version=str(row.get("version") or ""),
        fail_to_pass=fail_to_pass,
        pass_to_pass=_tests(row.get("PASS_TO_PASS"), f"{where}: PASS_TO_PASS"),
        dockerfile=dockerfile,
    )


def _tests(value: Any, where: str) -> tuple[str, ...]:
    """A test list: a list of strings, or a string holding a JSON list of strings."""
    if value is None:
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where}: not a JSON list of test ids ({exc.msg})") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise UserError(f"{where}: must be a list of test ids (strings)")
    for test in value:
        if test.startswith(("-", "/")) or "\n" in test:
            raise UserError(f"{where}: {test!r} is not a test id like tests/test_x.py::test_y")
        path = test.split("::", 1)[0]
        if not (path.endswith(".py") or "::" in test):
            raise UserError(
                f"{where}: {test!r} is not a pytest test id (path/to/test_x.py::test_y); only "
                "pytest-based repositories can be imported so far"
            )
    return tuple(value)
