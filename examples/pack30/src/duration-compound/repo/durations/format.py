"""Writing durations in the short form."""

from __future__ import annotations

from datetime import timedelta

from durations.units import UNITS


def format_duration(value: timedelta) -> str:
    """``timedelta(minutes=90)`` -> ``"1h30m"``; rounded to whole milliseconds."""
    millis = round(value / timedelta(milliseconds=1))
    if millis == 0:
        return "0s"
    sign = "-" if millis < 0 else ""
    rest = abs(millis)
    parts = []
    for unit, size in UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return sign + "".join(parts)
