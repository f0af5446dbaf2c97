"""How wide text is on a terminal."""

from __future__ import annotations


def display_width(text: str) -> int:
    """The number of terminal columns *text* takes."""
    return len(text)


def pad(text: str, width: int, align: str = "left") -> str:
    """*text* padded with spaces to *width* columns (``left`` or ``right`` aligned)."""
    gap = max(0, width - display_width(text))
    return text + " " * gap if align == "left" else " " * gap + text
