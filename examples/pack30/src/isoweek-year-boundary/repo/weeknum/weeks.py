"""ISO 8601 weeks: Monday to Sunday; week 1 is the week with the year's first Thursday."""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Tuple

_LABEL = re.compile(r"^(\d{4})-W(\d{2})$")


def week_label(day: date) -> str:
    """The ISO week of *day* as ``YYYY-Www`` (``2024-W07``)."""
    week = day.isocalendar()[1]
    return f"{day.year}-W{week:02d}"


def parse_label(label: str) -> Tuple[int, int]:
    """``"2024-W07"`` -> ``(2024, 7)``."""
    match = _LABEL.match(label)
    if match is None:
        raise ValueError(f"not a week label: {label!r}")
    return int(match.group(1)), int(match.group(2))


def weeks_in_year(year: int) -> int:
    """52 or 53: the number of ISO weeks in *year*."""
    return date(year, 12, 28).isocalendar()[1]


def week_start(year: int, week: int) -> date:
    """The Monday that starts ISO week *week* of *year*."""
    if not 1 <= week <= weeks_in_year(year):
        raise ValueError(f"{year} has no week {week}")
    jan1 = date(year, 1, 1)
    return jan1 - timedelta(days=jan1.weekday()) + timedelta(weeks=week - 1)
