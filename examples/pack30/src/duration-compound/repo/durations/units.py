"""Duration units, largest first, with their length in milliseconds."""

from __future__ import annotations

from typing import Dict, Tuple

UNITS: Tuple[Tuple[str, int], ...] = (
    ("w", 7 * 24 * 3600 * 1000),
    ("d", 24 * 3600 * 1000),
    ("h", 3600 * 1000),
    ("m", 60 * 1000),
    ("s", 1000),
    ("ms", 1),
)

MILLIS: Dict[str, int] = dict(UNITS)
