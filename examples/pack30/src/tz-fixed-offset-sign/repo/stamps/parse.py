"""Reading and writing timestamps."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from stamps.offsets import format_offset, parse_offset

_STAMP = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}(?::\d{2})?)(Z|z|[+-]\d{2}:?\d{2})$"
)


def parse_timestamp(text: str) -> datetime:
    """``2024-03-01T12:00:00+05:30`` as an aware datetime; the offset is required."""
    match = _STAMP.match(text.strip())
    if match is None:
        raise ValueError(f"invalid timestamp: {text!r}")
    naive = datetime.fromisoformat(f"{match.group(1)}T{match.group(2)}")
    return naive.replace(tzinfo=parse_offset(match.group(3)))


def to_utc(stamp: datetime) -> datetime:
    """The same instant in UTC."""
    if stamp.tzinfo is None:
        raise ValueError("naive datetime: the UTC offset is unknown")
    return stamp.astimezone(timezone.utc)


def format_timestamp(stamp: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` followed by the offset (``Z`` for UTC)."""
    offset = stamp.utcoffset()
    if offset is None:
        raise ValueError("naive datetime: the UTC offset is unknown")
    return f"{stamp:%Y-%m-%dT%H:%M:%S}{format_offset(offset)}"
