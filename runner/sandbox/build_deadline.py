"""A build's deadline: the engine's classic builder gives a build no time limit of its own,
and a suite's Dockerfile is hostile until proven otherwise (``RUN sleep infinity``, or a
step that prints a line a minute and never ends, would hold ``deltarun build`` for ever).

Past the deadline the step running then is killed (``runner.sandbox.step_watch``), and
again each second until the build ends, so a step that starts after the deadline ends too.
"""

from __future__ import annotations

from typing import Any

from runner.sandbox.step_watch import StepWatch

DEFAULT_DEADLINE_S = 3600.0
_AGAIN_S = 1.0


class BuildDeadline(StepWatch):
    """``with BuildDeadline(client, seconds) as deadline:`` around one build; tell it each
    step container the build starts (``running``); ``expired`` says the deadline passed."""

    def __init__(self, client: Any, seconds: float) -> None:
        super().__init__(client, "build-deadline")
        self.seconds = seconds
        self.expired = False

    def _run(self) -> None:
        if self._done.wait(self.seconds):
            return
        self.expired = True
        while True:
            step = self._step
            if step is not None:
                self._kill(step)
            if self._done.wait(_AGAIN_S):
                return
