"""Monthly billing schedules."""

from __future__ import annotations

from datetime import date
from typing import List

from billdates.months import add_months


def next_billing_date(anchor: date, after: date) -> date:
    """The first billing date strictly after *after* for a subscription anchored on *anchor*."""
    current = anchor
    while current <= after:
        current = add_months(current, 1)
    return current


def billing_dates(anchor: date, count: int) -> List[date]:
    """The first *count* billing dates, starting with *anchor* itself."""
    if count < 0:
        raise ValueError("count must not be negative")
    dates: List[date] = []
    current = anchor
    while len(dates) < count:
        dates.append(current)
        current = add_months(current, 1)
    return dates
