"""What a build may write to the engine's disk: the layers its steps commit and the step
running now, in all at most a cap.

The classic builder gives a build no disk limit (overlay2 has none without XFS project
quotas), and a suite's Dockerfile is hostile until proven otherwise: one ``RUN fallocate -l
500G /x``, or a loop writing zeros, would fill the disk of the engine's machine, and the
engine, Redis's journal and every other writer there would fail until someone removed it.

So the build's writes are counted as the engine counts them: the layers its steps commit
(``runner.sandbox.build_log``: each image's size less its parent's) and the writable layer
of the step running now (the engine's ``SizeRw``, asked about once a second). Past the cap
the running step is killed (``runner.sandbox.step_watch``), and so is every step the
build starts after. Sizes are apparent sizes: a sparse file counts
at its length, which is what the image holds once it is saved or pushed (and what the
engine reads to commit it).

What a step writes between two looks lands before the kill: past the cap by at most a
second of the disk's write rate. A look walks the step's writable layer, which takes
longer for a step with many files: the next look waits at least ten times as long as the
last took, so asking costs the engine at most a tenth of its time.
"""

from __future__ import annotations

import time
from typing import Any

from runner.sandbox.build_log import BuildLog
from runner.sandbox.engine import API_ERRORS
from runner.sandbox.step_watch import StepWatch

DEFAULT_BUILD_DISK = 32 << 30
_EVERY_S = 1.0
_ASKING_SHARE = 10  # wait at least this many times as long as a look took


class BuildDisk(StepWatch):
    """``with BuildDisk(client, cap_bytes, log) as disk:`` around one build, ``log`` the
    build's ``BuildLog``; tell it each step container the build starts (``running``);
    ``over`` says the build wrote more than ``cap_bytes``."""

    def __init__(
        self, client: Any, cap_bytes: int, log: BuildLog, every_s: float = _EVERY_S
    ) -> None:
        super().__init__(client, "build-disk")
        self.cap_bytes = cap_bytes
        self.log = log
        self.every_s = every_s
        self._killed = False

    @property
    def over(self) -> bool:
        """Whether the build went past its cap: a step killed for it, or its layers past it."""
        return self._killed or self.log.written > self.cap_bytes

    def running(self, step: str) -> None:
        """Note the step container the build runs now; killed at once when the build is over
        its cap already."""
        super().running(step)
        if self.over:
            self._kill(step)

    def _step_size(self, step: str) -> int:
        """The step's writable layer, as the engine counts it (``GET /containers/{id}/json
        ?size=1``: docker-py's ``inspect_container`` does not ask for it)."""
        try:
            url = self.client._url("/containers/{0}/json", step)
            answer = self.client._result(self.client._get(url, params={"size": 1}), True)
        except API_ERRORS:
            return 0  # ended already: its layer is committed, or gone
        return int(answer.get("SizeRw") or 0)

    def _kill(self, step: str) -> None:
        self._killed = True
        super()._kill(step)

    def _run(self) -> None:
        wait = self.every_s
        while not self._done.wait(wait):
            step = self._step
            if step is None:
                continue
            started = time.monotonic()
            if self.over or self.log.written + self._step_size(step) > self.cap_bytes:
                self._kill(step)
            wait = max(self.every_s, _ASKING_SHARE * (time.monotonic() - started))
