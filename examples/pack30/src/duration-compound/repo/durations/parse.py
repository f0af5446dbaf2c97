"""Reading duration strings."""

from __future__ import annotations

import re
from datetime import timedelta

from durations.units import MILLIS

_SINGLE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|w|d|h|m|s)\s*$")


def parse_duration(text: str) -> timedelta:
    """Parse a duration such as ``90s``, ``15m`` or ``1.5h``.

    Units (case-insensitive): ``w``, ``d``, ``h``, ``m``, ``s``, ``ms``.
    Raises ``ValueError`` for anything else.
    """
    match = _SINGLE.match(text.lower())
    if match is None:
        raise ValueError(f"invalid duration: {text!r}")
    number, unit = match.groups()
    return timedelta(milliseconds=float(number) * MILLIS[unit])
