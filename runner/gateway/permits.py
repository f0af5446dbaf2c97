"""The route's shared rate limits, as the proxy keeps them: a request is forwarded only with a
permit, and a 429 from the upstream is waited out and asked again, not passed to the agent.

The gate is on once ``PERMITS_FILE`` exists in the ledger's directory: the harness's relay
on the worker writes it (0 at first) before the sandbox starts when the controls give
``rate_limits`` for the route's model. The limits themselves are not here: the relay
(runner.sandbox.gateway_rates) takes permits from the route's fleet-wide limiter (Redis on a
fleet) and writes their running total into that file; the proxy reads it, and reports in
its totals (``rate``) how many permits its requests asked for and used, how many are in
flight, and each 429 it met with the wait its ``Retry-After`` asked for, which the relay
turns into one backoff for every gateway of the route. Nothing the agent sends reaches
the limiter or the file.

A request waits for its permit at most ``WAIT_S``; past it the agent gets 503 (the route is
saturated: counted ``rate_wait``). A 429 is asked again after its ``Retry-After`` (at least
``MIN_BACKOFF_S``, at most ``MAX_BACKOFF_S``) up to ``RETRIES_429`` times, each with a new
permit; the last one goes to the agent as it came.
"""

from __future__ import annotations

import email.utils
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Protocol, TypeVar

PERMITS_FILE = "rate-permits"
WAIT_S = 600.0
POLL_S = 0.05
RETRIES_429 = 5
MIN_BACKOFF_S = 0.5
MAX_BACKOFF_S = 120.0


def retry_after(headers: Iterable[tuple[str, str]], now: datetime | None = None) -> float:
    """Seconds a 429's ``Retry-After`` asks for (seconds or an HTTP date), within bounds."""
    value = next((v for k, v in headers if k.lower() == "retry-after"), "").strip()
    seconds = MIN_BACKOFF_S
    if value.replace(".", "", 1).isdigit():
        seconds = float(value)
    elif value:
        try:
            when = email.utils.parsedate_to_datetime(value)
            seconds = (when - (now or datetime.now(UTC))).total_seconds()
        except (TypeError, ValueError, IndexError, OverflowError):
            seconds = MIN_BACKOFF_S
    return min(max(seconds, MIN_BACKOFF_S), MAX_BACKOFF_S)


class RateGate:
    """Permits of one gateway; ``report`` writes the state into the ledger's totals."""

    def __init__(self, directory: str | None, report: Callable[[dict[str, object]], None]) -> None:
        self.path = os.path.join(directory, PERMITS_FILE) if directory else None
        self.report = report
        self._lock = threading.Lock()
        self.asked = self.used = self.in_flight = self.limited = 0
        self.waited_s = 0.0  # the Retry-After of the last 429
        self.paused_until = 0.0  # this gateway's own wait after a 429 (monotonic)
        self._granted = 0

    def active(self) -> bool:
        """Whether the route has shared rate limits (the relay wrote the permits file)."""
        return self.path is not None and os.path.exists(self.path)

    def granted(self) -> int:
        """Permits the relay has given so far (the file's running total)."""
        if self.path is None:
            return 0
        try:
            with open(self.path, encoding="ascii") as handle:
                text = handle.read(32).strip()
        except OSError:
            return self._granted
        if text.isdigit():
            self._granted = max(self._granted, int(text))
        return self._granted

    def acquire(self, wait_s: float = WAIT_S) -> bool:
        """Wait for a permit (and any backoff); False when none came within ``wait_s``."""
        with self._lock:
            self.asked += 1
            self._report()
        deadline = time.monotonic() + wait_s
        while True:
            now = time.monotonic()
            with self._lock:
                if now >= self.paused_until and self.used < self.granted():
                    self.used += 1
                    self.in_flight += 1
                    self._report()
                    return True
            if now > deadline:
                return False
            time.sleep(POLL_S)

    def release(self) -> None:
        with self._lock:
            self.in_flight -= 1
            self._report()

    def limited_for(self, seconds: float) -> None:
        """The upstream answered 429 asking for ``seconds``: this gateway pauses, and the
        relay makes every gateway of the route pause."""
        with self._lock:
            self.limited += 1
            self.waited_s = seconds
            self.paused_until = max(self.paused_until, time.monotonic() + seconds)
            self._report()

    def _report(self) -> None:
        self.report(
            {
                "asked": self.asked,
                "used": self.used,
                "in_flight": self.in_flight,
                "limited": self.limited,
                "retry_after_s": self.waited_s,
            }
        )


class _Answer(Protocol):
    status: int
    headers: list[tuple[str, str]]


A = TypeVar("A", bound=_Answer)


def send_paced(gate: RateGate, send: Callable[[], A], give: Callable[[A], None]) -> tuple[A, bool]:
    """Send a request whose permit is held; a 429 is waited out (its ``Retry-After``, for
    every gateway of the route) and sent again with a new permit, ``RETRIES_429`` times at
    most. The answer, and whether a permit is still held (to ``release``)."""
    answer = send()
    for _ in range(RETRIES_429):
        if answer.status != 429:
            break
        gate.release()
        gate.limited_for(retry_after(answer.headers))
        if not gate.acquire():
            return answer, False
        give(answer)
        answer = send()
    return answer, True
