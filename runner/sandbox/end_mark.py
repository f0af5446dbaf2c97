"""An end mark after a harness command's output: proof that the engine delivered it whole.

Docker can end an exec's output stream before the command's last output, and report
the command's exit as if nothing happened (moby/moby#27289; seen here under load as an
empty patch of an agent that had edited, and an empty ``stat``). A command whose output
the harness reads as an answer (a patch, a size, the collector's records) asks for
``ExecRequest.end_mark``, or runs under ``run_whole``, which runs it again when it can.
The sandbox runs it under a shell that prints a fresh random mark on each stream the
caller reads once the command has ended, and reads the output as whole only when every
such stream ends with the mark. Otherwise the result says ``cut_short``, and the caller
runs the command again or makes the trial an error to run again; it never grades what
arrived.

With ``separate_stderr`` the mark follows on stdout and on stderr. Without, the
command's stderr is joined to its stdout inside the container (one pipe, so the order
the command wrote in), and one mark follows on it.

The mark is new for every command and printed by the shell after the command ended, so
nothing a command prints, and nothing an agent left in the workspace, can end a stream
with it. A shell killed before it printed (the command timed out, or the sandbox's own
state killed it: an agent that fills its memory has the kernel's OOM killer end the
harness's commands), or never started, leaves no mark, and its exit status says so
(``may_lack_mark``): that command failed, as the caller reads its status, and is never
called cut short. Else an agent could turn its own miss into an infrastructure error, a
trial to run again.

No I/O of its own: ``runner.sandbox.docker`` and ``runner.sandbox.running`` apply the
mark, ``run_whole`` speaks only the ``Sandbox`` interface.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace

from runner.errors import SandboxError
from runner.sandbox.base import ExecRequest, ExecResult, Sandbox

# The wrapper: $1 is the mark, the rest the command. The command's exit status is kept.
_SEPARATE = 'm=$1; shift; "$@"; c=$?; printf %s "$m"; printf %s "$m" >&2; exit $c'
_JOINED = 'm=$1; shift; "$@" 2>&1; c=$?; printf %s "$m"; exit $c'
# How often ``run_whole`` runs a command whose output the engine keeps cutting short.
TRIES = 3


def new_mark() -> bytes:
    """A mark no command can know in advance."""
    return b"deltarun-end-" + secrets.token_hex(12).encode()


def argv_of(request: ExecRequest, mark: bytes | None) -> list[str]:
    """The command to run: ``request.argv``, under the shell that prints ``mark`` after it
    on each stream read when there is a mark."""
    if mark is None:
        return list(request.argv)
    script = _SEPARATE if request.separate_stderr else _JOINED
    return ["sh", "-c", script, "sh", mark.decode(), *request.argv]


def may_lack_mark(exit_code: int | None, timed_out: bool) -> bool:
    """Whether the shell that prints the mark may never have printed it: the command timed
    out; ``timeout`` reports its child killed by a signal (128 + the signal); or the shell
    never started (125: ``timeout`` failed, 126: it could not be run, as the engine says of
    an exec it could not start, 127: not found). A shell that ran to its end printed the
    mark, and exited with its command's status."""
    return timed_out or (exit_code is not None and exit_code >= 125)


def with_room(request: ExecRequest, mark: bytes | None) -> ExecRequest:
    """``request`` with its caps widened by the mark: a command's output of exactly its cap
    still arrives with the mark after it."""
    if mark is None:
        return request
    return replace(
        request,
        output_cap=request.output_cap + len(mark),
        stderr_cap=request.stderr_cap + len(mark),
    )


@dataclass(frozen=True)
class Unmarked:
    """A command's streams with the marks taken off, within the request's caps."""

    output: bytes
    truncated: bool
    stderr: bytes
    cut_short: bool  # a stream read did not end with the mark: the engine lost its end


def unmarked(
    request: ExecRequest,
    mark: bytes | None,
    output: bytes,
    truncated: bool,
    stderr: bytes,
    *,
    killed: bool = False,
) -> Unmarked:
    """What arrived (collected under ``with_room``'s caps) without the marks; as it came,
    within the caps, when there is no mark to look for (none asked).

    A stream that overflowed its cap cannot show its mark (the mark came after the cap):
    it is truncated, as without a mark, and not called cut short. Nor is a stream of a
    ``killed`` command (``may_lack_mark``): its shell may have died before printing."""
    if mark is None:
        cap = request.output_cap
        return Unmarked(
            output[:cap], truncated or len(output) > cap, stderr[: request.stderr_cap], False
        )
    output, truncated, whole = _take(output, truncated, request.output_cap, mark)
    if request.separate_stderr:
        full = len(stderr) >= request.stderr_cap + len(mark)  # more may have come: unknowable
        stderr, _, whole_err = _take(stderr, full, request.stderr_cap, mark)
        whole = whole and whole_err
    return Unmarked(output, truncated, stderr, not (whole or killed))


def _take(data: bytes, overflowed: bool, cap: int, mark: bytes) -> tuple[bytes, bool, bool]:
    """(data without the mark and within ``cap``, truncated, arrived whole)."""
    if overflowed:
        return data[:cap], True, True
    if data.endswith(mark):
        return data[: -len(mark)], False, True
    return data[:cap], len(data) > cap, False


def run_whole(sandbox: Sandbox, request: ExecRequest, what: str, tries: int = TRIES) -> ExecResult:
    """``request`` (with ``end_mark``) run until its output arrives whole, at most ``tries``
    times; for a command that may run again (it only reads, or asks a question). A
    ``SandboxError`` naming ``what`` when it never does: infrastructure, the trial an
    error to run again, never an answer read from what arrived."""
    request = replace(request, end_mark=True)
    return until_whole(lambda: sandbox.run(request), what, tries)


def until_whole(attempt: Callable[[], ExecResult], what: str, tries: int = TRIES) -> ExecResult:
    """``attempt()`` (a marked command, run once) until its result is not ``cut_short``, at
    most ``tries`` times; a ``SandboxError`` naming ``what`` when it never is."""
    for _ in range(tries):
        result = attempt()
        if not result.cut_short:
            return result
    raise SandboxError(
        f"the engine cut the output of {what} short {tries} times (moby/moby#27289); "
        "infrastructure, to run again"
    )
