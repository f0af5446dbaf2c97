"""Working-day arithmetic on top of :class:`DateRange`."""

from __future__ import annotations

import datetime as dt
from typing import Iterable

from spans.daterange import DateRange


def business_days(span: DateRange, holidays: Iterable[dt.date] = ()) -> int:
    """Count Monday-to-Friday days in *span* that are not in *holidays*."""
    closed = set(holidays)
    return sum(1 for day in span.days() if day.weekday() < 5 and day not in closed)
