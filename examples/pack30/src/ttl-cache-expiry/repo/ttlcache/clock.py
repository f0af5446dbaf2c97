"""Clocks for the cache: anything callable that returns seconds as a float."""

from __future__ import annotations


class ManualClock:
    """A clock that only moves when told to (for tests and simulations)."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        self.now += seconds
