"""Unit names, smallest first."""

from __future__ import annotations

from typing import Tuple

BINARY: Tuple[str, ...] = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
DECIMAL: Tuple[str, ...] = ("B", "kB", "MB", "GB", "TB", "PB")


def units_for(binary: bool) -> Tuple[Tuple[str, ...], int]:
    """The unit names and the base (1024 or 1000)."""
    return (BINARY, 1024) if binary else (DECIMAL, 1000)
