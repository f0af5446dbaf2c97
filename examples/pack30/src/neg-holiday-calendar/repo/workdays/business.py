"""Business days: Monday to Friday, except public holidays."""

from __future__ import annotations

from datetime import date, timedelta

from workdays.holidays import HOLIDAYS


def is_business_day(day: date) -> bool:
    return day.weekday() < 5 and day not in HOLIDAYS


def add_business_days(start: date, days: int) -> date:
    """The date *days* business days after *start* (``days >= 0``)."""
    if days < 0:
        raise ValueError("days must not be negative")
    current = start
    while days:
        current += timedelta(days=1)
        if is_business_day(current):
            days -= 1
    return current
