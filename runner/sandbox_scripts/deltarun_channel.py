"""The write-only channel from a test process to the harness's collector. Stdlib only;
Python >= 3.6. Used by every launcher (``run_pytest.py`` through the plugin,
``run_unittest.py``, ``run_sympy.py``): each record is one JSON line on a socket whose one
reader is ``collector.py``, of another uid."""

import json
from typing import Any


class Channel:
    """Write-only records to the harness's collector."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock

    def send(self, record: "dict[str, Any]") -> None:
        # A newline before as well as after: a partial line someone else wrote on the
        # channel ends there, and never swallows the harness's record.
        data = ("\n" + json.dumps(record, separators=(",", ":")) + "\n").encode("ascii")
        try:
            self.sock.sendall(data)
        except OSError:
            pass  # the collector is gone: the harness sees the missing records


def connect(path: str, wait_s: float = 30.0) -> Channel:
    """The channel to the collector, which may still be starting: retried for a while."""
    import socket
    import time

    deadline = time.monotonic() + wait_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            sock.shutdown(socket.SHUT_RD)
            return Channel(sock)
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
