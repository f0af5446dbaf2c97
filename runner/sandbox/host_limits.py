"""A sandbox's limits against the machine that runs it: no sandbox asks for more memory than
the engine's machine has.

Swap is off in a sandbox (its swap limit is its memory limit), so a memory limit above the
machine's memory is no limit: the agent, or a suite's tests, could take the whole machine's
memory (its tmpfs mounts too, which are charged to the sandbox) and the kernel would kill
whatever it picks on the host, the engine or Redis among them. The suite's controls name
the limits, and a suite is hostile until proven otherwise, so every sandbox is checked,
on the machine that opens it (a fleet's workers differ), once the engine said its size.
"""

from __future__ import annotations

import threading
from typing import Any

from runner.errors import UserError
from runner.sandbox.base import Limits
from runner.sandbox.engine import API_ERRORS
from runner.sizes import format_size


class OverMachine(UserError):
    """A limit over what the machine has; the run's preparation names the controls file."""


class HostCeiling:
    """The engine's machine memory, asked once; ``check`` refuses limits above it."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._memory: int | None = None
        self._lock = threading.Lock()

    def memory(self) -> int:
        """The engine's machine memory in bytes (0 when the engine will not say)."""
        with self._lock:
            if self._memory is None:
                try:
                    self._memory = int(self.client.info().get("MemTotal") or 0)
                except (*API_ERRORS, TypeError, ValueError):
                    self._memory = 0
            return self._memory

    def check(self, limits: Limits) -> None:
        total = self.memory()
        if total and limits.memory_bytes > total:
            raise OverMachine(
                f"runtime.limits.memory: {format_size(limits.memory_bytes)} is more than this "
                f"machine's memory ({format_size(total)}); swap is off in a sandbox, so it would "
                f"be no limit: set it at most {format_size(total)} in the controls"
            )
