"""The byte streams of a command run in a container, and the watchdog that bounds them.

Docker multiplexes a command's stdout and stderr on one connection (an 8-byte
header per frame: stream, 0, 0, 0, size). These helpers feed a command's input
from a side thread, read its frames with memory bounded by the caps, and end a
command that outlives its deadline whatever the engine does.

Only the command's limits end it, never its silence: the connection is read in
short polls (``POLL_S``), not under the engine client's read timeout, and a
reader gives up only when the watchdog has ended the stream.

When the watchdog fires it asks the engine, within ``PROBE_S``, how the command
stands, because a command past its limit is either the sandbox's doing or the
engine's. The agent's uid runs the in-container ``timeout`` and the guard, so
the agent (or the code under test) can stop them (``kill -STOP -1``): the engine
then answers and says the command still runs, and the command is ended by
killing the container; that is the command's limit exceeded, a timeout
(``Verdict.HELD``). An engine that does not answer, that says the command ended
but never ends its stream, or whose container is paused (by the operator) is a
stalled engine: infrastructure (``Verdict.STALLED``).

The watchdog also looks every ``LIVENESS_S`` whether the command's container still
runs: when a sandbox's runtime dies (gVisor's sentry, of what ran in it) the engine
can lose its commands, whose output then never ends. A container that stopped ends
the command at once (``Verdict.GONE``); whose doing that was is for
``runner.sandbox.blame`` to say.
"""

from __future__ import annotations

import contextlib
import enum
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import docker

from runner.errors import SandboxError
from runner.sandbox.base import ExecRequest
from runner.sandbox.engine import API_ERRORS

# How often a reader (or the input's writer) of a quiet command looks whether the
# watchdog has ended the stream: a socket timeout that only wakes the loop.
POLL_S = 1.0
# How long the engine has to answer the fired watchdog's question.
PROBE_S = 5.0
# After the engine says the command ended, how long its stream may take to follow (the
# engine itself waits at most 2 s for a process's output before closing the stream).
STREAM_GRACE_S = 5.0
# How long a killing of the container may take before the watchdog stops waiting for it.
KILL_WAIT_S = 10.0
# How often the watchdog asks whether a command's container still runs.
LIVENESS_S = 3.0

T = TypeVar("T")


def raw_socket(sock: Any) -> socket.socket:
    """The plain socket under docker-py's hijacked exec connection."""
    raw = getattr(sock, "_sock", sock)
    if not isinstance(raw, socket.socket):
        raise SandboxError("Docker returned no socket for a command with input")
    return raw


def feed(raw: socket.socket, data: bytes, ended: Callable[[], bool] = lambda: False) -> None:
    """Write a command's input from a side thread, then close the write half.

    A side thread, so a command that writes much output before it reads its
    input cannot deadlock against this process. A command that reads its input
    late is waited for (the socket's poll timeout only wakes the loop) until
    ``ended`` says the watchdog has ended the stream.
    """

    def write() -> None:
        view = memoryview(data)
        with contextlib.suppress(OSError):
            while view:
                try:
                    view = view[raw.send(view[: 1 << 16]) :]
                except TimeoutError:
                    if ended():
                        return
            raw.shutdown(socket.SHUT_WR)

    threading.Thread(target=write, daemon=True, name="exec-stdin").start()


def frames(
    raw: socket.socket, ended: Callable[[], bool] | None = None
) -> Iterator[tuple[int, bytes]]:
    """(stream, payload) of Docker's multiplexed stream (8-byte header: stream, 0, 0, 0,
    size; stream 1 is stdout, 2 stderr). Memory: one frame plus one read at a time.

    With ``ended``, a socket timeout is a poll, not a failure: reading goes on until
    the stream ends or ``ended()`` (the watchdog ended it). Without, it raises."""
    buffer = bytearray()
    start = 0
    try:
        while True:
            try:
                chunk = raw.recv(1 << 16)
            except TimeoutError:
                if ended is None:
                    raise
                if ended():
                    break
                continue
            except OSError:
                if ended is not None and ended():
                    break  # the watchdog closed the socket under this read
                raise
            if not chunk:
                break
            buffer += chunk
            while len(buffer) - start >= 8:
                size = int.from_bytes(buffer[start + 4 : start + 8], "big")
                if len(buffer) - start < 8 + size:
                    break
                yield buffer[start], bytes(buffer[start + 8 : start + 8 + size])
                start += 8 + size
            if start:
                del buffer[:start]
                start = 0
    finally:
        with contextlib.suppress(OSError):
            raw.close()


def collect_frames(
    frames: Iterator[tuple[int, bytes]], cap: int, stderr_cap: int
) -> tuple[bytes, bool, bytes]:
    """Read an exec stream to its end: (output, truncated, stderr).

    With ``stderr_cap`` 0, stdout and stderr are one output, in arrival order;
    otherwise stderr is kept apart (at most ``stderr_cap`` bytes). ``output`` keeps
    at most ``cap`` bytes and ``truncated`` says whether more came.
    """
    parts: list[bytes] = []
    errors: list[bytes] = []
    kept = kept_err = 0
    truncated = False
    for stream, chunk in frames:
        if stderr_cap and stream == 2:
            if kept_err < stderr_cap:
                piece = chunk[: stderr_cap - kept_err]
                errors.append(piece)
                kept_err += len(piece)
            continue
        if kept < cap:
            piece = chunk[: cap - kept]
            parts.append(piece)
            kept += len(piece)
            if len(piece) < len(chunk):
                truncated = True
        else:
            truncated = True
    return b"".join(parts), truncated, b"".join(errors)


def stalled(deadline: float) -> str:
    return (
        f"Docker did not end a command within {deadline:.0f}s (a stalled engine?); "
        "the sandbox was abandoned to `deltarun gc`"
    )


GONE = "the sandbox's container stopped while a command ran in it"


def answered(call: Callable[[], T], within_s: float) -> T | None:
    """``call()``'s result, or None when it failed or did not return within ``within_s``
    (it then runs on in a daemon thread, abandoned: a stalled engine cannot hold us)."""
    box: list[T] = []

    def target() -> None:
        with contextlib.suppress(Exception):
            box.append(call())

    thread = threading.Thread(target=target, daemon=True, name="engine-probe")
    thread.start()
    thread.join(within_s)
    return box[0] if box else None


class Verdict(enum.Enum):
    """What a fired watchdog found."""

    ENDED = "ended"  # the command had ended and its stream came after all: nothing was wrong
    HELD = "held"  # the sandbox held the command past its limit: the container was killed
    STALLED = "stalled"  # the engine did not answer, or did not end the stream: infrastructure
    GONE = "gone"  # the container stopped under the command: ``runner.sandbox.blame`` decides


class Watchdog:
    """Ends a command that outlives its deadline plus a grace, whatever the engine does,
    or whose container stopped under it.

    Firing asks the engine about the command (``watch``) and its container, each
    call bounded; then, unless the command turns out to have ended, it ends the
    command's output stream (shut down, which wakes a blocked reader, then closed)
    and kills the container: within ``KILL_WAIT_S`` when the sandbox held the
    command, from an abandoned thread when the engine stalled (a stopped container
    is left as it is). Until the deadline it looks every ``LIVENESS_S`` whether the
    container still runs, and fires at once when it stopped. ``finish`` gives the
    verdict to the reader's thread.
    """

    def __init__(self, client: docker.APIClient, container: str, after_s: float) -> None:
        self.fired = False
        self.verdict: Verdict | None = None
        self._client = client
        self._container = container
        self._exec_id: str | None = None
        self._stream: Any = None
        self._lock = threading.Lock()
        self._ended = threading.Event()  # the watchdog ended the stream: readers stop
        self._done = threading.Event()  # the reader is done with the stream
        self._decided = threading.Event()
        self._until = time.monotonic() + after_s
        self._asking = False  # a liveness question is out, unanswered
        threading.Thread(target=self._watch, daemon=True, name="exec-watchdog").start()

    def _watch(self) -> None:
        """Fire at the deadline, or as soon as the container is seen stopped."""
        while not self._done.wait(max(0.0, min(LIVENESS_S, self._until - time.monotonic()))):
            if time.monotonic() >= self._until or self._stopped():
                self._fire()
                return

    def _stopped(self) -> bool:
        """The engine says the container no longer runs (paused is not stopped: the
        deadline decides that one). A question the engine does not answer is no answer,
        and none is asked while the last one is still out (a stalled engine)."""
        if self._asking:
            return False
        self._asking = True

        def ask() -> Any:
            try:
                return self._client.inspect_container(self._container)
            finally:
                self._asking = False

        within = max(0.1, min(PROBE_S, self._until - time.monotonic()))
        info = answered(ask, within)
        state = info.get("State") if isinstance(info, dict) else None
        return isinstance(state, dict) and not state.get("Running") and not state.get("Paused")

    def watch(self, exec_id: str) -> None:
        """The exec the engine is asked about when the watchdog fires. Without one (the
        engine never created the command) a fired watchdog can only blame the engine."""
        self._exec_id = exec_id

    def attach(self, stream: Any) -> None:
        with self._lock:
            self._stream = stream
        if self._ended.is_set():
            self._close()

    def ended(self) -> bool:
        """True once the watchdog has ended the stream: a reader stops polling."""
        return self._ended.is_set()

    def _close(self) -> None:
        self._ended.set()
        with self._lock:
            stream = self._stream
        if stream is None:
            return
        # Shut down first: closing a socket does not wake a thread blocked reading it.
        with contextlib.suppress(Exception):
            stream.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):
            stream.close()

    def _fire(self) -> None:
        self.fired = True
        verdict = Verdict.STALLED
        try:
            verdict = self._judge()
        finally:
            if verdict is not Verdict.ENDED:
                self._close()
            if verdict is Verdict.HELD:
                answered(self._kill, KILL_WAIT_S)  # the command ends with its container
            elif verdict is Verdict.STALLED:
                threading.Thread(target=self._kill, daemon=True).start()
            self.verdict = verdict
            self._decided.set()

    def _judge(self) -> Verdict:
        if self._done.is_set():
            return Verdict.ENDED  # the stream ended as the timer went off
        state = self._probe()
        if state is None:
            return Verdict.STALLED
        running, container = state
        if container == "stopped":
            return Verdict.GONE
        if container == "paused" or running is None:
            return Verdict.STALLED  # the operator paused it, or the engine lost the command
        if running:
            return Verdict.HELD  # its own `timeout` should have ended it long ago
        # The engine says the command ended: a working engine ends its stream at once.
        return Verdict.ENDED if self._done.wait(STREAM_GRACE_S) else Verdict.STALLED

    def _probe(self) -> tuple[bool | None, str] | None:
        """``_ask``, again after a failure, until the engine answers; None after ``PROBE_S``
        (a call that hangs is abandoned, a refusal is asked once more after a pause)."""
        until = time.monotonic() + PROBE_S
        while (left := until - time.monotonic()) > 0:
            state = answered(self._ask, left)
            if state is not None:
                return state
            time.sleep(min(0.5, max(0.0, until - time.monotonic())))
        return None

    def _ask(self) -> tuple[bool | None, str]:
        """(the exec still runs, or None when there is none; the container "running",
        "paused" or "stopped"), as the engine says. The container first: a stopped one
        has no commands left to ask about."""
        state = self._client.inspect_container(self._container).get("State") or {}
        if not state.get("Running"):
            return None, "stopped"
        if state.get("Paused"):
            return None, "paused"
        if self._exec_id is None:
            return None, "running"
        return bool(self._client.exec_inspect(self._exec_id).get("Running")), "running"

    def _kill(self) -> None:
        with contextlib.suppress(*API_ERRORS):
            self._client.kill(self._container)

    def cancel(self) -> None:
        """The reader is done: the deadline no longer matters."""
        self._done.set()

    def finish(self) -> Verdict | None:
        """The reader is done: None when the watchdog did not fire, else its verdict (waited
        for: every step of the judgement is bounded)."""
        self.cancel()
        if not self.fired:
            return None
        if not self._decided.wait(PROBE_S + STREAM_GRACE_S + KILL_WAIT_S + 5.0):
            return Verdict.STALLED
        return self.verdict


@dataclass(frozen=True)
class Streamed:
    """One exec read to its end: its output, and the watchdog's verdict if it fired."""

    exec_id: str
    output: bytes
    truncated: bool
    stderr: bytes
    verdict: Verdict | None  # None, ENDED or HELD: a stalled engine or a stopped sandbox raises


def stream_exec(
    client: docker.APIClient,
    container: str,
    request: ExecRequest,
    argv: list[str],
    deadline: float,
) -> Streamed:
    """Create and start an exec of ``argv``, feed it ``request.stdin``, read its output to
    the end under a watchdog of ``deadline`` seconds. ``SandboxError`` when the engine
    fails or stalls; ``Verdict.HELD`` (the container killed) when the sandbox held it."""
    # Started before the first call: a stalled engine is caught wherever it stalls.
    watchdog = Watchdog(client, container, deadline)
    exec_id = ""
    try:
        exec_id = str(
            client.exec_create(
                container,
                argv,
                user=request.user,
                workdir=request.workdir,
                environment=dict(request.env),
                stdout=True,
                stderr=True,
                stdin=request.stdin is not None,
            )["Id"]
        )
        watchdog.watch(exec_id)
        raw = raw_socket(client.exec_start(exec_id, socket=True))
        # Not the client's read timeout: a command may be silent as long as its limit
        # allows (a slow model, a quiet test); this timeout only makes the reads poll.
        raw.settimeout(POLL_S)
        watchdog.attach(raw)
        if request.stdin is not None:
            feed(raw, request.stdin, watchdog.ended)
        cap_err = request.stderr_cap if request.separate_stderr else 0
        output, truncated, stderr = collect_frames(
            frames(raw, watchdog.ended), request.output_cap, cap_err
        )
    except API_ERRORS as exc:
        verdict = watchdog.finish()
        if verdict is Verdict.HELD:
            return Streamed(exec_id, b"", False, b"", verdict)
        if verdict is Verdict.STALLED:
            raise SandboxError(stalled(deadline)) from exc
        if verdict is Verdict.GONE:
            raise SandboxError(GONE) from exc
        raise SandboxError(f"Docker failed while a command ran: {exc}") from exc
    finally:
        watchdog.cancel()
    verdict = watchdog.finish()
    if verdict is Verdict.STALLED:
        # The engine did not answer, or never ended the stream of a command it says has
        # ended: infrastructure, not the agent.
        raise SandboxError(stalled(deadline))
    if verdict is Verdict.GONE:
        raise SandboxError(GONE)  # whose doing: ``runner.sandbox.blame``, by the caller
    return Streamed(exec_id, output, truncated, stderr, verdict)
