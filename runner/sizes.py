"""Docker-style sizes (``512m``, ``1g``) in bytes. Pure; a leaf every layer may use."""

from __future__ import annotations

import re

_SIZE_RE = re.compile(r"\A\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*\Z", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str | int) -> int:
    """Bytes of a Docker-style size: ``512m``, ``1g``, ``1.5GiB`` or a plain integer."""
    if isinstance(text, int):
        return text
    match = _SIZE_RE.match(text) if len(text) <= 64 else None
    if not match:
        raise ValueError(f"{text[:64]!r} is not a size; write it like 512m or 1g")
    # At most 64 characters: the float is finite (a longer digit string could be inf,
    # and int(inf) raises OverflowError, which a pydantic validator would let escape).
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_size(size: int) -> str:
    """``size`` bytes as the largest Docker-style unit it fills: ``24g``, ``1.5g``, ``512m``."""
    for unit in ("t", "g", "m", "k"):
        if size >= _UNITS[unit]:
            value = size / _UNITS[unit]
            return f"{value:.1f}".rstrip("0").rstrip(".") + unit
    return str(size)
