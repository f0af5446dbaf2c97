"""What a build may write to the engine's disk: the layers its steps commit and the step
running now, in all at most a cap.

The classic builder gives a build no disk limit (overlay2 has none without XFS project
quotas), and a suite's Dockerfile is hostile until proven otherwise: one ``RUN fallocate -l
500G /x``, or a loop writing zeros, would fill the disk of the engine's machine, and the
engine, Redis's journal and every other writer there would fail until someone removed it.

So the build's writes are counted as the engine counts them: each layer a step commits
(the image's size after the step less its size before; a ``FROM`` starts a stage from its
base image, which the build did not write), and the writable layer of the step running now
(the engine's ``SizeRw``, asked about once a second). Past the cap the running step is
killed, as the deadline kills one (``runner.sandbox.build_deadline``), and so is every step
the build starts after. Sizes are apparent sizes: a sparse file counts at its length, which
is what the image holds once it is saved or pushed (and what the engine reads to commit it).

What a step writes between two looks lands before the kill: past the cap by at most a
second of the disk's write rate. A look walks the step's writable layer, which takes
longer for a step with many files: the next look waits at least ten times as long as the
last took, so asking costs the engine at most a tenth of its time.
"""

from __future__ import annotations

import re
import threading
import time
from types import TracebackType
from typing import Any

from runner.sandbox.engine import API_ERRORS

DEFAULT_BUILD_DISK = 32 << 30
_EVERY_S = 1.0
_ASKING_SHARE = 10  # wait at least this many times as long as a look took
_FROM = re.compile(r"^Step \d+/\d+ : FROM\s", re.IGNORECASE)
_LAYER = re.compile(r"^ ---> ([0-9a-f]{12,64})\s*$")


class BuildDisk:
    """``with BuildDisk(client, cap_bytes) as disk:`` around one build; give it each event of
    the build stream (``read``) and each step container the build starts (``running``);
    ``over`` says the build wrote more than ``cap_bytes``."""

    def __init__(self, client: Any, cap_bytes: int, every_s: float = _EVERY_S) -> None:
        self.client = client
        self.cap_bytes = cap_bytes
        self.every_s = every_s
        self.written = 0  # by the layers committed so far
        self.over = False
        self._size: int | None = None  # of the image the build stands on now
        self._stage = False  # a FROM was read: the next layer is a stage's base
        self._step: str | None = None
        self._done = threading.Event()
        self._watch = threading.Thread(target=self._run, name="build-disk", daemon=True)

    def __enter__(self) -> BuildDisk:
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

    def read(self, event: Any) -> None:
        """Count the layer an event of the build stream names as committed, if it names one."""
        text = event.get("stream") if isinstance(event, dict) else None
        if not isinstance(text, str):
            return
        if _FROM.match(text):
            self._stage = True
            return
        found = _LAYER.match(text)
        if found is None:
            return
        size = self._image_size(found.group(1))
        if not self._stage and self._size is not None:
            self.written += max(0, size - self._size)
        self._size, self._stage = size, False
        if self.written > self.cap_bytes:
            self.over = True

    def running(self, step: str) -> None:
        """Note the step container the build runs now; killed at once when the build is over
        its cap already."""
        self._step = step
        if self.over:
            self._kill(step)

    def _image_size(self, image: str) -> int:
        try:
            return int(self.client.inspect_image(image).get("Size") or 0)
        except API_ERRORS:
            return self._size or 0  # gone already: counted as no growth

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
        try:
            self.client.kill(step)
        except API_ERRORS:
            pass  # it ended already

    def _run(self) -> None:
        wait = self.every_s
        while not self._done.wait(wait):
            step = self._step
            if step is None:
                continue
            started = time.monotonic()
            if self.over or self.written + self._step_size(step) > self.cap_bytes:
                self.over = True
                self._kill(step)
            wait = max(self.every_s, _ASKING_SHARE * (time.monotonic() - started))
