"""Copying one file out of a sandbox, bounded in bytes and in time.

The engine's archive endpoint streams a tar of a path whatever its size, and a
file's size costs its writer nothing: an 80 GiB sparse answer file fits in a
small tmpfs and takes the engine most of an hour to stream. So a read is
bounded three ways:

1. the path's stat, which the engine sends as a header before the tar, says
   before any byte is read whether the path is a regular file (otherwise nothing
   is read) and whether it is over the cap: then it is truncated, and only the
   first ``cap`` bytes, which the interface returns, are read;
2. the tar stream is read only up to the cap and the tar's own headers
   (``runner.trees.archives.read_capped_tar_file``), then the response is closed, not
   drained, in case the file grew after the stat or the stat was wrong;
3. a timer ends the whole read at ``READ_WITHIN_S`` whatever the engine does:
   past it the engine, not the file, is at fault (``SandboxError``).

The request goes through the client's own HTTP session (``APIClient`` is a
``requests.Session``) rather than ``get_archive``, which hides its response
and so could only be stopped by reading it to the end.
"""

from __future__ import annotations

import base64
import contextlib
import json
import posixpath
import socket
import threading
from typing import Any

import docker
import requests

from runner.errors import SandboxError
from runner.sandbox.engine import API_ERRORS
from runner.trees.archives import read_capped_tar_file

READ_WITHIN_S = 60.0
CHUNK_BYTES = 1 << 16
STAT_HEADER = "X-Docker-Container-Path-Stat"
# Go's os.FileMode type bits (directory, symlink, device, named pipe, socket, character
# device, irregular): a path whose mode has none of them is a regular file.
GO_MODE_TYPE = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)


def read_file(
    client: docker.APIClient,
    container: str,
    path: str,
    cap: int,
    within_s: float = READ_WITHIN_S,
) -> tuple[bytes | None, bool]:
    """One regular file of ``container``: (at most ``cap`` bytes of it, truncated), None
    when absent, b"" when ``path`` is not a regular file; ``SandboxError`` when the
    engine fails or takes longer than ``within_s``."""
    url = f"{client.base_url}/v{client.api_version}/containers/{container}/archive"
    aborted = threading.Event()
    response: requests.Response | None = None

    def abort() -> None:
        aborted.set()
        if response is not None:
            _abort(response)

    timer = threading.Timer(within_s, abort)
    timer.daemon = True
    timer.start()
    try:
        response = client.get(
            url,
            params={"path": path},
            headers={"Accept-Encoding": "identity"},
            stream=True,
            timeout=min(float(client.timeout), within_s),
        )
        if aborted.is_set():
            _abort(response)
        if response.status_code == 404:
            return None, False
        if response.status_code != 200:
            raise SandboxError(f"Docker failed to copy {path} out: {_failure(response)}")
        stat = _stat(response.headers.get(STAT_HEADER))
        if _number(stat, "mode") & GO_MODE_TYPE:
            return b"", False
        over = _number(stat, "size") > cap
        name = posixpath.basename(path.rstrip("/"))
        data, truncated = read_capped_tar_file(response.iter_content(CHUNK_BYTES), name, cap)
    except Exception as exc:
        if aborted.is_set():  # whatever the cut stream raised
            raise SandboxError(_too_slow(path, within_s)) from exc
        if isinstance(exc, API_ERRORS):
            raise SandboxError(f"Docker failed to copy {path} out: {exc}") from exc
        raise
    finally:
        timer.cancel()
        if response is not None:
            response.close()
    if aborted.is_set():
        # The stream was cut by the timer: what was read says nothing about the file.
        raise SandboxError(_too_slow(path, within_s))
    return data, truncated or over


def _abort(response: requests.Response) -> None:
    """End a read in progress from another thread: shut the connection's socket down,
    which wakes a blocked read (closing would not) and leaves the closing to the reader;
    a transport without a plain socket has its response closed here instead."""
    raw: Any = response.raw
    sock = getattr(getattr(raw, "connection", None), "sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
            return
    with contextlib.suppress(Exception):
        response.close()


def _stat(header: str | None) -> dict[str, Any] | None:
    """The engine's stat of the path (name, size, mode, ...), None when absent or unreadable."""
    if not header:
        return None
    try:
        value = json.loads(base64.b64decode(header))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _number(stat: dict[str, Any] | None, key: str) -> int:
    value = (stat or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _failure(response: requests.Response) -> str:
    """The status and the start of the engine's message (never the whole body)."""
    with contextlib.suppress(*API_ERRORS):
        head = next(response.iter_content(512), b"")
        return f"{response.status_code} {head.decode('utf-8', 'replace').strip()}"
    return str(response.status_code)


def _too_slow(path: str, within_s: float) -> str:
    return f"Docker did not copy {path} out within {within_s:g}s (a stalled engine?)"
