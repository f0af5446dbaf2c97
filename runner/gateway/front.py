"""The gateway's front door: how many connections it serves at once, and how much of a
request's head it reads.

Each connection is a thread, and the gateway's container has 64 pids and 256 MiB: so at
most ``MAX_CONNECTIONS`` are served at once, and one more is answered 503 at once and
closed (counted as ``busy``), never given a thread. A request's head (its request line
aside, which http.server caps at 64 KiB) is read to ``MAX_HEAD_BYTES`` at most, so what
heads held open take together stays small; past it the request gets 431.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from io import BufferedIOBase
from typing import Any

MAX_CONNECTIONS = 48
MAX_HEAD_BYTES = 64 << 10
BUSY_BODY = json.dumps(
    {
        "error": {
            "message": "deltarun model gateway: too many connections held open",
            "type": "gateway_error",
        }
    }
).encode()
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(BUSY_BODY)
) + BUSY_BODY


class HeadReader:
    """A request's stream while its headers are read: ``readline`` stops at the head's cap."""

    def __init__(self, stream: BufferedIOBase, cap: int = MAX_HEAD_BYTES) -> None:
        self.stream = stream
        self.left = cap

    def readline(self, limit: int = -1) -> bytes:
        if self.left <= 0:
            raise http.client.LineTooLong("request head")
        most = self.left + 1 if limit < 0 else min(limit, self.left + 1)
        line = self.stream.readline(most)
        self.left -= len(line)
        if self.left < 0:
            raise http.client.LineTooLong("request head")
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class Server(ThreadingHTTPServer):
    """A threading server that serves at most ``limit`` connections at once; ``refused``
    counts one turned away."""

    daemon_threads = True
    # Connections waiting to be accepted: a burst past the default 5 would wait on the
    # client's SYN retries, a second each, before even being turned away.
    request_queue_size = 2 * MAX_CONNECTIONS

    def __init__(
        self,
        address: tuple[str, int],
        handler: Any,
        refused: Callable[[], None],
        limit: int = MAX_CONNECTIONS,
    ) -> None:
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(limit)
        self.refused = refused

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.turn_away(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()  # no thread took it
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def turn_away(self, request: socket.socket) -> None:
        """Count the connection, then answer it 503 and close it (the count comes first,
        as for every other refusal)."""
        try:
            self.refused()
            request.settimeout(1.0)
            request.sendall(BUSY)
        except OSError:
            pass
        finally:
            self.shutdown_request(request)
