"""The task's install step in the verify sandbox, and the proof that it left nothing running.

The install step is the patched project's own code (``setup.py``, build hooks), run as
the test's uid before the harness's pytest. Whatever it leaves running could read what
the harness hands the test process or speak to the collector first, so the test starts
only when no process of that uid is alive:

1. the steps run as the child of the harness's guard (``guard.py run``), started in a
   fresh sandbox where nothing of the test's uid runs yet: when the steps' shell exits,
   the guard, already running, freezes every other process of the uid with
   ``kill(-1, SIGSTOP)`` (atomic against fork) and kills them, before the exit can be
   seen. A sweep started *after* the steps would be a new process that what they left
   could stop or starve (a lowered ``RLIMIT_NOFILE`` of the steps' shell is inherited
   by anything the shell starts; a daemon can ``SIGSTOP`` each new process of its uid);
2. a census as root (``guard.py census``): root's exec can be neither signalled, traced
   nor written to by the test's uid, and ``/proc`` shows every process of the pid
   namespace. A live process of the test's uid, stragglers the guard could not kill,
   or a guard that never reported (killed or stopped) is tampering: a miss and a tool
   violation, and no test runs. A report line the engine lost is read from the guard's
   copy (``runner.sandbox.guard_run``), which the steps can neither name nor forge.

A step that fails or times out is a miss with its reason (no test runs either).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runner.errors import SandboxError
from runner.grading.verify_files import GUARD_REPORTS
from runner.sandbox.base import AGENT_UID, ROOT_USER, ExecRequest, Sandbox
from runner.sandbox.end_mark import run_whole
from runner.sandbox.guard_run import guard_argv, run_guarded_exec
from runner.trees.install import PIP_ENV, failure, install_script

PATH = "/usr/local/bin:/usr/bin:/bin"
CENSUS_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Installed:
    """How the install step ended: ``reason`` None when the tests may run."""

    reason: str | None
    log: str
    tampered: bool = False


def install(
    sandbox: Sandbox,
    steps: Sequence[str],
    home: str,
    env: Mapping[str, str],
    timeout_s: float,
    output_cap: int,
) -> Installed:
    """Run ``steps`` in ``sandbox`` as the test's uid under the guard (``home`` holds the
    harness's ``guard.py``), then make sure nothing of that uid is left alive."""
    script = install_script(steps)  # the guard sweeps when the script's shell exits
    reports = f"{home}/{GUARD_REPORTS}"
    guarded = run_guarded_exec(
        sandbox,
        ExecRequest(
            argv=guard_argv(f"{home}/guard.py", ["sh", "-c", script]),
            env={**env, **PIP_ENV},
            timeout_s=timeout_s,
            output_cap=output_cap,
            separate_stderr=True,
            stderr_cap=4096,
            untrusted=True,  # the patched project's setup code: runner.sandbox.blame
        ),
        reports,
    )
    result, report = guarded.result, guarded.report
    output = result.output[-output_cap:].decode("utf-8", "replace")
    code = result.exit_code
    if report is not None and report.group(2) == b"exit":
        code = int(report.group(3))
    if result.timed_out:  # no test runs: what is left cannot matter
        return Installed(failure(steps, output, code, True), output)
    if report is None:
        why = "the install step's processes ended the harness's guard"
        return Installed(f"test process tampered: {why}", output, tampered=True)
    if report.group(2) == b"error":  # fork refused (the pids limit): the steps' doing
        why = report.group(3).decode("ascii", "replace")
        return Installed(f"the harness's guard failed during the install step: {why}", output)
    if b"stragglers=" in guarded.line:
        why = "processes of the install step survived the harness's guard"
        return Installed(f"test process tampered: {why}", output, tampered=True)
    left = _census(sandbox, home)
    if left:
        why = f"{left} process(es) of the install step outlived it and the harness's guard"
        return Installed(f"test process tampered: {why}", output, tampered=True)
    if code != 0:
        return Installed(failure(steps, output, code, False), output)
    return Installed(None, output)


def _census(sandbox: Sandbox, home: str) -> int:
    """The live processes of the test's uid, counted by root (``guard.py census``)."""
    census = run_whole(
        sandbox,
        ExecRequest(
            argv=["python3", "-I", "-S", f"{home}/guard.py", "census", str(AGENT_UID)],
            user=ROOT_USER,
            env={"PATH": PATH, "LANG": "C.UTF-8"},
            timeout_s=CENSUS_TIMEOUT_S,
            output_cap=4096,
            separate_stderr=True,
        ),
        "the harness's process census",
    )
    lines = census.output.strip().splitlines()
    tail = lines[-1].split(b"live=", 1)[-1].split() if lines and b"live=" in lines[-1] else []
    if census.exit_code != 0 or census.timed_out or not tail or not tail[0].isdigit():
        # Root's census cannot be stopped by the test's uid: a census that failed is ours.
        why = (census.stderr or census.output)[-300:].decode("utf-8", "replace").strip()
        raise SandboxError(f"the harness's process census failed: {why}")
    return int(tail[0])
