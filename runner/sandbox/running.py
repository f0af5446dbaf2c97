"""A command that runs beside others in a Docker sandbox: ``Sandbox.start``'s ``Running``.

The verify phase's collector (``sandbox_scripts/collector.py``) must read the
results channel while the test command runs in another exec, and learn from its
standard input that the test command is over. So the exec starts with its input
open, a thread reads its output (bounded by the caps, as ``run`` does), and
``finish`` closes the input and waits for the end. The same two bounds as
``DockerSandbox.run``: the in-container ``timeout`` in ``argv``, and a host
watchdog that ends the exec whatever the engine does. A failure is judged as
``run`` judges one (``runner.sandbox.blame``): the sandbox's own doing raises
``SandboxLost``, and a sandbox found lost by another command ends this one at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import docker

from runner.errors import SandboxError
from runner.sandbox import end_mark
from runner.sandbox.base import ExecRequest, ExecResult, SandboxLost
from runner.sandbox.blame import Blame
from runner.sandbox.engine import API_ERRORS, exit_code
from runner.sandbox.exec_io import (
    GONE,
    Verdict,
    Watchdog,
    collect_frames,
    frames,
    raw_socket,
    stalled,
)

# After its input closes, the collector ends within its own grace (2 s); this is the most
# the host waits for that, beyond which the exec is abandoned to the watchdog and ``gc``.
FINISH_WAIT_S = 30.0
# How every command ends in a sandbox whose container the watchdog killed (``DockerSandbox.run``).
KILLED = ExecResult(exit_code=None, output=b"", output_truncated=False, timed_out=True)


class DockerRunning:
    """One started exec: its output read on a thread until ``finish``."""

    def __init__(
        self,
        client: docker.APIClient,
        container: str,
        request: ExecRequest,
        argv: list[str],
        deadline_s: float,
        blame: Blame,
        mark: bytes | None = None,
    ) -> None:
        self._client = client
        self._blame = blame
        self._request = request
        self._mark = mark  # ``argv`` prints it after the command (``runner.sandbox.end_mark``)
        self._deadline_s = deadline_s
        self._started = time.monotonic()
        self._watchdog = Watchdog(client, container, deadline_s)
        self._result: tuple[bytes, bool, bytes] | None = None
        self._failure: BaseException | None = None
        try:
            self._exec_id = client.exec_create(
                container,
                argv,
                user=request.user,
                workdir=request.workdir,
                environment=dict(request.env),
                stdout=True,
                stderr=True,
                stdin=True,
            )["Id"]
            self._raw = raw_socket(client.exec_start(self._exec_id, socket=True))
        except API_ERRORS as exc:
            self._watchdog.cancel()
            raise SandboxError(f"Docker failed to start a command: {exc}") from exc
        # Silence is normal here (the collector speaks only when the test reports): only
        # the watchdog and ``finish`` end the read, never the client's read timeout.
        self._raw.settimeout(None)
        self._watchdog.attach(self._raw)
        if request.stdin:
            with contextlib.suppress(OSError):
                self._raw.sendall(request.stdin)  # small: the collector takes no input data
        self._thread = threading.Thread(target=self._read, daemon=True, name="exec-running")
        self._thread.start()

    def _read(self) -> None:
        request = end_mark.with_room(self._request, self._mark)
        try:
            self._result = collect_frames(
                frames(self._raw),
                request.output_cap,
                request.stderr_cap if request.separate_stderr else 0,
            )
        except BaseException as exc:  # handed to ``finish``, on the caller's thread
            self._failure = exc

    def finish(self) -> ExecResult:
        """Close the command's input; wait for its end; how it ended. Ended at once when its
        container is already gone: lost (``SandboxLost``), or killed by the watchdog of a
        command beside it (then a timeout, as every command of that sandbox)."""
        try:
            self._blame.begin()
        except SandboxLost:
            self._abandon()
            raise
        if self._blame.killed:
            self._abandon()
            return KILLED
        return self._blame.judged(self._finish)

    def _abandon(self) -> None:
        self._watchdog.cancel()
        with contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_RDWR)  # the container is gone: no end to wait for

    def _finish(self) -> ExecResult:
        with contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_WR)
        left = self._deadline_s - (time.monotonic() - self._started)
        self._thread.join(max(0.0, min(left, FINISH_WAIT_S)))
        if self._thread.is_alive():
            with contextlib.suppress(OSError):
                self._raw.shutdown(socket.SHUT_RDWR)  # wakes the reader
            self._thread.join(5.0)
        self._watchdog.cancel()
        if self._watchdog.fired or self._result is None:
            why = self._failure or "it did not end after its input closed"
            if self._watchdog.fired:
                gone = self._watchdog.finish() is Verdict.GONE
                raise SandboxError(GONE if gone else stalled(self._deadline_s))
            raise SandboxError(f"a harness command beside the test failed: {why}")
        output, truncated, stderr = self._result
        try:
            code = exit_code(self._client, self._exec_id)
        except API_ERRORS as exc:
            raise SandboxError(f"Docker failed to report a command's exit: {exc}") from exc
        self._blame.ended(code)
        got = end_mark.unmarked(
            self._request,
            self._mark,
            output,
            truncated,
            stderr,
            killed=end_mark.may_lack_mark(code, False),
        )
        return ExecResult(
            exit_code=code,
            output=got.output,
            output_truncated=got.truncated,
            timed_out=False,
            stderr=got.stderr,
            cut_short=got.cut_short,
        )


class Ended:
    """The ``Running`` of a command that never started: the container is already dead."""

    def __init__(self, result: ExecResult) -> None:
        self._result = result

    def finish(self) -> ExecResult:
        return self._result
