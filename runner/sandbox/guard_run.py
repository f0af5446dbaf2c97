"""A command under deltarun's guard, and the guard's report line, whole or from its copy.

The guard (``runner/sandbox_scripts/guard.py``) runs a program as the agent's uid (the
agent's CLI, a task's install step) and, when it exits, kills every other process of
that uid; then it writes one report line on its stderr, the last thing the exec sends.
The engine can lose the end of an exec's stream (moby/moby#27289): read alone, a lost
line would make a correct agent one that killed the guard (a tool violation), and an
honest install step one that tampered.

So the guard also leaves the line in a file whose path, named by a secret token, it
reads on its standard input before the program exists; the copy is read, by the
engine's archive copy rather than an exec, only when the line did not arrive. The
program cannot learn the path (it was read from a pipe then empty, by a process the
program cannot trace) nor write after the guard's kill, so it can forge no copy: a
guard it killed still has no report. The copy's directory must be on a volume (``/io``,
the verify workspace), where the archive copy can read it; a tmpfs is invisible to it.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace

from runner.sandbox.base import ExecRequest, ExecResult, Sandbox

# The one line ``guard.py run`` writes on its own fd 2 (the script's docstring).
GUARD_REPORT = re.compile(rb"deltarun-guard: mode=(\w+) (exit|signal|terminated|error)=(\w+)")
COPY_NAME = ".deltarun-guard-report-"
COPY_CAP = 4096
# A line for the log of a command whose report came from the copy.
LOST_LINE = "the engine lost the guard's report line; it was read from the guard's copy"


def guard_argv(guard: str, argv: Sequence[str]) -> list[str]:
    """``argv`` under the guard script at ``guard``."""
    return ["python3", "-I", "-S", guard, "run", "--", *argv]


@dataclass(frozen=True)
class Guarded:
    """How a guarded command ended, and the guard's report (None: the guard never made one)."""

    result: ExecResult
    report: re.Match[bytes] | None
    from_copy: bool  # the line was lost on the way; the report is its copy's
    line: bytes = b""  # where the report was found: stderr or the copy (``stragglers=``)


def run_guarded_exec(sandbox: Sandbox, request: ExecRequest, copy_dir: str) -> Guarded:
    """Run ``request`` (argv from ``guard_argv``) with the copy's path, a fresh secret name in
    ``copy_dir``, on its standard input; its report from stderr, else from the copy. A
    timed-out command's guard was ended with it: no copy is looked for."""
    copy = f"{copy_dir}/{COPY_NAME}{secrets.token_hex(16)}"
    result = sandbox.run(replace(request, stdin=f"{copy}\n".encode()))
    report = GUARD_REPORT.search(result.stderr)
    if report is not None or result.timed_out:
        return Guarded(result, report, False, result.stderr)
    data = sandbox.read_file(copy, COPY_CAP)[0] or b""
    copied = GUARD_REPORT.match(data)
    return Guarded(result, copied, copied is not None, data if copied is not None else b"")
