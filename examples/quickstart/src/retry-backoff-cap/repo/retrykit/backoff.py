"""Exponential backoff schedules."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Backoff:
    """Delay schedule ``base * factor ** attempt`` seconds, capped at *max_delay*.

    With *jitter* ("full jitter"), each delay is drawn uniformly from
    ``[0, capped delay]`` with the given random generator, so a seeded
    generator gives a reproducible schedule.
    """

    base: float = 0.5
    factor: float = 2.0
    max_delay: float = 30.0
    jitter: bool = False

    def __post_init__(self) -> None:
        if self.base < 0 or self.factor < 1 or self.max_delay < 0:
            raise ValueError("need base >= 0, factor >= 1 and max_delay >= 0")

    def delay(self, attempt: int, rng: Optional[random.Random] = None) -> float:
        """Seconds to wait before retry number *attempt* (0 is the first retry)."""
        if attempt < 0:
            raise ValueError("attempt must be >= 0")
        delay = self.base * self.factor**attempt
        if self.jitter:
            delay = (rng or random.Random()).uniform(0.0, delay)
        return delay
