"""The byte streams of a command run in a container, and the watchdog that bounds them.

Docker multiplexes a command's stdout and stderr on one connection (an 8-byte
header per frame: stream, 0, 0, 0, size). These helpers feed a command's input
from a side thread, read its frames with memory bounded by the caps, and end a
command that outlives its deadline whatever the engine does."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import docker

from runner.errors import SandboxError
from runner.sandbox.engine import API_ERRORS


def raw_socket(sock: Any) -> socket.socket:
    """The plain socket under docker-py's hijacked exec connection."""
    raw = getattr(sock, "_sock", sock)
    if not isinstance(raw, socket.socket):
        raise SandboxError("Docker returned no socket for a command with input")
    return raw


def feed(raw: socket.socket, data: bytes) -> None:
    """Write a command's input from a side thread, then close the write half.

    A side thread, so a command that writes much output before it reads its
    input cannot deadlock against this process.
    """

    def write() -> None:
        with contextlib.suppress(OSError):
            raw.sendall(data)
            raw.shutdown(socket.SHUT_WR)

    threading.Thread(target=write, daemon=True, name="exec-stdin").start()


def frames(raw: socket.socket) -> Iterator[tuple[int, bytes]]:
    """(stream, payload) of Docker's multiplexed stream (8-byte header: stream, 0, 0, 0,
    size; stream 1 is stdout, 2 stderr). Memory: one frame plus one read at a time."""
    buffer = bytearray()
    start = 0
    while True:
        chunk = raw.recv(1 << 16)
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


class Watchdog:
    """Ends a command that outlives its deadline plus a grace, whatever the engine does.

    Firing closes the command's output stream (which unblocks the reader even if
    the engine stalls) and asks the engine, from a separate thread, to kill the
    container: a stalled kill cannot hold the trial.
    """

    def __init__(self, client: docker.APIClient, container: str, after_s: float) -> None:
        self.fired = False
        self._client = client
        self._container = container
        self._stream: Any = None
        self._timer = threading.Timer(after_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def attach(self, stream: Any) -> None:
        self._stream = stream
        if self.fired:
            self._close()

    def _close(self) -> None:
        with contextlib.suppress(Exception):
            if self._stream is not None:
                self._stream.close()

    def _fire(self) -> None:
        self.fired = True
        self._close()
        threading.Thread(target=self._kill, daemon=True).start()

    def _kill(self) -> None:
        with contextlib.suppress(*API_ERRORS):
            self._client.kill(self._container)

    def cancel(self) -> None:
        self._timer.cancel()
