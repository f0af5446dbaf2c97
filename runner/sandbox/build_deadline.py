"""A build's deadline: the engine's classic builder gives a build no time limit of its own,
and a suite's Dockerfile is hostile until proven otherwise (``RUN sleep infinity``, or a
step that prints a line a minute and never ends, would hold ``deltarun build`` for ever).

Past the deadline the step running then is killed, as the engine kills a step whose client
went away: the build ends there, failed, and the caller says why. The step is the container
the build log names last, checked with the engine (``runner.sandbox.build_log``); it is
killed again each second until the build ends, so a step that starts after the deadline
ends too.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from runner.sandbox.engine import API_ERRORS

DEFAULT_DEADLINE_S = 3600.0
_AGAIN_S = 1.0


class BuildDeadline:
    """``with BuildDeadline(client, seconds) as deadline:`` around one build; tell it each
    step container the build starts (``running``); ``expired`` says the deadline passed."""

    def __init__(self, client: Any, seconds: float) -> None:
        self.client = client
        self.seconds = seconds
        self.expired = False
        self._step: str | None = None
        self._done = threading.Event()
        self._watch = threading.Thread(target=self._run, name="build-deadline", daemon=True)

    def __enter__(self) -> BuildDeadline:
        self._watch.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._done.set()
        self._watch.join()

    def running(self, step: str) -> None:
        """Note the step container the build runs now."""
        self._step = step

    def _run(self) -> None:
        if self._done.wait(self.seconds):
            return
        self.expired = True
        while True:
            step = self._step
            if step is not None:
                try:
                    self.client.kill(step)
                except API_ERRORS:
                    pass  # it ended already
            if self._done.wait(_AGAIN_S):
                return
