"""Scaling a worker down without losing work: SIGTERM drains, a second one (or the drain
timeout) hands the unfinished jobs back at once.

SIGTERM to a worker's main process starts Celery's warm shutdown: no new job is
taken and the trials in flight run to their end, are recorded, and the worker
exits 0. A worker that must go sooner gets a second SIGTERM, or reaches
``--drain-timeout``: then, for each trial still running in one of its pool
processes, the lease is released, the pool process is killed and its sandboxes
are removed. The coordinator re-queues a started job whose lease is gone on its
next pass (seconds), not after the visibility timeout, and Celery hands the
message back too (``task_reject_on_worker_lost``); the lease and the done set turn
the second delivery into a skip, so nothing is recorded twice.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import redis

from runner.distributed import keys

log = logging.getLogger("deltarun.worker")
EXIT_GRACE_S = 60.0


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


class Drain:
    """The main process's side of a scale-down (see the module docstring)."""

    def __init__(
        self,
        client: redis.Redis,
        name: str,
        timeout_s: float,
        say: Callable[[str], None],
        reap: Callable[[], list[str]],
    ) -> None:
        self.client = client
        self.name = name
        self.timeout_s = timeout_s
        self.say = say
        self.reap = reap
        self.started = False
        self.released = False
        self._lock = threading.Lock()

    def on_shutting_down(self, sig: Any = None, how: str = "", **_: Any) -> None:
        """Celery's ``worker_shutting_down``, in the main process, from its signal handler."""
        if how != "Warm" or self.started:
            return
        self.started = True
        self.say(
            f"draining: no new jobs; the trials in flight finish (up to {self.timeout_s:g}s; "
            "SIGTERM again hands them back now)"
        )
        signal.signal(signal.SIGTERM, lambda *_: self.release("a second SIGTERM"))
        timer = threading.Timer(self.timeout_s, self.release, args=("the drain timeout",))
        timer.daemon = True
        timer.start()

    def release(self, why: str) -> None:
        """Hand every unfinished job of this worker's pool back and stop its processes."""
        with self._lock:
            if self.released:
                return
            self.released = True
        held = self.held()
        for key, holder, pid in held:
            try:
                if self.client.get(key) == holder.encode():
                    self.client.delete(key)
            except redis.RedisError as exc:
                log.warning("drain: lease %s not released (%s); it expires by itself", key, exc)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for line in self.reap():
            if line != "nothing to remove":
                self.say(f"reaper: {line}")
        self.say(
            f"drain: {why}: released {len(held)} unfinished job(s); the coordinator "
            "re-queues them now"
        )
        # Celery finishes its shutdown once it sees its pool processes gone; if it does
        # not, the worker still exits.
        guard = threading.Timer(EXIT_GRACE_S, os._exit, args=(0,))
        guard.daemon = True
        guard.start()

    def held(self) -> list[tuple[str, str, int]]:
        """(lease key, holder, pid) of the leases this worker's pool processes hold."""
        found = []
        me = os.getpid()
        try:
            for key in self.client.scan_iter(match=f"{keys.PREFIX}:lease:*", count=1000):
                value = self.client.get(key)
                if value is None:
                    continue
                holder = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
                name, _, pid_text = holder.rpartition(":")
                if name != self.name or not pid_text.isdigit():
                    continue
                pid = int(pid_text)
                if _parent_of(pid) == me:
                    found.append((key.decode() if isinstance(key, bytes) else key, holder, pid))
        except redis.RedisError as exc:
            log.warning("drain: cannot list leases (%s)", exc)
        return found
