"""The write-only channel from a test process to the harness's collector, and what every
launcher (``run_pytest.py``, ``run_unittest.py``, ``run_sympy.py``) does the same way:
read its spec, connect, say ``start``, and the one selection rule. Each record is one
JSON line on a socket whose one reader is ``collector.py``, of another uid. Stdlib only;
Python >= 3.6."""

import json
import sys
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


def start() -> "tuple[dict[str, Any], Channel]":
    """The launcher's spec, read whole from standard input and then closed, and the
    channel, on which ``start`` is said before any code of the workspace is imported."""
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    channel = connect(spec["channel"])
    channel.send({"t": "start"})
    return spec, channel


def add_user_site(spec: "dict[str, Any]") -> None:
    """The user site, when the task's install step put the project there."""
    if spec.get("user_site"):
        import site

        site.addsitedir(site.getusersitepackages())


def selected(nodeid: str, entries: "list[str]") -> bool:
    """Does an entry of the selection (node id, file, directory or ``file::Class``) name
    this test? The host's rule is ``runner.trees.declared.matches``: an id SWE-bench's
    parser cut at a space (``test_x[a``) names every test it prefixes."""
    for entry in entries:
        entry = entry.rstrip("/")
        name = entry.rsplit("::", 1)[-1]
        if "::" in entry and name.count("[") > name.count("]"):
            if nodeid.startswith(entry):
                return True
            continue
        if nodeid == entry or nodeid.startswith(entry + "::") or nodeid.startswith(entry + "/"):
            return True
    return False
