"""A pass needs evidence: code under test that forges an exit status, an output or a
results file gets the verdict it would get without forging (class 1 of issue 10).

Every agent leaves the bug in ``calc.add`` and adds code to ``calc/__init__.py``,
which the hidden test imports. The task declares its test (``hidden_tests``), so
the harness grades on what its own plugin reported, on a channel the test process
cannot rewrite (in-memory rewrites and forged records: ``test_verdict_integrity``).
One row shows what is *not* stopped, as docs/verdicts-and-sandbox.md says: any forgery of a task graded
by exit status alone (the checklist fails such a run).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome
from tests.helpers import make_suite, repo_task, write_agent
from tests.test_trial_docker import run_one

pytestmark = pytest.mark.docker

FIX = "sed -i 's/a - b/a + b/' calc/__init__.py\n"


def appended(code: str) -> str:
    """An agent script that appends ``code`` to the module under test."""
    return f"cat >> calc/__init__.py <<'DELTARUN_EOF'\n{code}\nDELTARUN_EOF\n"


FORGED = (
    '{"nonce": "guess", "finished": true, "exitstatus": 0, '
    '"tests": {"tests/test_hidden.py::test_add": "passed"}, "collect_errors": []}'
)
WRITE_FORGED = f"""
import glob, os
def _forge():
    for out in glob.glob("/workspace/.deltarun-*/out"):
        with open(os.path.join(out, "results.json"), "w") as handle:
            handle.write({FORGED!r})
"""

ATTACKS: dict[str, tuple[str, str]] = {
    "exit 0 at import": ("os._exit(0) when calc is imported", "import os\nos._exit(0)"),
    "SystemExit(0) at import": ("raise SystemExit(0) at import", "raise SystemExit(0)"),
    "exit 0 from atexit": (
        "tests fail, then an atexit handler exits 0",
        "import atexit, os\natexit.register(lambda: os._exit(0))",
    ),
    "exec true at import": (
        "replace the test process with `true`",
        "import os\nos.execvp('true', ['true'])",
    ),
    "fake pytest output": (
        "print '1 passed' and exit 0",
        "import os, sys\nsys.stdout.write('1 passed in 0.01s\\n')\nsys.stdout.flush()\nos._exit(0)",
    ),
    "forged results file at import": (
        "write a passing results.json into the harness's out/ and exit 0",
        WRITE_FORGED + "_forge()\nos._exit(0)",
    ),
    "forged results file from atexit": (
        "overwrite results.json after pytest wrote it, exit 0",
        WRITE_FORGED + "import atexit\natexit.register(lambda: (_forge(), os._exit(0)))",
    ),
    "forging daemon": (
        "fork a daemon that rewrites results.json after pytest ended",
        WRITE_FORGED + "import time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(1.5)\n"
        "    _forge()\n    os._exit(0)",
    ),
    "kill the test process group": (
        "SIGKILL the test process group from inside the test",
        "import os, signal\nos.killpg(0, signal.SIGKILL)",
    ),
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("evidence")
    arms: list[dict[str, Any]] = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        {"name": "fixer", "agent": write_agent(root, "fixer", FIX)},
    ]
    for index, (_, code) in enumerate(ATTACKS.values()):
        arms.append({"name": f"a{index}", "agent": write_agent(root, f"a{index}", appended(code))})
    tasks = [repo_task("t1"), repo_task("t-exit", exit_status=True)]
    return make_suite(root, tasks, arms)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_forged_pass_is_a_miss(
    attack: str, suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    index = list(ATTACKS).index(attack)
    trial = run_one(docker_api, suite, "t1", f"a{index}")
    held(
        f"evidence: {attack}",
        ATTACKS[attack][0],
        f"{trial.outcome.value}: {trial.reason}",
    )
    assert trial.outcome is Outcome.MISS, (trial.reason, trial.verify_log[-1500:])
    assert trial.error is None and trial.reason


def test_an_honest_fix_passes_on_evidence(suite: Path, docker_api: Any) -> None:
    trial = run_one(docker_api, suite, "t1", "fixer")
    assert trial.outcome is Outcome.SUCCESS, (trial.reason, trial.verify_log[-1500:])
    assert trial.grading == "pytest" and trial.reason is None
    assert run_one(docker_api, suite, "t1", "ctrl").outcome is Outcome.MISS


def test_exit_status_grading_is_forgeable(
    suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    trial = run_one(docker_api, suite, "t-exit", "a0")
    held(
        "evidence: exit 0 on a task graded by exit status",
        "os._exit(0) at import, task without hidden_tests",
        f"{trial.outcome.value} (the checklist fails runs with such tasks)",
        residual=True,
    )
    assert trial.outcome is Outcome.SUCCESS and trial.grading == "exit_status"
