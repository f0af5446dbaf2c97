"""deltarun-collector: the one reader of the verify phase's results channel.

Run by the harness as root (no capabilities) in the verify sandbox, alongside the
test command, with the image's own python3 (standard library only, python3 >= 3.6)::

    python3 -I -S collector.py SOCKET UID

It listens on a Unix socket at SOCKET (in a root-owned directory) and takes the first
connection from a process of UID (the test's uid): the harness's pytest, which connects
before any code of the workspace is imported, when no other process of that uid lives
(the harness swept them and counted none). Every byte that connection sends is copied
to this process's stdout, which only the host reads, up to a cap. Every later
connection is accepted, closed at once and counted: an honest session makes one, so
the host takes any other as tampering. Its own account goes to stderr as one JSON line:
``{"peer_pid", "bytes", "truncated", "eof", "extra"}`` (peer_pid 0 when nothing
connected).

Why a socket to another uid: the test process can write its reports but never
read back or rewrite one already sent. A socket does not echo, ``/proc/PID/fd`` of
a socket cannot be reopened, and this process (root) can be neither signalled nor
traced by the test's uid. A pipe to the exec's stderr would not do: every process
of the uid (``timeout``, ``sh``) holds that pipe and ``/proc/PID/fd/2`` reopens it
for reading.

It ends when the connection closes (the harness kills every process of the test's
uid after pytest), or, when the host closes stdin, at once if nothing connected and
after a short grace otherwise.
"""

import json
import os
import select
import socket
import struct
import sys
import time

CAP = 16 << 20
GRACE_S = 2.0
CHUNK = 1 << 16


def _peer(conn: "socket.socket") -> "tuple[int, int]":
    """(pid, uid) of the connected process (SO_PEERCRED: pid, uid, gid as three ints)."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(1, view) :]
        except InterruptedError:
            continue


def serve(path: str, uid: int) -> "dict[str, object]":
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o666)  # the test's uid must be able to connect; the directory is root's
    listener.listen(4)
    conn = None  # type: socket.socket | None
    peer_pid, total, truncated, eof, extra = 0, 0, False, False, 0
    host_done_at = None  # type: float | None
    while True:
        timeout = None  # type: float | None
        if host_done_at is not None:
            if conn is None:
                break  # the test command ended without connecting
            timeout = max(0.0, host_done_at + GRACE_S - time.monotonic())
            if timeout == 0.0:
                break
        watched = [0, listener.fileno()] + ([conn.fileno()] if conn is not None else [])
        try:
            ready, _, _ = select.select(watched, [], [], timeout)
        except InterruptedError:
            continue
        if 0 in ready and host_done_at is None and not os.read(0, CHUNK):
            host_done_at = time.monotonic()
        if listener.fileno() in ready:
            candidate, _ = listener.accept()
            pid, peer_uid = _peer(candidate)
            # gVisor (runsc) answers SO_PEERCRED of an accepted socket with the listener's
            # own credentials: no peer can be told apart there, and the sandbox holds no
            # other uid than root's harness and the test's. A real kernel never names us.
            if conn is not None or (peer_uid != uid and pid != os.getpid()):
                candidate.close()  # one reporter, of the test's uid; any other is counted
                extra += 1
                continue
            conn, peer_pid = candidate, pid
            conn.shutdown(socket.SHUT_WR)  # nothing ever travels back
        elif conn is not None and conn.fileno() in ready:
            data = conn.recv(CHUNK)
            if not data:
                eof = True
                break
            room = max(0, CAP - total)
            if room:
                _write_all(data[:room])
                total += min(room, len(data))
            truncated = truncated or len(data) > room
    listener.close()
    try:
        os.unlink(path)
    except OSError:
        pass
    return {
        "peer_pid": peer_pid,
        "bytes": total,
        "truncated": truncated,
        "eof": eof,
        "extra": extra,
    }


def main(args: "list[str]") -> int:
    if len(args) != 2 or not args[1].isdigit():
        os.write(2, b"usage: collector.py SOCKET UID\n")
        return 2
    account = serve(args[0], int(args[1]))
    os.write(2, (json.dumps(account) + "\n").encode("ascii"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
