"""The task's install step in the verify sandbox, and the proof that it left nothing running.

The install step is the patched project's own code (``setup.py``, build hooks), run as
the test's uid before the harness's pytest. Whatever it leaves running could read what
the harness hands the test process or speak to the collector first, so the test starts
only when no process of that uid is alive:

1. the steps, one ``sh -c`` script (``runner.fixtures.install``), ending with a sweep of
   its own -- which the steps can defeat (a lowered ``RLIMIT_NOFILE`` or ``RLIMIT_NPROC``
   of the shell is inherited by the sweep, which then cannot start), so it is not relied
   on;
2. a sweep in an exec of its own (the container's limits, not the steps' shell), the
   guard's ``kill(-1, SIGSTOP)`` rounds (atomic against fork) then SIGKILL;
3. a census as root (``guard.py census``): root's exec can be neither signalled, traced
   nor written to by the test's uid, and ``/proc`` shows every process of the pid
   namespace. A live process of the test's uid there, or a sweep that did not finish
   and report, is tampering: a miss and a tool violation, and no test runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runner.errors import SandboxError
from runner.fixtures.install import PIP_ENV, failure, install_script
from runner.sandbox.base import AGENT_UID, ROOT_USER, ExecRequest, Sandbox

PATH = "/usr/local/bin:/usr/bin:/bin"
SWEEP_TIMEOUT_S = 30.0  # the guard gives up after 10 s of rounds


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
    """Run ``steps`` in ``sandbox`` as the test's uid (``home`` holds the harness's
    ``guard.py``), then make sure nothing of that uid is left alive."""
    sweep = f"python3 -I -S {home}/guard.py sweep >/dev/null 2>&1"
    result = sandbox.run(
        ExecRequest(
            argv=["sh", "-c", install_script(steps, sweep)],
            env={**env, **PIP_ENV},
            timeout_s=timeout_s,
            output_cap=output_cap,
        )
    )
    output = result.output[-output_cap:].decode("utf-8", "replace")
    left = _left_alive(sandbox, home)
    if left is not None:
        return Installed(f"test process tampered: {left}", output, tampered=True)
    if result.exit_code == 0 and not result.timed_out:
        return Installed(None, output)
    return Installed(failure(steps, output, result.exit_code, result.timed_out), output)


def _left_alive(sandbox: Sandbox, home: str) -> str | None:
    """Sweep in an exec of its own, then count as root; why the tests may not run, or None."""
    swept = sandbox.run(
        ExecRequest(
            argv=["python3", "-I", "-S", f"{home}/guard.py", "sweep"],
            env={"PATH": PATH, "LANG": "C.UTF-8"},
            timeout_s=SWEEP_TIMEOUT_S,
            output_cap=4096,
            separate_stderr=True,
        )
    )
    if swept.timed_out:  # stopped (SIGSTOP) or starved: the sandbox may be gone with it
        return "the install step's processes stopped the harness's sweep"
    census = sandbox.run(
        ExecRequest(
            argv=["python3", "-I", "-S", f"{home}/guard.py", "census", str(AGENT_UID)],
            user=ROOT_USER,
            env={"PATH": PATH, "LANG": "C.UTF-8"},
            timeout_s=SWEEP_TIMEOUT_S,
            output_cap=4096,
            separate_stderr=True,
        )
    )
    live = _count(census.output, b"live=")
    if census.exit_code != 0 or live is None:
        # Root's census cannot be stopped by the test's uid: a census that failed is ours.
        why = (census.stderr or census.output)[-300:].decode("utf-8", "replace").strip()
        raise SandboxError(f"the harness's process census failed: {why}")
    if live:
        return f"{live} process(es) of the install step outlived it and the harness's sweep"
    if swept.exit_code != 0 or _count(swept.output, b"swept=") is None:
        return "the install step's processes stopped the harness's sweep"
    return None


def _count(output: bytes, key: bytes) -> int | None:
    """The number after ``key`` on the guard's last line, or None."""
    lines = output.strip().splitlines()
    if not lines or key not in lines[-1]:
        return None
    tail = lines[-1].split(key, 1)[1].split()
    return int(tail[0]) if tail and tail[0].isdigit() else None
