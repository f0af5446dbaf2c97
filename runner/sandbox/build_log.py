"""What a classic build's log says, checked against the engine: the step container each
``RUN`` runs in, and the image each step commits.

The build stream mixes the builder's lines (`` ---> Running in <id>``, `` ---> <id>``) with
the output of the steps, which a suite writes: a step can print a line that looks like the
builder's. Believed as printed, such a line would have deltarun cap, kill or count a
container or an image the build does not own. So each line is checked with the engine:

- an image a line names continues the build only when its parent is the image the build
  stands on now (the classic builder commits each step on its parent). Any other starts
  the chain again (the base of a ``FROM``), but only between steps: while a step runs, its
  output can name an image it can know (a public base's ID), and the build stays where
  it stands, so no chain of the step's own escapes the count, the caps and the deadline.
  The bytes of the chain's layers made since the build began are counted (``written``:
  each image's size less its parent's); a step the engine's cache answered wrote nothing
  now;
- a container a line names is a step only when it runs on the image the build stands on
  and was created after the build began (by the engine's clock): a container created
  before the build is refused whatever its image, and one created since on the same
  image would need its ID to reach a step that has no network and no engine socket.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from runner.sandbox.build_steps import running_step
from runner.sandbox.engine import API_ERRORS

_LAYER = re.compile(r"\A ---> ([0-9a-f]{12,64})\s*\Z")
_STAMP = re.compile(r"\A(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)\Z")


class BuildLog:
    """``log.read(event)`` for each event of one build stream: the step container the event
    starts, if it starts one; ``written`` the bytes the build's layers added to the images
    it stands on."""

    def __init__(self, client: Any) -> None:
        """Made as the build begins: the engine's clock is read now."""
        self.client = client
        self.written = 0
        self._head: tuple[str, int] | None = None  # (ID, size) of the image the build stands on
        self._in_step = False  # a step runs on the head: only its commit moves the head
        try:
            self._began = engine_time(str(client.info().get("SystemTime") or ""))
        except API_ERRORS:
            self._began = None  # no clock: every step the image check lets through

    def read(self, event: Any) -> str | None:
        text = event.get("stream") if isinstance(event, dict) else None
        if not isinstance(text, str):
            return None
        committed = _LAYER.match(text)
        if committed is not None:
            self._committed(committed.group(1))
            return None
        step = running_step(event)
        if step is None or self._head is None:
            return None
        # Between two steps the log holds only the builder's lines: from this one on, a step
        # runs (and prints), whether or not its container is still there to confirm it.
        self._in_step = True
        return step if self._runs_on(step, self._head[0]) else None

    def _committed(self, image: str) -> None:
        try:
            found = self.client.inspect_image(image)
        except API_ERRORS:
            return  # no such image (a step's output), or removed already: nothing to stand on
        image_id, size = str(found.get("Id") or ""), int(found.get("Size") or 0)
        continues = self._head is not None and found.get("Parent") == self._head[0]
        if not continues and self._in_step:
            return  # printed by the running step (a public image's ID): the build stays put
        if self._head is not None and continues and self._made_since(found):
            self.written += max(0, size - self._head[1])
        self._head, self._in_step = (image_id, size), False

    def _runs_on(self, step: str, image_id: str) -> bool:
        try:
            found = self.client.inspect_container(step)
        except API_ERRORS:
            return False  # ended and removed already: nothing to cap
        return found.get("Image") == image_id and self._made_since(found)

    def _made_since(self, found: dict[str, Any]) -> bool:
        """Whether the engine made this container or image after the build began (yes when
        the engine gave no clock)."""
        created = engine_time(str(found.get("Created") or ""))
        return self._began is None or (created is not None and created >= self._began)


def engine_time(text: str) -> float | None:
    """Seconds since the epoch of one of the engine's RFC 3339 times (nanoseconds cut to
    microseconds), or None when ``text`` is not one."""
    found = _STAMP.match(text)
    if found is None:
        return None
    fraction = (found.group(2) or ".0")[:7]
    zone = "+00:00" if found.group(3) == "Z" else found.group(3)
    return datetime.fromisoformat(found.group(1) + fraction + zone).timestamp()
