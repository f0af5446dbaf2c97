"""Parsing."""

from __future__ import annotations

from datetime import date, datetime

from datesniff.formats import FORMATS


def parse_date(text: str) -> date:
    for fmt in FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt).date()
        except ValueError:
            continue
    raise ValueError(f"unrecognised date: {text!r}")
