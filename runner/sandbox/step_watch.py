"""A watch beside one build: a thread that may kill the build step running now, for the
reason a subclass gives (``runner.sandbox.build_deadline``: the time is up;
``runner.sandbox.build_disk``: the build wrote too much). A step is killed as the engine
kills one whose client went away: the build ends there, failed, and the caller says why.

The step is the container the build log names last, checked with the engine
(``runner.sandbox.build_log``); the builder tells each watch (``running``).
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any, Self

from runner.sandbox.engine import API_ERRORS


class StepWatch:
    """``with Watch(client, ...) as watch:`` around one build; ``_run`` (the subclass's)
    runs on a thread of its own until the build ends (``_done`` is set then)."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self._step: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._done.set()
        self._thread.join()

    def running(self, step: str) -> None:
        """Note the step container the build runs now."""
        self._step = step

    def _kill(self, step: str) -> None:
        try:
            self.client.kill(step)
        except API_ERRORS:
            pass  # it ended already

    def _run(self) -> None:
        raise NotImplementedError
