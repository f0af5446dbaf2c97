"""Declared tests under unittest, on the real engine: the harness runs exactly the declared
tests plus its canaries through ``run_unittest.py``, each outcome reaches the root-owned
collector, and the verdict holds the pytest path's guarantees (``runner.grading.runners``).

The project here has no pytest anywhere in its tests: ``unittest.TestCase`` classes, one
test per class the fix makes pass, one that must keep passing, one that is not declared
and fails (it must not be run).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.helpers import ADD_FIXTURE, ADD_GOLD, make_suite, repo_task

pytestmark = pytest.mark.docker

UNIT_HIDDEN = {
    "tests/test_hidden.py": (
        "import unittest\n\nfrom calc import add\n\n\n"
        "class AddTests(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
        "    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n\n"
        "    def test_not_declared(self):\n        self.fail('never run: not declared')\n"
    ),
}
DECLARED = ["tests/test_hidden.py::AddTests::test_add", "tests/test_hidden.py::AddTests::test_zero"]
ARMS = [
    {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    {"name": "gold", "agent": {"type": "patch", "dir": "gold"}},
]


def unittest_task(task_id: str, **extra: Any) -> dict[str, Any]:
    task = {**repo_task(task_id), "hidden_tests": DECLARED, "test_runner": "unittest"}
    return {**task, **extra}


def suite(tmp_path: Path, tasks: list[dict[str, Any]], hidden: dict[str, Any]) -> Path:
    (tmp_path / "gold").mkdir(exist_ok=True)
    for task in tasks:
        (tmp_path / "gold" / f"{task['id']}.diff").write_text(ADD_GOLD)
    return make_suite(
        tmp_path,
        tasks,
        ARMS,
        fixtures={t["id"]: ADD_FIXTURE for t in tasks},
        hidden={t["id"]: hidden for t in tasks},
    )


def verdicts(tmp_path: Path, controls: Path) -> dict[str, tuple[str, str]]:
    result = run_cli("validate", str(controls), "-j", "2")
    document = json.loads((tmp_path / "suite" / "validation.json").read_text())
    found = {t["id"]: (t["verdict"], t["detail"]) for t in document["tasks"]}
    assert result.returncode in (0, 1), result.stderr
    return found


def trials(tmp_path: Path, controls: Path) -> dict[tuple[str, str], dict[str, Any]]:
    out = tmp_path / "run"
    result = run_cli("run", str(controls), "--out", str(out), "-j", "2")
    assert result.returncode == 0, result.stderr
    records = [json.loads(x) for x in (out / "trials.jsonl").read_text().splitlines()]
    return {(r["task_id"], r["arm"]): r for r in records}


def test_unittest_declared_tests_gold_passes_empty_misses(tmp_path: Path) -> None:
    controls = suite(tmp_path, [unittest_task("u1")], UNIT_HIDDEN)
    found = trials(tmp_path, controls)
    gold, ctrl = found[("u1", "gold")], found[("u1", "ctrl")]
    assert gold["outcome"] == "success", gold
    assert ctrl["outcome"] == "miss", ctrl
    # the undeclared failing test was not run; the harness ran its canaries
    assert "test_not_declared" not in gold["verify_log"], gold["verify_log"][-2000:]
    assert gold["verify_log"].splitlines()[-1].startswith("[deltarun] canaries: ")
    assert ctrl["reason"].startswith("1 test(s) failed"), ctrl


FORGE_RUN = """import unittest


def _run(self, result=None):
    result.startTest(self)
    result.addSuccess(self)
    result.stopTest(self)


unittest.TestCase.run = _run
"""
FORGE_STATUS = """import unittest


def _pass(self, test, err=None, *rest):
    return unittest.TestResult.addSuccess(self, test)


unittest.TestResult.addFailure = _pass
unittest.TextTestResult.addFailure = _pass
"""


def forging_patch(module: str) -> str:
    """The fix, and a module the package imports (so before any test runs) holding ``module``."""
    lines = module.splitlines()
    added = "".join(f"+{line}\n" for line in lines)
    return (
        ADD_GOLD.replace(
            "-    return a - b\n+    return a + b\n",
            "-    return a - b\n+    return a + b\n+\n+\n+from calc import forge  # noqa\n",
        ).replace("@@ -1,2 +1,2 @@", "@@ -1,2 +1,5 @@")
        + "diff --git a/calc/forge.py b/calc/forge.py\n"
        "new file mode 100644\n"
        "--- /dev/null\n"
        "+++ b/calc/forge.py\n"
        f"@@ -0,0 +1,{len(lines)} @@\n" + added
    )


def test_unittest_patches_that_rewrite_outcomes_never_pass(tmp_path: Path) -> None:
    """The fix plus a module that makes every test a success (``TestCase.run`` replaced):
    the must-fail canary passes too, and the verdict says the test process tampered. One
    that turns failures into successes in the result class: the harness's own record of
    the failing canary stands, and the status that disagrees with it is a miss."""
    tasks = [unittest_task("forge-run"), unittest_task("forge-status")]
    controls = suite(tmp_path, tasks, UNIT_HIDDEN)
    (tmp_path / "gold" / "forge-run.diff").write_text(forging_patch(FORGE_RUN))
    (tmp_path / "gold" / "forge-status.diff").write_text(forging_patch(FORGE_STATUS))
    found = trials(tmp_path, controls)
    run = found[("forge-run", "gold")]
    assert run["outcome"] == "miss", run
    assert "tampered: a test that must fail passed" in (run["reason"] or ""), run["reason"]
    status = found[("forge-status", "gold")]
    assert status["outcome"] == "miss", status
    assert "unittest exit status 0" in (status["reason"] or ""), status["reason"]


def test_a_failed_set_up_class_is_an_error_of_its_tests_only(tmp_path: Path) -> None:
    """unittest reports a failed ``setUpClass`` once, on a holder named after the class, and
    never runs the class's tests: the launcher reports each of them as an error, and no
    test of another class whose dotted name merely ends the same way."""
    hidden = {
        "tests/test_hidden.py": UNIT_HIDDEN["tests/test_hidden.py"]
        + (
            "\n\nclass BrokenAddTests(unittest.TestCase):\n"
            "    @classmethod\n    def setUpClass(cls):\n        raise RuntimeError('no fixture')\n\n"
            "    def test_add(self):\n        self.assertEqual(add(1, 1), 2)\n"
        )
    }
    declared = [*DECLARED, "tests/test_hidden.py::BrokenAddTests::test_add"]
    controls = suite(tmp_path, [unittest_task("u3", hidden_tests=declared)], hidden)
    gold = trials(tmp_path, controls)[("u3", "gold")]
    assert gold["outcome"] == "miss", gold["reason"]
    assert gold["reason"] == (
        "1 test(s) failed or errored, first tests/test_hidden.py::BrokenAddTests::test_add"
    ), gold["reason"]
