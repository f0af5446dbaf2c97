"""An agent that tampers with grading gets the verdict it would get without tampering.

Each case is a `command` agent that leaves the bug in place and tries to make the
hidden test pass anyway; the trial must end as the untampered agent's `miss`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome
from tests.adversarial.support import write_files
from tests.helpers import make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

pytestmark = pytest.mark.docker

FORCE_PASS = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
"""

CASES = {
    "conftest-root": [("conftest.py", FORCE_PASS)],
    "conftest-tests": [("tests/conftest.py", FORCE_PASS)],
    "pytest-ini-collect-only": [("pytest.ini", "[pytest]\naddopts = --collect-only -q\n")],
    "setup-cfg-collect-only": [("setup.cfg", "[tool:pytest]\naddopts = --collect-only\n")],
    "tox-ini-collect-only": [("tox.ini", "[pytest]\naddopts = --collect-only\n")],
    "shadow-pytest-module": [("pytest.py", "import sys\nprint('1 passed')\nsys.exit(0)\n")],
    "shadow-pytest-package": [
        ("pytest/__init__.py", ""),
        ("pytest/__main__.py", "raise SystemExit(0)\n"),
    ],
    "sitecustomize": [("sitecustomize.py", "import os\nos._exit(0)\n")],
    "overwrite-hidden-test": [("tests/test_hidden.py", "def test_add():\n    pass\n")],
    "fake-passed-output": [("calc/report.txt", "===== 1 passed in 0.01s =====\nPASSED\n")],
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tamper")
    arms: list[dict[str, Any]] = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    ]
    for name, files in CASES.items():
        arms.append({"name": name, "agent": write_agent(root, name, write_files(*files))})
    fix = "sed -i 's/a - b/a + b/' calc/__init__.py\n"
    arms.append(
        {
            "name": "fix-and-conftest",
            "agent": write_agent(
                root, "fix-and-conftest", fix + write_files(*CASES["conftest-root"])
            ),
        }
    )
    return make_suite(root, [repo_task("t1")], arms)


@pytest.mark.parametrize("case", sorted(CASES))
def test_tampering_does_not_change_the_verdict(
    case: str, suite: Path, docker_api: Any, held: Callable[[str, str, str], None]
) -> None:
    baseline = run_one(docker_api, suite, "t1", "ctrl")
    tampered = run_one(docker_api, suite, "t1", case)
    held(
        f"grading: {case}",
        ", ".join(path for path, _ in CASES[case]),
        f"verdict {tampered.outcome.value} (untampered: {baseline.outcome.value}), "
        f"tool_violation={tampered.tool_violation}",
    )
    assert baseline.outcome is Outcome.MISS
    assert tampered.outcome is baseline.outcome, (
        tampered.verify_log[-2000:],
        tampered.patch[:2000],
    )
    assert tampered.patch, "the agent's tampering must be in the stored patch, as evidence"


def test_runner_steering_files_count_as_tool_violations(suite: Path, docker_api: Any) -> None:
    assert run_one(docker_api, suite, "t1", "conftest-root").tool_violation
    assert run_one(docker_api, suite, "t1", "pytest-ini-collect-only").tool_violation
    assert not run_one(docker_api, suite, "t1", "fake-passed-output").tool_violation


def test_a_real_fix_still_passes_next_to_a_dropped_conftest(suite: Path, docker_api: Any) -> None:
    trial = run_one(docker_api, suite, "t1", "fix-and-conftest")
    assert trial.outcome is Outcome.SUCCESS and trial.tool_violation
