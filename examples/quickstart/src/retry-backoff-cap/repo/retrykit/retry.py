"""Calling a function again until it succeeds."""

from __future__ import annotations

import random
import time
from typing import Callable, Optional, Tuple, Type, TypeVar

from retrykit.backoff import Backoff

T = TypeVar("T")


class RetryError(Exception):
    """Raised when every attempt failed; ``__cause__`` is the last error."""

    def __init__(self, attempts: int) -> None:
        super().__init__(f"gave up after {attempts} attempts")
        self.attempts = attempts


def retry(
    func: Callable[[], T],
    *,
    attempts: int = 3,
    backoff: Backoff = Backoff(),
    retry_on: Tuple[Type[BaseException], ...] = (Exception,),
    sleep: Callable[[float], None] = time.sleep,
    rng: Optional[random.Random] = None,
) -> T:
    """Call *func* up to *attempts* times and return its first result.

    Exceptions listed in *retry_on* trigger a wait of ``backoff.delay(n)``
    seconds before the next attempt; other exceptions propagate at once.
    When the last attempt fails, :class:`RetryError` is raised from it.
    """
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    for attempt in range(attempts):
        try:
            return func()
        except retry_on as exc:
            last_error = exc
            sleep(backoff.delay(attempt, rng))
    raise RetryError(attempts) from last_error
