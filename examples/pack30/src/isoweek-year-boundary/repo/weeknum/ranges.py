"""Weeks touched by a range of days."""

from __future__ import annotations

from datetime import date, timedelta
from typing import List

from weeknum.weeks import parse_label, week_label, week_start


def weeks_between(first: date, last: date) -> List[str]:
    """Labels of every ISO week that has a day in ``first..last`` (inclusive), in order."""
    if last < first:
        raise ValueError("last is before first")
    labels = []
    monday = week_start(*parse_label(week_label(first)))
    while monday <= last:
        labels.append(week_label(monday))
        monday += timedelta(weeks=1)
    return labels
