"""The verify phase's commands, and where the harness's files go in its sandbox.

What ``runner.grading.verify`` runs, as ``ExecRequest``s: the test command or the
task's runner under the harness's environment (nothing of the agent's), the
collector that reads the results channel as root, and the git of the apply step.
``Place`` names the harness's directory (a fresh random name per sandbox) and what
the commands find there. Pure: building a request runs nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from runner.grading import runners
from runner.grading.verdict import CHANNEL_CAP
from runner.records import RepoTask
from runner.sandbox.base import AGENT_UID, ROOT_USER, WORKSPACE, ExecRequest
from runner.trees.declared import test_files

PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class VerifySettings:
    """The controls the verify phase uses."""

    timeout_s: float
    output_cap: int
    workspace_bytes: int
    # The image's installed pytest plugins (``runner.grading.image_facts``), loaded with -p.
    plugins: tuple[str, ...] = ()
    # The image's bytecode of what the harness's session and an install step import,
    # linked into the pycache prefix (``linked_bytecode``).
    bytecode: tuple[tuple[str, str], ...] = ()
    install_bytecode: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Place:
    """Where the harness's files go in one verify sandbox (a fresh random name each)."""

    harness: str  # .deltarun-<random>, at the workspace root
    suffix: str  # of the runner settings' copy: pytest reads it by its suffix
    roots: tuple[str, ...] = ()  # the project's package folders (runner.trees.layout)
    plugins: tuple[str, ...] = ()  # the image's pytest plugins' modules
    user_site: bool = False  # the task's install step put the project in the user site

    @property
    def home(self) -> str:
        return f"{WORKSPACE}/{self.harness}"

    @property
    def config(self) -> str:
        return f"{self.harness}{self.suffix}"

    @property
    def channel(self) -> str:
        return f"{self.home}/channel/results.sock"


def test_env(place: Place) -> dict[str, str]:
    """The test's environment: the harness's, nothing of the agent's. The user site only
    holds what the task's install step put there (the sandbox is fresh)."""
    env = {
        "HOME": "/home/agent",
        "PATH": PATH,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPYCACHEPREFIX": f"{place.home}/pycache",
        "PYTHONNOUSERSITE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    if place.user_site:
        del env["PYTHONNOUSERSITE"]
    return env


def fixed_args(place: Place) -> list[str]:
    """The harness's settings copy and root, and the image's plugins (autoloading is off:
    none can come from the workspace)."""
    plugins = [arg for module in place.plugins for arg in ("-p", module)]
    return [
        "-c", f"{WORKSPACE}/{place.config}", "--rootdir", WORKSPACE, "-p", "no:cacheprovider",
        *plugins,
    ]  # fmt: skip


def command_request(task: RepoTask, place: Place, settings: VerifySettings) -> ExecRequest:
    """The task's own ``hidden_test`` command, under the harness's environment and settings."""
    assert task.hidden_test is not None
    env = test_env(place) | {
        "PYTEST_ADDOPTS": " ".join(fixed_args(place)),
        "DELTARUN_HIDDEN_TEST": task.hidden_test,
    }
    if place.roots:
        env["PYTHONPATH"] = ":".join(place.roots)
    return ExecRequest(
        argv=["sh", "-c", 'exec sh -c "$DELTARUN_HIDDEN_TEST"'],
        env=env,
        timeout_s=settings.timeout_s,
        output_cap=settings.output_cap,
        untrusted=True,  # the code under test: runner.sandbox.blame
    )


def collector_request(place: Place, settings: VerifySettings) -> ExecRequest:
    """The collector, root: the one reader of the results channel (``collector.py``)."""
    return ExecRequest(
        argv=["python3", "-I", "-S", f"{place.home}/collector.py", place.channel, str(AGENT_UID)],
        user=ROOT_USER,
        env={"PATH": PATH, "LANG": "C.UTF-8"},
        timeout_s=settings.timeout_s + 60.0,
        output_cap=CHANNEL_CAP,
        separate_stderr=True,
        end_mark=True,  # the records are the verdict: a cut never passes for an outcome
    )


def _pytest_request(
    task: RepoTask, place: Place, settings: VerifySettings, select: Sequence[str]
) -> ExecRequest:
    """The harness's pytest on the declared tests and the canaries (``select``: one list).
    ``--maxfail=0`` undoes a project's ``-x``: a must-fail canary may come first."""
    assert task.hidden_tests is not None
    args = [*task.pytest_args, *fixed_args(place), "--maxfail=0"]
    spec = {
        "channel": place.channel,
        "rootdir": WORKSPACE,
        "paths": list(place.roots),
        "user_site": place.user_site,
        "select": list(select),
        "args": ["-q", *args, *test_files(task.hidden_tests)],
    }
    # The sweep runs in the same exec, right after pytest: no process of the test's uid is
    # left to hold the channel open when the collector's account is read.
    return _launch("run_pytest.py", spec, place, settings)


def runner_request(
    task: RepoTask, place: Place, settings: VerifySettings, select: Sequence[str]
) -> ExecRequest:
    """The declared tests under the task's runner (``runner.grading.runners``)."""
    if task.test_runner == "pytest":
        return _pytest_request(task, place, settings, select)
    spec = runners.spec(
        task,
        select,
        channel=place.channel,
        rootdir=WORKSPACE,
        paths=place.roots,
        user_site=place.user_site,
    )
    return _launch(runners.launcher(task), spec, place, settings)


def _launch(
    launcher: str, spec: dict[str, object], place: Place, settings: VerifySettings
) -> ExecRequest:
    """A launcher on its spec, as the test's uid; then the sweep (``_pytest_request``)."""
    home = place.home
    return ExecRequest(
        argv=[
            "sh",
            "-c",
            f"python3 -B -s {home}/{launcher}; code=$?; "
            f"python3 -I -S {home}/guard.py sweep >/dev/null 2>&1; exit $code",
        ],
        env=test_env(place),
        timeout_s=settings.timeout_s,
        output_cap=settings.output_cap,
        stdin=json.dumps(spec).encode("utf-8"),
        untrusted=True,  # the code under test: runner.sandbox.blame
    )


def git_env(home: str) -> dict[str, str]:
    return {
        "GIT_DIR": f"{home}/git",
        "GIT_WORK_TREE": WORKSPACE,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "HOME": "/home/agent",
        "PATH": PATH,
    }
