"""Parsing sizes."""

from __future__ import annotations

import re

from sizefmt.units import BINARY, DECIMAL

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str) -> int:
    """``"1.5 KiB"`` -> ``1536``; a bare number is bytes."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"invalid size: {text!r}")
    number, unit = float(match.group(1)), match.group(2) or "B"
    for names, base in ((BINARY, 1024), (DECIMAL, 1000)):
        if unit in names:
            return round(number * base ** names.index(unit))
    raise ValueError(f"unknown unit: {unit!r}")
