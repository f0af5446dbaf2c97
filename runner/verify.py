"""Phase B, the verdict: the screened patch and the hidden tests in a fresh sandbox.

The agent never saw this sandbox, and nothing it left decides how grading runs:

1. Layer one, in the test's uid: the full fixture (unpacked by the image's tar as
   that uid, ``runner.workspace.unpack_as_agent``); root-owned: the harness's
   directory ``.deltarun-<random>/`` (an empty git directory whose attributes
   switch every workspace attribute off, the screened patch). ``/workspace``
   itself is root-owned and sticky.
2. ``git apply`` of the screened patch as the test's uid; a patch that does not
   apply is a miss with git's reason.
3. Layer two, root-owned: the hidden files over whatever is at their paths,
   every directory on their paths, the fixture's pristine ``__init__.py`` and
   ``conftest.py`` in those directories, the fixture's runner settings as a copy
   pytest reads with ``-c``, the pytest launcher and plugin. The test's uid can
   no longer change any of them, nor rename a directory they are in.
4. The test: ``hidden_tests`` through the harness's pytest (``run_pytest.py``,
   verdict from its results file, ``runner.pytest_grading``), or the
   ``hidden_test`` command (verdict from its exit status). Bytecode is neither
   written nor read from where the code under test could plant it
   (``PYTHONPYCACHEPREFIX`` points at an empty root-owned directory), plugin
   autoloading is off, pytest's settings come from the pristine copy.
5. Every process of the test's uid is killed before the results are read.
"""

from __future__ import annotations

import json
import posixpath
import secrets
from dataclasses import dataclass, replace
from pathlib import Path

from runner import harness_git
from runner.archives import Entry, Member, owned_tar
from runner.fixture_view import FixtureView, footprint
from runner.models import RepoTask
from runner.pytest_grading import RESULTS_CAP, grade, runner_config, test_files
from runner.sandbox.base import AGENT_UID, WORKSPACE, ExecRequest, Sandbox
from runner.sandbox_scripts import source
from runner.workspace import unpack_as_agent

PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class VerifyOutcome:
    """What the verify phase found."""

    passed: bool
    timed_out: bool = False
    exit_code: int | None = None
    log: str = ""
    log_truncated: bool = False
    oom_killed: bool = False
    reason: str | None = None  # why it is not a pass, when the harness knows


@dataclass(frozen=True)
class VerifySettings:
    """The controls the verify phase uses."""

    timeout_s: float
    output_cap: int
    workspace_bytes: int


def verify(
    sandbox: Sandbox,
    task: RepoTask,
    fixture: FixtureView,
    workspace: Path | bytes | None,
    hidden: list[Member],
    patch: bytes,
    settings: VerifySettings,
) -> VerifyOutcome:
    """Run phase B in ``sandbox`` (fresh, ``workspace_root_owned``) on a screened patch.

    ``workspace`` is the fixture's tar as the test's uid (``runner.staging``, usually made
    once per machine), None when there is no fixture; ``fixture`` is what else the phase
    needs of it (``runner.fixture_view``)."""
    size = fixture.footprint + sum(footprint(m) for m in hidden)
    if patch and size + 2 * len(patch) + (1 << 20) > settings.workspace_bytes:
        return VerifyOutcome(
            False, reason="the patched tree would not fit in runtime.limits.workspace"
        )
    config = runner_config(list(fixture.pristine.values()))
    place = _Place(f".deltarun-{secrets.token_hex(8)}", config.suffix)
    # The fixture, in the test's uid, by the image's tar; then what root owns.
    if workspace is not None:
        unpack_as_agent(sandbox, WORKSPACE, workspace)
    first = _layer_one(place.harness, patch)
    second = _layer_two(fixture, hidden, place.harness, place.config, config.data)
    # Without a patch nothing runs between the layers: one copy, later entries win.
    sandbox.put_archive(WORKSPACE, owned_tar(first if patch else first + second))
    if patch:
        problem = _apply(sandbox, place, settings)
        if problem is not None:
            return VerifyOutcome(False, reason=problem)
        sandbox.put_archive(WORKSPACE, owned_tar(second))
    nonce = secrets.token_hex(16)
    result = sandbox.run(_test_request(task, place, settings, nonce))
    found = VerifyOutcome(
        False,
        exit_code=result.exit_code,
        log=result.output[-settings.output_cap :].decode("utf-8", "replace"),
        log_truncated=result.output_truncated,
        oom_killed=result.oom_killed,
    )
    if result.timed_out:
        return replace(found, timed_out=True, exit_code=None, reason="the hidden tests timed out")
    if task.hidden_tests is None:
        if result.exit_code == 0:
            return replace(found, passed=True)
        return replace(found, reason=f"the hidden test exited {result.exit_code}")
    data, truncated = sandbox.read_file(place.results, RESULTS_CAP)
    if truncated:
        data = b""  # over the cap: unreadable, graded as damaged
    verdict = grade(task.hidden_tests, data, nonce, result.exit_code)
    return replace(found, passed=verdict.passed, reason=verdict.reason)


@dataclass(frozen=True)
class _Place:
    """Where the harness's files go in one verify sandbox (a fresh random name each)."""

    harness: str  # .deltarun-<random>, at the workspace root
    suffix: str  # of the runner settings' copy: pytest reads it by its suffix

    @property
    def home(self) -> str:
        return f"{WORKSPACE}/{self.harness}"

    @property
    def config(self) -> str:
        return f"{self.harness}{self.suffix}"

    @property
    def results(self) -> str:
        return f"{self.home}/out/results.json"


def _apply(sandbox: Sandbox, place: _Place, settings: VerifySettings) -> str | None:
    """``git apply`` the screened patch as the test's uid; the reason when it does not apply."""
    applied = sandbox.run(
        ExecRequest(
            argv=harness_git.argv("apply", "--whitespace=nowarn", f"{place.home}/agent.patch"),
            env=_git_env(place.home),
            timeout_s=min(120.0, settings.timeout_s),
            output_cap=1 << 16,
            separate_stderr=True,
        )
    )
    if applied.exit_code == 0 and not applied.timed_out:
        return None
    why = (applied.stderr or applied.output)[-400:].decode("utf-8", "replace").strip()
    return f"the patch does not apply: {why}"


def _test_request(
    task: RepoTask, place: _Place, settings: VerifySettings, nonce: str
) -> ExecRequest:
    """The test command: the harness's pytest for declared tests, else the task's command;
    either way under the harness's environment and pytest settings."""
    env = {
        "HOME": "/home/agent",
        "PATH": PATH,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPYCACHEPREFIX": f"{place.home}/pycache",
        "PYTHONNOUSERSITE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    fixed = ["-c", f"{WORKSPACE}/{place.config}", "--rootdir", WORKSPACE, "-p", "no:cacheprovider"]
    if task.hidden_tests is None:
        assert task.hidden_test is not None
        env |= {"PYTEST_ADDOPTS": " ".join(fixed), "DELTARUN_HIDDEN_TEST": task.hidden_test}
        return ExecRequest(
            argv=["sh", "-c", 'exec sh -c "$DELTARUN_HIDDEN_TEST"'],
            env=env,
            timeout_s=settings.timeout_s,
            output_cap=settings.output_cap,
        )
    spec = {
        "nonce": nonce,
        "rootdir": WORKSPACE,
        "results": place.results,
        "select": task.hidden_tests,
        "args": ["-q", *task.pytest_args, *fixed, *test_files(task.hidden_tests)],
    }
    # The sweep runs in the same exec, right after pytest: no process of the test's uid is
    # left when the results file is read.
    home = place.home
    return ExecRequest(
        argv=[
            "sh",
            "-c",
            f"python3 -B -s {home}/run_pytest.py; code=$?; "
            f"python3 -I -S {home}/guard.py sweep >/dev/null; exit $code",
        ],
        env=env,
        timeout_s=settings.timeout_s,
        output_cap=settings.output_cap,
        stdin=json.dumps(spec).encode("utf-8"),
    )


def _git_env(home: str) -> dict[str, str]:
    return {
        "GIT_DIR": f"{home}/git",
        "GIT_WORK_TREE": WORKSPACE,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "HOME": "/home/agent",
        "PATH": PATH,
    }


def _dirs_of(paths: list[str]) -> list[str]:
    """Every directory above the paths, parents first ("" excluded)."""
    found: dict[str, None] = {}
    for path in paths:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            found.setdefault("/".join(parts[:i]))
    return sorted(found, key=lambda d: (d.count("/"), d))


def _layer_one(harness: str, patch: bytes) -> list[Entry]:
    """The harness's root-owned directory (the fixture is already in place)."""
    git = f"{harness}/git"
    entries = [
        Entry(harness, None, 0, 0o755),
        Entry(git, None, 0, 0o755),
        Entry(f"{git}/objects", None, 0, 0o755),
        Entry(f"{git}/refs", None, 0, 0o755),
        Entry(f"{git}/info", None, 0, 0o755),
        Entry(f"{git}/HEAD", b"ref: refs/heads/main\n", 0, 0o444),
        Entry(f"{git}/config", b"[core]\n\trepositoryformatversion = 0\n", 0, 0o444),
        Entry(f"{git}/info/attributes", harness_git.NEUTRAL_ATTRIBUTES.encode(), 0, 0o444),
    ]
    if patch:
        entries.append(Entry(f"{harness}/agent.patch", patch, 0, 0o444))
    return entries


def _layer_two(
    fixture: FixtureView, hidden: list[Member], harness: str, config_name: str, config: bytes
) -> list[Entry]:
    """What root owns for the test: hidden files and their directories, the pristine
    harness files beside them, the runner settings and the launcher."""
    hidden_files = [m for m in hidden if not m.is_dir]
    hidden_dirs = _dirs_of([m.path for m in hidden_files]) + sorted(
        m.path for m in hidden if m.is_dir
    )
    pristine = fixture.pristine
    entries = [Entry(d, None, 0, 0o755) for d in dict.fromkeys(hidden_dirs)]
    for directory in ["", *hidden_dirs]:
        for name in ("__init__.py", "conftest.py"):
            member = pristine.get(posixpath.join(directory, name))
            if member is not None:
                entries.append(Entry(member.path, member.data, 0, 0o644))
    entries += [
        Entry(m.path, m.data, 0, 0o755 if m.executable else 0o644)
        for m in sorted(hidden_files, key=lambda m: m.path)
    ]
    entries += [
        Entry(config_name, config, 0, 0o444),
        Entry(f"{harness}/out", None, AGENT_UID, 0o755),
        Entry(f"{harness}/pycache", None, 0, 0o555),
        Entry(f"{harness}/run_pytest.py", source("run_pytest.py"), 0, 0o444),
        Entry(f"{harness}/deltarun_results.py", source("deltarun_results.py"), 0, 0o444),
        Entry(f"{harness}/guard.py", source("guard.py"), 0, 0o444),
    ]
    return entries
