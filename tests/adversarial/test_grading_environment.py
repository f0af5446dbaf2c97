"""The grading environment is the harness's (class 2 of issue 10): runner settings,
import path, plugins, bytecode and the files beside the hidden tests.

Every agent leaves the bug in ``calc.add`` and tries to make the hidden test pass
by steering the runner or the interpreter; the verdict must stay the untampered
``miss``. Dropped changes count as tool violations; edits to files that merely
*also* carry runner settings (``pyproject.toml``, ``setup.cfg``) are the
project's and are not violations, but their runner settings are not used.
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

FORCE_PASS = """import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
"""
PASS_EVERYTHING = "import os\nos._exit(0)\n"


# The module under test, compiled from the *fixed* source, stamped for the buggy one.
PLANT_PYC = """python3 - <<'PY'
import importlib._bootstrap_external as ext, importlib.util, os
buggy = open("calc/__init__.py", "rb").read()
code = compile(buggy.replace(b"a - b", b"a + b"), "calc/__init__.py", "exec")
os.makedirs("calc/__pycache__", exist_ok=True)
tag = __import__("sys").implementation.cache_tag
with open(f"calc/__pycache__/__init__.{tag}.pyc", "wb") as out:
    out.write(ext._code_to_timestamp_pyc(code, 0, len(buggy)))
with open("calc/__init__.pyc", "wb") as out:
    out.write(ext._code_to_hash_pyc(code, importlib.util.source_hash(buggy), checked=False))
PY
"""
DIST_INFO = write_files(
    ("calc/evil.py", FORCE_PASS),
    ("evil-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n"),
    ("evil-1.0.dist-info/entry_points.txt", "[pytest11]\nevil = calc.evil\n"),
)
ATTACKS: dict[str, tuple[str, str, bool]] = {
    # name: (what was tried, agent script, counted as a tool violation)
    "nested conftest": (
        "calc/conftest.py and tests/sub/conftest.py forcing passes",
        write_files(("calc/conftest.py", FORCE_PASS), ("tests/sub/conftest.py", FORCE_PASS)),
        True,
    ),
    "pyproject addopts": (
        "pyproject.toml [tool.pytest.ini_options] addopts = --collect-only",
        write_files(("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "--collect-only"\n')),
        False,
    ),
    "pyproject plugin": (
        "pyproject.toml loads calc.evil (-p) which forces passes",
        write_files(
            ("calc/evil.py", FORCE_PASS),
            ("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p calc.evil"\n'),
        ),
        False,
    ),
    "dot pytest.ini": (
        ".pytest.ini with addopts = --co",
        write_files((".pytest.ini", "[pytest]\naddopts = --co\n")),
        True,
    ),
    "entry-point plugin": (
        "evil.dist-info declaring a pytest11 entry point",
        DIST_INFO,
        True,
    ),
    "pth hook": (
        "evil.pth and calc.egg-info importing a pass-forcing module",
        write_files(
            ("evil.pth", "import os; os._exit(0)\n"),
            ("calc.egg-info/entry_points.txt", "[pytest11]\nevil = calc.evil\n"),
        ),
        True,
    ),
    "shadow pluggy": ("pluggy.py at the root", write_files(("pluggy.py", PASS_EVERYTHING)), True),
    "shadow _pytest": (
        "_pytest/__init__.py at the root",
        write_files(("_pytest/__init__.py", PASS_EVERYTHING)),
        True,
    ),
    "shadow usercustomize": (
        "usercustomize.py and sitecustomize.py",
        write_files(("usercustomize.py", PASS_EVERYTHING), ("sitecustomize.py", PASS_EVERYTHING)),
        True,
    ),
    "shadow by symlink": (
        "a symlink named pytest to a fake package",
        write_files(("fake/__init__.py", PASS_EVERYTHING)) + "ln -s fake pytest\n",
        True,
    ),
    "shadow extension module": (
        "_pytest.cpython-311-x86_64-linux-gnu.so (junk bytes)",
        "head -c 4096 /dev/urandom > _pytest.cpython-311-x86_64-linux-gnu.so\n",
        True,
    ),
    "shadow a stdlib module": (
        "inspect.py and tests/ without __init__ plus tests/typing.py",
        write_files(("inspect.py", PASS_EVERYTHING), ("tests/typing.py", PASS_EVERYTHING)),
        True,
    ),
    "planted bytecode": (
        "calc/__pycache__ pyc of the fixed source, stamped for the buggy one; unchecked-hash pyc",
        PLANT_PYC,
        True,
    ),
    "init beside the hidden tests": (
        "tests/__init__.py rewrites tests/test_hidden.py before it is read",
        write_files(
            (
                "tests/__init__.py",
                "open(__file__.replace('__init__.py', 'test_hidden.py'), 'w')"
                ".write('def test_add():\\n    pass\\n')\n",
            )
        ),
        True,
    ),
}
# Code under test that rewrites a hidden test collected after it, at run time.
REWRITE_LATER = """
import os, shutil
for attempt in (
    lambda: open("/workspace/tests/test_b.py", "w").write("def test_add():\\n    pass\\n"),
    lambda: os.rename("/workspace/tests", "/workspace/tests_old"),
    lambda: os.unlink("/workspace/tests/test_b.py"),
    lambda: shutil.rmtree("/workspace/tests"),
):
    try:
        attempt()
    except OSError:
        pass
if not os.path.exists("/workspace/tests/test_b.py"):
    os.makedirs("/workspace/tests", exist_ok=True)
    open("/workspace/tests/test_b.py", "w").write("def test_add():\\n    pass\\n")
"""
TWO_HIDDEN = {
    "tests/test_a.py": "import calc\n\n\ndef test_imports():\n    assert calc\n",
    "tests/test_b.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("environment")
    arms: list[dict[str, Any]] = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
    ]
    for index, (_, script, _) in enumerate(ATTACKS.values()):
        arms.append({"name": f"e{index}", "agent": write_agent(root, f"e{index}", script)})
    rewrite = f"cat >> calc/__init__.py <<'DELTARUN_EOF'\n{REWRITE_LATER}\nDELTARUN_EOF\n"
    arms.append({"name": "rewrite", "agent": write_agent(root, "rewrite", rewrite)})
    fix = "sed -i 's/a - b/a + b/' calc/__init__.py\n"
    arms.append({"name": "fix-and-plugin", "agent": write_agent(root, "fp", fix + DIST_INFO)})
    two = repo_task("t2")
    two["hidden_tests"] = ["tests/test_a.py", "tests/test_b.py"]
    tasks = [repo_task("t1"), repo_task("t-exit", exit_status=True), two]
    return make_suite(root, tasks, arms, hidden={"t2": TWO_HIDDEN})


@pytest.mark.parametrize("task", ["t1", "t-exit"])
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_steering_grading_does_not_change_the_verdict(
    attack: str, task: str, suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    index = list(ATTACKS).index(attack)
    tried, _, violation = ATTACKS[attack]
    trial = run_one(docker_api, suite, task, f"e{index}")
    held(
        f"environment: {attack} ({'declared tests' if task == 't1' else 'exit status'})",
        tried,
        f"{trial.outcome.value}, violation={trial.tool_violation}, dropped "
        f"{', '.join(trial.dropped) or 'nothing'}",
    )
    assert trial.outcome is Outcome.MISS, (trial.reason, trial.dropped, trial.verify_log[-1500:])
    assert trial.error is None
    assert trial.tool_violation is violation, trial.dropped


def test_code_under_test_cannot_rewrite_a_hidden_test_at_run_time(
    suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    trial = run_one(docker_api, suite, "t2", "rewrite")
    held(
        "environment: rewrite a hidden test at run time",
        "calc, imported by test_a, rewrites, unlinks or renames tests/test_b.py",
        f"{trial.outcome.value}: {trial.reason}",
    )
    assert trial.outcome is Outcome.MISS, (trial.reason, trial.verify_log[-1500:])
    assert "test_b.py::test_add" in (trial.reason or "")


def test_a_real_fix_passes_beside_a_dropped_plugin(suite: Path, docker_api: Any) -> None:
    trial = run_one(docker_api, suite, "t1", "fix-and-plugin")
    assert trial.outcome is Outcome.SUCCESS, (trial.reason, trial.verify_log[-1500:])
    assert trial.tool_violation
    assert any("dist-info" in d for d in trial.dropped)
