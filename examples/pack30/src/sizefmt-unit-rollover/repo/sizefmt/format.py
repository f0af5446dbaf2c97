"""Formatting sizes."""

from __future__ import annotations

from sizefmt.units import units_for


def format_size(size: int, binary: bool = True, precision: int = 1) -> str:
    """``1536`` -> ``"1.5 KiB"``; sizes below one unit are whole bytes (``"512 B"``)."""
    units, base = units_for(binary)
    value = float(size)
    index = 0
    while value >= base and index < len(units) - 1:
        value /= base
        index += 1
    if index == 0:
        return f"{size} {units[0]}"
    return f"{value:.{precision}f} {units[index]}"
