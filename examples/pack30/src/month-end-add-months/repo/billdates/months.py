"""Calendar months."""

from __future__ import annotations

import calendar
from datetime import date


def days_in_month(year: int, month: int) -> int:
    """28 to 31."""
    return calendar.monthrange(year, month)[1]


def month_end(day: date) -> date:
    """The last day of *day*'s month."""
    return day.replace(day=days_in_month(day.year, day.month))


def add_months(day: date, months: int) -> date:
    """*day* moved by *months* calendar months (negative goes back)."""
    index = day.year * 12 + (day.month - 1) + months
    year, month = divmod(index, 12)
    return day.replace(year=year, month=month + 1)
