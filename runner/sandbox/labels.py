"""Who owns a sandbox: the labels every container and volume carries, and the identities
in them, so that a reaper tells a live owner from a dead one (``runner.sandbox.reaper``).

``pid`` is the owning process as ``pid:start-time`` (a reused pid has another start
time); ``host`` is this machine's boot and this process's PID namespace: two processes
whose identities are equal see the same pids.
"""

from __future__ import annotations

import os

LABEL_PREFIX = "deltarun."


def process_identity(pid: int) -> str:
    """``pid:start-time``: tells a live owner from a reused pid (a restarted worker container)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return f"{pid}:{fields[19]}"  # field 22 of stat: start time since boot
    except (OSError, IndexError):
        return f"{pid}:0"


def host_identity() -> str:
    """This machine's boot and this process's PID namespace: two processes whose identities
    are equal see the same pids, so one may tell whether the other's owner is still alive.
    A worker in a container has a PID namespace of its own, so a gc on the host never
    judges its sandboxes by the host's pids."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{boot}/{namespace}"


def alive(identity: str) -> bool:
    """Is the process named by a ``pid:start-time`` label still the one that made the sandbox?"""
    pid_text, _, start = identity.partition(":")
    if not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _state(int(pid_text)) in ("Z", "X"):
        return False  # a zombie: dead, not yet reaped by a parent that was killed too
    return process_identity(int(pid_text)) == identity or not start or start == "0"


def _state(pid: int) -> str:
    """The process state letter of ``/proc/PID/stat`` (R, S, Z...), or "" if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""
