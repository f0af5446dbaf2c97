"""UTC offsets such as ``+05:30``, ``-0800`` and ``Z``."""

from __future__ import annotations

import re
from datetime import timedelta, timezone

_OFFSET = re.compile(r"^([+-])(\d{2}):?(\d{2})$")


def parse_offset(text: str) -> timezone:
    """``Z``, ``+05:30`` or ``-0800`` as a fixed-offset :class:`~datetime.timezone`."""
    if text in ("Z", "z"):
        return timezone.utc
    match = _OFFSET.match(text)
    if match is None:
        raise ValueError(f"invalid UTC offset: {text!r}")
    sign = -1 if match.group(1) == "-" else 1
    hours, minutes = int(match.group(2)), int(match.group(3))
    if hours > 23 or minutes > 59:
        raise ValueError(f"invalid UTC offset: {text!r}")
    return timezone(timedelta(hours=sign * hours, minutes=minutes))


def format_offset(offset: timedelta) -> str:
    """An offset as ``+HH:MM`` (``Z`` for UTC itself)."""
    if not offset:
        return "Z"
    sign = "-" if offset < timedelta(0) else "+"
    hours, rest = divmod(int(offset.total_seconds()), 3600)
    return f"{sign}{abs(hours):02d}:{rest // 60:02d}"
