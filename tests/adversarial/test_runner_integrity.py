"""Verdict integrity under the runners other than pytest (issue 38): the attack classes of
``test_verdict_integrity.py`` against ``unittest`` and ``django`` (a project whose own
``tests/runtests.py`` drives unittest, as Django's does), each with variants aimed at that
runner. Sympy's runner has its own rows in ``test_runner_integrity_sympy.py``.

One task per runner: the hidden ``tests/test_hidden.py`` declares
``HiddenTests.test_add`` (FAIL_TO_PASS), the fixture's own ``tests/test_other.py``
declares ``OtherTests.test_sub`` (PASS_TO_PASS). Every hostile agent leaves the bug in
``calc.add`` (some break ``calc.sub`` too), so every honest verdict is a miss; an attack
holds only if its trial is still a miss. Classes:

1. a hidden test module shadowed (a package beside it, a module at another import root);
2. forged records on the results channel (at exit, before collection ends);
3. code in the test process rewriting outcomes (``TestCase.run`` replaced, the result
   class patched, the runner's ``run`` replaced, the launcher's session rewritten):
   caught by the canaries, by the status that disagrees, or by the records missing;
4. the declared fixture test or the project's own runner (``runtests.py``) edited.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome, Trial
from tests.adversarial.support import write_files
from tests.helpers import PY_IMAGE, make_suite, write_agent
from tests.test_trial_docker import run_one

pytestmark = pytest.mark.docker

CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
OTHER = (
    "import unittest\n\nfrom calc import sub\n\n\n"
    "class OtherTests(unittest.TestCase):\n"
    "    def test_sub(self):\n        self.assertEqual(sub(5, 3), 2)\n"
)
HIDDEN = (
    "import unittest\n\nfrom calc import add\n\n\n"
    "class HiddenTests(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)
# What Django's runner does, in a few lines: its options, labels relative to tests/,
# unittest's TextTestRunner, exit status from the result.
RUNTESTS = """import argparse
import sys
import unittest

parser = argparse.ArgumentParser()
parser.add_argument("labels", nargs="*")
parser.add_argument("--verbosity", type=int, default=1)
parser.add_argument("--parallel", default="1")
parser.add_argument("--settings")
parser.add_argument("--noinput", action="store_true")
options = parser.parse_args()
__import__(options.settings or "test_sqlite")
suite = unittest.defaultTestLoader.loadTestsFromNames(options.labels)
result = unittest.TextTestRunner(verbosity=options.verbosity).run(suite)
sys.exit(bool(result.failures or result.errors))
"""
FIXTURES = {
    "unittest": {
        "calc/__init__.py": CALC,
        "tests/__init__.py": "",
        "tests/test_other.py": OTHER,
        "README.md": "calc\n",
    },
    "django": {
        "calc/__init__.py": CALC,
        "tests/test_other.py": OTHER,
        "tests/runtests.py": RUNTESTS,
        "tests/test_sqlite.py": "SETTINGS = 1\n",
        "README.md": "calc\n",
    },
}
DECLARED = [
    "tests/test_hidden.py::HiddenTests::test_add",
    "tests/test_other.py::OtherTests::test_sub",
]
FIX = "sed -i '0,/a - b/s//a + b/' calc/__init__.py\n"
BREAK_SUB = "sed -i '$s/a - b/0/' calc/__init__.py\n"


def appended(code: str) -> str:
    """An agent script that appends ``code`` to the module under test (imported by both
    test modules while the runner loads them)."""
    return f"cat >> calc/__init__.py <<'DELTARUN_EOF'\n{code}\nDELTARUN_EOF\n"


FAKE_TESTS = (
    "import unittest\n\n\nclass HiddenTests(unittest.TestCase):\n"
    "    def test_add(self):\n        pass\n"
)
FORGE = (
    r"""
import json, os, socket
def _send(records):
    for fd in range(3, 256):
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if s.family == socket.AF_UNIX:
                for r in records:
                    s.sendall(("\n" + json.dumps(r) + "\n").encode())
        except OSError:
            pass
        finally:
            s.close()
def _passing():
    return [{"t": "report", "n": n, "w": "call", "o": "passed"} for n in DECLARED]
DECLARED = """
    + repr(DECLARED)
    + "\n"
)

ATTACKS: dict[str, tuple[str, str]] = {
    "shadow: a package beside the hidden module": (
        "tests/test_hidden/__init__.py with a passing HiddenTests",
        write_files(("tests/test_hidden/__init__.py", FAKE_TESTS)),
    ),
    "shadow: a module at the repository root": (
        "test_hidden.py at the root, ahead on the import path",
        write_files(("test_hidden.py", FAKE_TESTS)),
    ),
    "results: forged at exit": (
        "an atexit handler sends passing reports and finish, exits 0",
        appended(
            FORGE + "import atexit\natexit.register(lambda: (_send(_passing() + "
            '[{"t": "finish", "status": 0}]), os._exit(0)))'
        ),
    ),
    "results: forged before collection ends": (
        "at import: a 'collected' of the declared tests, passing reports, finish, exit 0",
        appended(
            FORGE
            + '_send([{"t": "collected", "items": DECLARED, "modules": {}}] + _passing() + '
            + '[{"t": "finish", "status": 0}])\nos._exit(0)'
        ),
    ),
    "canary: TestCase.run replaced": (
        "at import: every test reports success without running",
        appended(
            "import unittest\n"
            "def _run(self, result=None):\n"
            "    result.startTest(self)\n    result.addSuccess(self)\n    result.stopTest(self)\n"
            "unittest.TestCase.run = _run"
        ),
    ),
    "canary: the result class patched": (
        "at import: addFailure and addError of unittest's result classes record a success",
        appended(
            "import unittest\n"
            "def _ok(self, test, err=None):\n"
            "    return unittest.TestResult.addSuccess(self, test)\n"
            "for _c in (unittest.TestResult, unittest.TextTestResult):\n"
            "    _c.addFailure = _ok\n    _c.addError = _ok"
        ),
    ),
    "canary: the runner's run replaced": (
        "at import: TextTestRunner.run returns an empty successful result",
        appended(
            "import unittest\n"
            "unittest.TextTestRunner.run = lambda self, test: unittest.TestResult()"
        ),
    ),
    "canary: the launcher's session rewritten": (
        "at import: the launcher's session object found by gc, every outcome noted passed",
        appended(
            "import gc\n"
            "for _o in gc.get_objects():\n"
            "    if type(_o).__name__ == 'Session' and hasattr(_o, 'note'):\n"
            "        _o.note = lambda test, outcome, _n=_o.note: _n(test, 'passed')"
        ),
    ),
    "declared: the fixture's test edited": (
        "fix add(); neuter tests/test_other.py and break sub()",
        FIX
        + write_files(
            ("tests/test_other.py", OTHER.replace("self.assertEqual(sub(5, 3), 2)", "pass"))
        )
        + BREAK_SUB,
    ),
    "declared: the project's runner edited": (
        "fix add(); break sub(); tests/runtests.py exits 0 without running anything",
        FIX + BREAK_SUB + write_files(("tests/runtests.py", "raise SystemExit(0)\n")),
    ),
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runner-integrity")
    arms: list[dict[str, Any]] = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        {"name": "fixer", "agent": write_agent(root, "fixer", FIX)},
    ]
    arms += [
        {"name": f"a{i}", "agent": write_agent(root, f"a{i}", script)}
        for i, (_, script) in enumerate(ATTACKS.values())
    ]
    tasks = [
        {
            "id": runner,
            "kind": "ordinary",
            "prompt": "Fix add().",
            "repo": f"fixtures/{runner}.tar",
            "hidden": f"hidden/{runner}.tar",
            "hidden_tests": DECLARED,
            "test_runner": runner,
            "image": PY_IMAGE,
            "timeout_s": 60,
            **({"runner_args": ["--settings=test_sqlite"]} if runner == "django" else {}),
        }
        for runner in FIXTURES
    ]
    return make_suite(
        root,
        tasks,
        arms,
        fixtures=FIXTURES,
        hidden={runner: {"tests/test_hidden.py": HIDDEN} for runner in FIXTURES},
    )


@pytest.mark.parametrize("runner", list(FIXTURES))
def test_an_honest_fix_passes_and_no_fix_misses(runner: str, suite: Path, docker_api: Any) -> None:
    trial = run_one(docker_api, suite, runner, "fixer")
    assert trial.outcome is Outcome.SUCCESS, (trial.reason, trial.verify_log[-1500:])
    assert trial.verify_exit_code == 0 and not trial.tool_violation
    control = run_one(docker_api, suite, runner, "ctrl")
    assert control.outcome is Outcome.MISS, (control.reason, control.verify_log[-1500:])
    assert "HiddenTests::test_add" in (control.reason or ""), control.reason


def _row(runner: str, attack: str, trial: Trial) -> str:
    assert trial.outcome is Outcome.MISS, (trial.outcome, trial.reason, trial.verify_log[-1500:])
    assert trial.error is None and trial.reason
    return f"{runner}: {trial.outcome.value}: {trial.reason}"


@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.parametrize("runner", list(FIXTURES))
def test_an_attack_on_the_runner_is_a_miss(
    runner: str, attack: str, suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    trial = run_one(docker_api, suite, runner, f"a{list(ATTACKS).index(attack)}")
    held(f"{runner}: {attack}", ATTACKS[attack][0], _row(runner, attack, trial))
    # (The launchers end with os._exit: a handler registered at exit never runs.)
    if attack.startswith(("results: forged before", "canary: TestCase")):
        assert "tampered" in (trial.reason or "") and trial.tool_violation, trial.reason
    if attack.startswith("shadow:") and "package" in attack:
        assert trial.tool_violation, trial.dropped
