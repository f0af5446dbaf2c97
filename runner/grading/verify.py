"""Phase B, the verdict: the screened patch and the hidden tests in a fresh sandbox.

The agent never saw this sandbox, and nothing it left decides how grading runs:

1. Layer one, in the test's uid: the full fixture (unpacked by the image's tar as
   that uid, ``runner.sandbox.copy_in.unpack_as_agent``); root-owned: the harness's
   directory ``.deltarun-<random>/`` (an empty git directory whose attributes
   switch every workspace attribute off, the screened patch). ``/workspace``
   itself is root-owned and sticky.
2. ``git apply`` of the screened patch as the test's uid, then the tree's size:
   a patch that does not apply, or a tree larger than ``runtime.limits.workspace``
   however small the patch looked (a compressed binary patch), is a miss with the
   reason. The sandbox's workspace holds the limit *plus* room for what the
   harness writes (``sandbox_bytes``), so the harness's files never compete with
   the agent's for space.
3. Layer two, root-owned: the hidden files over whatever is at their paths, the
   fixture's pristine files that hold declared tests, every directory on their
   paths, the fixture's pristine ``__init__.py`` and ``conftest.py`` in those
   directories, the fixture's runner settings as a copy pytest reads with ``-c``,
   the pytest launcher, plugin and collector. The test's uid can no longer change
   any of them, nor rename a directory they are in.
4. The task's install step, if any, as the test's uid; then nothing of that uid may
   be left alive (``runner.grading.install_step``).
5. The test: ``hidden_tests`` through the harness's pytest (``run_pytest.py``;
   the canaries are written into the root-owned declared test files of layer two,
   ``runner.grading.canaries``; each outcome sent as it happens to the collector,
   root, on a socket; verdict ``runner.grading.verdict``), or the ``hidden_test`` command
   (verdict from its exit status). Bytecode is neither written nor read from
   where the code under test could plant it (``PYTHONPYCACHEPREFIX`` points at a
   root-owned directory that holds only links to the image's own bytecode of what
   the harness imports, files only root can write), plugin autoloading is off,
   pytest's settings come from the pristine copy.
6. Every process of the test's uid is killed before the results are read.
"""

from __future__ import annotations

import json
import random
import secrets
from dataclasses import dataclass, replace
from pathlib import Path

from runner.errors import InfraError
from runner.grading.canaries import Planted, canary_files, plant
from runner.grading.install_step import install
from runner.grading.verdict import grade, read_channel
from runner.grading.verify_commands import (
    Place,
    collector_request,
    command_request,
    git_env,
    runner_request,
    test_env,
)
from runner.grading.verify_commands import (
    VerifySettings as VerifySettings,  # the phase's controls, re-exported beside verify
)
from runner.grading.verify_files import SCRIPTS, bytecode_links, layer_one, layer_two
from runner.grading.verify_log import stored_log
from runner.records import RepoTask
from runner.sandbox.base import WORKSPACE, ExecRequest, ExecResult, Sandbox
from runner.sandbox.copy_in import unpack_as_agent
from runner.sandbox.end_mark import run_whole
from runner.sandbox_scripts import source
from runner.trees import harness_git
from runner.trees.archives import Entry, Member, owned_tar
from runner.trees.declared import runner_config
from runner.trees.facts import BLOCK, FixtureView, footprint
from runner.trees.layout import import_roots

# Room for what the harness writes besides the listed files: directories, the settings copy.
SLACK_BYTES = 4 << 20


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
    tampered: bool = False  # the test process rewrote outcomes (runner.grading.verdict)


def sandbox_bytes(
    settings: VerifySettings, fixture: FixtureView, hidden: list[Member], patch: bytes
) -> int:
    """The size of the verify sandbox's workspace: the limit the patched tree must fit in,
    plus room for everything the harness writes there, so that never runs short."""
    harness = sum(len(source(name)) for name in SCRIPTS) + len(patch)
    files = [*hidden, *fixture.pristine.values()]
    return (
        settings.workspace_bytes
        + 2 * sum(footprint(m) for m in files)
        + harness
        + BLOCK * (len(files) + 64)
        + SLACK_BYTES
    )


def verify(
    sandbox: Sandbox,
    task: RepoTask,
    fixture: FixtureView,
    workspace: Path | bytes | None,
    hidden: list[Member],
    patch: bytes,
    settings: VerifySettings,
    rng: random.Random | None = None,
) -> VerifyOutcome:
    """Run phase B in ``sandbox`` (fresh, ``workspace_root_owned``, its workspace
    ``sandbox_bytes`` large) on a screened patch.

    ``workspace`` is the fixture's tar as the test's uid (``runner.trees.staging``, usually made
    once per machine), None when there is no fixture or the sandbox already holds it
    (``Sandbox.prefilled``); ``fixture`` is what else the phase
    needs of it (``runner.trees.facts``); ``rng`` names the canaries (unpredictable to
    the agent by default)."""
    size = fixture.footprint + sum(footprint(m) for m in hidden)
    if patch and size + 2 * len(patch) + (1 << 20) > settings.workspace_bytes:
        return VerifyOutcome(
            False, reason="the patched tree would not fit in runtime.limits.workspace"
        )
    config = runner_config(list(fixture.pristine.values()))
    roots = tuple(f"{WORKSPACE}/{r}" for r in import_roots(fixture.pristine, fixture.files))
    place = Place(f".deltarun-{secrets.token_hex(8)}", config.suffix, roots, settings.plugins)
    planted = _plant(task, fixture, hidden, config.data, rng)
    # The fixture, in the test's uid, by the image's tar; then what root owns.
    if workspace is not None:
        unpack_as_agent(sandbox, WORKSPACE, workspace)
    first = layer_one(place.harness, patch)
    second = layer_two(
        task, fixture, hidden, place.harness, place.config, config.data, planted.files
    ) + bytecode_links(place.harness, linked_bytecode(task, settings))
    # Without a patch nothing runs between the layers: one copy, later entries win.
    sandbox.put_archive(WORKSPACE, owned_tar(first if patch else first + second))
    if patch:
        # A copy-free workspace's tmpfs holds the tree's pages as a copy's does (sandbox.overlay).
        problem = _apply(sandbox, place, settings, _footprint(first))
        if problem is not None:
            return VerifyOutcome(False, reason=problem)
        sandbox.put_archive(WORKSPACE, owned_tar(second))
    log = ""
    if task.install:
        env = {k: v for k, v in test_env(place).items() if k != "PYTHONNOUSERSITE"}
        done = install(
            sandbox, task.install, place.home, env, settings.timeout_s, settings.output_cap
        )
        log = done.log
        if done.reason is not None:
            return VerifyOutcome(False, log=log, reason=done.reason, tampered=done.tampered)
        place = replace(place, user_site=True)
    found = _tests(sandbox, task, place, settings, planted)
    if log:  # the install's log first, kept in the record within the output cap
        whole = log + found.log
        kept = whole[-settings.output_cap :]
        found = replace(found, log=kept, log_truncated=found.log_truncated or kept != whole)
    return found


def linked_bytecode(task: RepoTask, settings: VerifySettings) -> tuple[tuple[str, str], ...]:
    """The image's bytecode this verify phase links (``runner.grading.image_facts``): what
    the harness's session imports when it runs the declared tests, what pip and
    setuptools add when the task has an install step. Linking costs the engine an entry
    each, so a ``hidden_test`` command (whatever it runs) gets none."""
    links = settings.bytecode if task.hidden_tests is not None else ()
    return links + settings.install_bytecode if task.install else links


def _plant(
    task: RepoTask,
    fixture: FixtureView,
    hidden: list[Member],
    config: bytes,
    rng: random.Random | None,
) -> Planted:
    """The canaries in the files that hold declared tests (hidden, or the fixture's own),
    and the selection the plugin gets; nothing for a task graded by its exit status."""
    if task.hidden_tests is None:
        return Planted({}, (), ())
    sources = {m.path: m.data for m in hidden if not m.is_dir}
    for path in canary_files(task.hidden_tests, fixture.pristine):
        member = fixture.pristine.get(path)
        if path not in sources and member is not None and not member.is_dir:
            sources[path] = member.data
    # -k or -m in the project's settings narrow by name, as on the command line; another
    # runner gets dotted labels, a canary's own among them unless an entry covers it.
    narrowing = [*task.pytest_args, *(["-k"] if _narrows(config) else [])]
    if task.test_runner != "pytest":
        narrowing = []
    by_name = task.test_runner in ("unittest", "django")  # a class's tests in name order
    return plant(task.hidden_tests, sources, rng or secrets.SystemRandom(), narrowing, by_name)


def _narrows(config: bytes) -> bool:
    """Does the runner settings' ``addopts`` select by name or mark (``-k``, ``-m``)?"""
    for line in config.splitlines():
        if line.strip().startswith((b"addopts", b'"addopts', b"'addopts")):
            words = line.replace(b"=", b" ").replace(b'"', b" ").replace(b"'", b" ").split()
            if any(w in (b"-k", b"-m") or w.startswith((b"-k", b"-m")) for w in words):
                return True
    return False


def _tests(
    sandbox: Sandbox,
    task: RepoTask,
    place: Place,
    settings: VerifySettings,
    planted: Planted,
) -> VerifyOutcome:
    """The hidden test command, or the declared tests under the harness's pytest."""
    if task.hidden_tests is None:
        result = sandbox.run(command_request(task, place, settings))
        found = _found(result, settings)
        if result.timed_out or result.exit_code == 0:
            return replace(found, passed=not result.timed_out)
        return replace(found, reason=f"the hidden test exited {result.exit_code}")
    return _declared(sandbox, task, place, settings, planted)


def _declared(
    sandbox: Sandbox,
    task: RepoTask,
    place: Place,
    settings: VerifySettings,
    planted: Planted,
) -> VerifyOutcome:
    """The declared tests under the harness's pytest, the canaries in their files, every
    outcome read from the collector's channel (``runner.grading.verdict.grade``)."""
    assert task.hidden_tests is not None
    collector = sandbox.start(collector_request(place, settings))
    try:
        result = sandbox.run(runner_request(task, place, settings, planted.select))
    finally:
        channel = collector.finish()
    if channel.cut_short and not result.timed_out:  # records may be missing (end_mark)
        raise InfraError("the engine cut the collector's output short (moby/moby#27289)")
    found = _found(result, settings)
    records = read_channel(channel.output)

    def logged(outcome: VerifyOutcome) -> VerifyOutcome:
        """``outcome`` with the log a person reads (``runner.grading.verify_log``)."""
        why = outcome.reason if outcome.tampered else None
        log = stored_log(found.log, task.test_runner, planted.canaries, records, why)
        return replace(outcome, log=log)

    if result.timed_out:
        return logged(found)
    account = _account(channel)
    if not account.get("peer_pid"):
        tail = result.output[-300:].decode("utf-8", "replace").strip()
        raise InfraError(f"the harness's pytest never reported to its collector: {tail}")
    extra = account.get("extra")
    if isinstance(extra, int) and extra > 0:
        why = f"test process tampered: {extra} more connection(s) to the results channel"
        return logged(replace(found, reason=why, tampered=True))
    verdict = grade(
        task.hidden_tests,
        planted.canaries,
        channel.output,
        result.exit_code,
        rootdir=WORKSPACE,
        overflowed=bool(account.get("truncated")),
        runner=task.test_runner,
        records=records,
    )
    if verdict.passed:  # the status of the declared tests: the must-fail canaries aside
        found = replace(found, exit_code=0)
    return logged(
        replace(found, passed=verdict.passed, reason=verdict.reason, tampered=verdict.tampered)
    )


def _found(result: ExecResult, settings: VerifySettings) -> VerifyOutcome:
    """What the test command's end says before any verdict: its log, exit, timeout."""
    log = result.output[-settings.output_cap :].decode("utf-8", "replace")
    found = VerifyOutcome(
        False,
        exit_code=result.exit_code,
        log=log,
        log_truncated=result.output_truncated,
        oom_killed=result.oom_killed,
    )
    if result.timed_out:
        return replace(found, timed_out=True, exit_code=None, reason="the hidden tests timed out")
    return found


def _account(channel: ExecResult) -> dict[str, object]:
    """The collector's own account (its last stderr line), {} when it gave none."""
    lines = channel.stderr.decode("utf-8", "replace").strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _footprint(entries: list[Entry]) -> int:
    return sum(-(-len(e.data or b"") // BLOCK) * BLOCK + BLOCK for e in entries)


_STATFS = ["stat", "-f", "-c", "%S %b %f", WORKSPACE]  # as _apply's command ends


def _statfs(output: bytes) -> list[int] | None:
    """[block size, blocks, free blocks] of ``stat -f``; None when it is not that."""
    fields = output.split()
    return [int(f) for f in fields] if [f.isdigit() for f in fields] == [True] * 3 else None


def _apply(
    sandbox: Sandbox, place: Place, settings: VerifySettings, harness_bytes: int
) -> str | None:
    """``git apply`` the screened patch as the test's uid, then measure the tree it left
    (the filesystem's use less ``harness_bytes``, the harness's files; a copy-free
    workspace's filesystem counts the tree as a copy's does);
    the reason when it does not apply or does not fit in ``runtime.limits.workspace``."""
    git = " ".join(harness_git.argv("apply", "--whitespace=nowarn", f"{place.home}/agent.patch"))
    applied = sandbox.run(
        ExecRequest(
            argv=["sh", "-c", f'{git} || exit $?; exec stat -f -c "%S %b %f" {WORKSPACE}'],
            env=git_env(place.home),
            timeout_s=min(120.0, settings.timeout_s),
            output_cap=1 << 16,
            separate_stderr=True,
            end_mark=True,
        )
    )
    if applied.exit_code != 0 or applied.timed_out:
        why = (applied.stderr or applied.output)[-400:].decode("utf-8", "replace").strip()
        return f"the patch does not apply: {why}"
    output = applied.output
    if applied.cut_short:  # applied; the size arrived cut short: only the measuring again
        output = run_whole(sandbox, ExecRequest(_STATFS), "the size of the patched tree").output
    if (measured := _statfs(output)) is None:
        raise InfraError(f"the verify sandbox's size could not be read: {output!r}")
    block, total, free = measured
    used = (total - free) * block - harness_bytes
    if used > settings.workspace_bytes:
        return (
            f"the patched tree takes {used} bytes, more than runtime.limits.workspace "
            f"({settings.workspace_bytes})"
        )
    return None
