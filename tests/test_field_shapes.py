"""SWE-bench's Django and sympy instances as the field ships them, end to end on the real
engine: imported with SWE-bench's own specs (``./tests/runtests.py ...``, ``bin/test -C
--verbose``), their environments built, validated (gold resolves, the fixture as it is
misses), then run with three predictions files as arms: ``empty`` (the control, every
instance a miss), ``fixed`` (the gold patches, every instance resolved) and ``bypass``
(code that reports every test passed without running it, through Django's
``TestCase.run`` or sympy's ``test_file``: tampering, a miss); the report's checklist row
"graded by declared tests" holds.

The dataset is ``tests.fieldshapes``: Django 4.2 and sympy 1.12 from their sdists, ids
as SWE-bench's parsers write them (``test_x (module.Class)``, a docstring's first line,
bare function names).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fieldshapes import DOCSTRING, SHAPES, build
from tests.realprojects.build import diff_after, git

pytestmark = pytest.mark.docker

# Each bypasses the runner at import of the code under test and reports every test it
# meets as passed without running it: Django's TestCase.run replaced; sympy's test_file
# replaced as the launcher imports sympy's runner. The bug stays: only a forgery passes.
BYPASS = {
    "django/django": """
import unittest as _unittest


def _run(self, result=None):
    result.startTest(self)
    result.addSuccess(self)
    result.stopTest(self)


_unittest.TestCase.run = _run
""",
    "sympy/sympy": """
import importlib.abc as _abc
import importlib.util as _util
import sys as _sys


def _forged_test_file(self, filename, *args, **kwargs):
    reporter = self._reporter
    space = {"__file__": filename}
    with open(filename, encoding="utf8") as handle:
        exec(compile(handle.read(), filename, "exec"), space)
    tests = [v for k, v in space.items() if k.startswith("test_") and callable(v)]
    reporter.entering_filename(filename, len(tests))
    for test in tests:
        reporter.entering_test(test)
        reporter.test_pass()
    reporter.leaving_filename()


class _Hook(_abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "sympy.testing.runtests":
            return None
        _sys.meta_path.remove(self)
        spec = _util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.SymPyTests.test_file = _forged_test_file

        spec.loader.exec_module = exec_module
        return spec


_sys.meta_path.insert(0, _Hook())
""",
}


def predictions_file(path: Path, patches: dict[str, str]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"instance_id": i, "model_patch": p, "model_name_or_path": path.stem}) + "\n"
            for i, p in patches.items()
        )
    )
    return path


def bypass_patches(data: dict[str, Path], rows: list[dict[str, str]]) -> dict[str, str]:
    """Each instance's bypass, appended to the module the fix belongs in (bug kept)."""
    patches = {}
    for shape, row in zip(SHAPES, rows, strict=True):
        repo = data["repos"] / shape.project.dirname
        git(repo, "checkout", "-q", "--detach", row["base_commit"])
        source = (repo / shape.source).read_text(encoding="utf-8")
        edits = {shape.source: source + BYPASS[shape.project.repo]}
        patches[row["instance_id"]] = diff_after(repo, row["base_commit"], edits)
        git(repo, "checkout", "-q", "main")
    return patches


def test_django_and_sympy_instances_import_validate_and_publish(tmp_path: Path) -> None:
    data = build(tmp_path / "data")
    out = tmp_path / "suite"
    rows = [json.loads(line) for line in data["instances"].read_text().splitlines()]
    fixed = predictions_file(tmp_path / "fixed.jsonl", {r["instance_id"]: r["patch"] for r in rows})
    empty = predictions_file(tmp_path / "empty.jsonl", {r["instance_id"]: "" for r in rows})
    bypass = predictions_file(tmp_path / "bypass.jsonl", bypass_patches(data, rows))
    imported = run_cli(
        "import", "swebench", str(data["instances"]), "--repos", str(data["repos"]),
        "--out", str(out), "--specs", str(data["specs"]), "--predictions", f"empty={empty}",
        "--predictions", f"fixed={fixed}", "--predictions", f"bypass={bypass}",
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    tasks = {
        t["id"]: t
        for t in map(json.loads, (out / "suite" / "tasks.jsonl").read_text().splitlines())
    }
    django = tasks["django__django-90001"]
    assert django["test_runner"] == "django"
    assert django["runner_args"] == ["--settings=test_sqlite"]
    assert set(django["hidden_tests"]) == {
        "tests/utils_tests/test_text.py::TestUtilsText::test_capfirst_sentence",  # docstring id
        "tests/utils_tests/test_text.py::TestUtilsText::test_capfirst_word",
        "tests/utils_tests/test_text.py::TestUtilsText::test_normalize_newlines",
        "tests/utils_tests/test_text.py::TestUtilsText::test_wrap",
    }, DOCSTRING
    sympy = tasks["sympy__sympy-90002"]
    assert sympy["test_runner"] == "sympy" and sympy["runner_args"] == ["-C"]
    assert set(sympy["hidden_tests"]) == {
        f"sympy/utilities/tests/test_iterables.py::{name}"
        for name in ("test_rotate", "test_flatten", "test_group")
    }
    built = run_cli("build", str(out / "controls.yaml"))
    assert built.returncode == 0, built.stderr
    validated = run_cli("validate", str(out / "controls.yaml"), "-j", "2")
    document = json.loads((out / "suite" / "validation.json").read_text())
    verdicts = {t["id"]: (t["verdict"], t["detail"]) for t in document["tasks"]}
    assert validated.returncode == 0, (validated.stderr, verdicts)
    assert all(v == "valid" for v, _ in verdicts.values()), verdicts
    # A run of the gold predictions against the fixture as it is: every instance resolved by
    # the candidate, none by the control, and the row that makes the number publishable.
    ran = run_cli("run", str(out / "controls.yaml"), "--out", str(tmp_path / "run"), "-j", "2")
    assert ran.returncode == 0, ran.stderr
    records = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    found = {(r["task_id"], r["arm"]): r for r in records}
    outcomes = {key: r["outcome"] for key, r in found.items()}
    assert outcomes == {
        (task, arm): "success" if arm == "fixed" else "miss"
        for task in ("django__django-90001", "sympy__sympy-90002")
        for arm in ("empty", "fixed", "bypass")
    }, outcomes
    for task in ("django__django-90001", "sympy__sympy-90002"):
        forged = found[(task, "bypass")]
        assert "tampered: a test that must fail passed" in forged["reason"], forged["reason"]
        assert forged["tool_violation"], forged
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    rows_by_item = {row["item"]: row for row in report["checklist"]}
    assert rows_by_item["every repository task is graded by declared tests"]["ok"], rows_by_item
