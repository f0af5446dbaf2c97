"""Inclusive ranges of calendar dates."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class DateRange:
    """The calendar days from *start* to *end*, both included.

    A one-day range has ``start == end``; *end* may not be before *start*.
    """

    start: dt.date
    end: dt.date

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"range end {self.end} is before its start {self.start}")

    @classmethod
    def parse(cls, text: str) -> "DateRange":
        """Parse ``YYYY-MM-DD..YYYY-MM-DD`` (both ends included)."""
        start, sep, end = text.partition("..")
        if not sep:
            raise ValueError(f"expected 'START..END', got {text!r}")
        return cls(dt.date.fromisoformat(start.strip()), dt.date.fromisoformat(end.strip()))

    def __str__(self) -> str:
        return f"{self.start.isoformat()}..{self.end.isoformat()}"

    def __contains__(self, day: object) -> bool:
        if not isinstance(day, dt.date):
            return False
        return self.start <= day <= self.end

    def __len__(self) -> int:
        """Number of days in the range."""
        return (self.end - self.start).days

    def days(self, step: int = 1) -> Iterator[dt.date]:
        """Yield every *step*-th day of the range, beginning with *start*."""
        if step < 1:
            raise ValueError("step must be a positive number of days")
        current = self.start
        while current < self.end:
            yield current
            current += dt.timedelta(days=step)

    def overlaps(self, other: "DateRange") -> bool:
        """True if the two ranges share at least one day."""
        return self.start < other.end and other.start < self.end
