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

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.bounded_input import excerpt
from runner.bounded_json import BoundsError, loads_bounded
from runner.errors import UserError
from runner.records import TASK_ID_RE
from runner.swebench.rows import LINE_BOUNDS, json_rows

# Matched whole (``fullmatch``; ``\A``/``\Z``, never ``$``, which matches before a final
# newline): each value reaches paths, git's command line or a Dockerfile template.
REPO_RE = re.compile(r"\A(?!\.{1,2}/)[A-Za-z0-9_.-]+/(?!\.{1,2}\Z)[A-Za-z0-9_.-]+\Z")
COMMIT_RE = re.compile(r"\A[0-9a-f]{7,64}\Z")
VERSION_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._+-]{0,63}\Z")
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
    found: list[Instance] = []
    seen: dict[str, str] = {}
    for where, row in json_rows(text, source, "instance"):
        instance = instance_of(row, where)
        if instance.instance_id in seen:
            raise UserError(
                f"{where}: instance_id {instance.instance_id!r} repeats "
                f"{seen[instance.instance_id]}; ids must be unique"
            )
        seen[instance.instance_id] = where
        found.append(instance)
    if not found:
        raise UserError(f"{source}: no instances")
    return found


def instance_of(row: Any, where: str, dockerfile: str | None = None) -> Instance:
    """One instance from its fields (``where`` names it in errors)."""
    if not isinstance(row, Mapping):
        raise UserError(f"{where}: an instance must be a JSON object")
    for name in REQUIRED:
        if not isinstance(row.get(name), str):
            raise UserError(f"{where}: field {name!r} is missing or not a string")
    instance_id = row["instance_id"]
    if not TASK_ID_RE.fullmatch(instance_id):
        raise UserError(
            f"{where}: instance_id {excerpt(instance_id)} is not usable as a task id "
            "(1-128 of letters, digits, '.', '_' or '-')"
        )
    if not REPO_RE.fullmatch(row["repo"]):
        raise UserError(f"{where}: repo {excerpt(row['repo'])} must be owner/name")
    if not COMMIT_RE.fullmatch(row["base_commit"]):
        raise UserError(f"{where}: base_commit {excerpt(row['base_commit'])} is not a commit id")
    version = row.get("version")
    version = "" if version is None else version
    if isinstance(version, float | int) and not isinstance(version, bool):
        version = str(version)  # some datasets write 3.0 as a number
    if not isinstance(version, str) or (version and not VERSION_RE.fullmatch(version)):
        raise UserError(
            f"{where}: version {excerpt(version)} must be 1-64 of letters, digits, '.', '_', "
            "'+' or '-' (it names an environment and fills a Dockerfile template)"
        )
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
        version=version,
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
            value = loads_bounded(value.encode("utf-8", "surrogatepass"), LINE_BOUNDS)
        except BoundsError as exc:
            reason = str(exc).removeprefix("not JSON: ")
            raise UserError(f"{where}: not a JSON list of test ids ({reason})") from None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise UserError(f"{where}: must be a list of test ids (strings)")
    for test in value:
        if test.startswith(("-", "/")) or any(c in test for c in "\n\r\x00"):
            raise UserError(
                f"{where}: {excerpt(test)} is not a test id like tests/test_x.py::test_y"
            )
    return tuple(value)


def check_pytest_ids(ids: tuple[str, ...], where: str) -> None:
    """Ids of an instance graded by pytest must be pytest's (another runner's ids are
    read by ``runner.swebench.test_ids`` against the test patch's files)."""
    for test in ids:
        path = test.split("::", 1)[0]
        if not (path.endswith(".py") or "::" in test):
            raise UserError(
                f"{where}: {excerpt(test)} is not a pytest test id (path/to/test_x.py::test_y); "
                "give the repository's specs (--specs) with its test_cmd (Django's "
                "tests/runtests.py, sympy's bin/test, python -m unittest) for another runner"
            )
