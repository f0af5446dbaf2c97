"""Greedy word wrapping.

Words are placed on the current line while they fit; otherwise a new line
is started. This is the algorithm most terminals and mail clients use, and
it is fast and predictable.
"""

from __future__ import annotations

from typing import List


def wrap(text: str, width: int = 70, indent: str = "") -> List[str]:
    """Wrap *text* into lines of at most *width* characters.

    Runs of whitespace (including newlines) collapse to single spaces.
    *indent* is prepended to every line and counts toward *width*.
    """
    if width <= len(indent):
        raise ValueError("width must be larger than the indent")
    lines: List[str] = []
    current: List[str] = []
    length = len(indent)
    for word in text.split():
        needed = len(word) + (1 if current else 0)
        if current and length + needed > width:
            lines.append(indent + " ".join(current))
            current, length = [], len(indent)
            needed = len(word)
        current.append(word)
        length += needed
    if current:
        lines.append(indent + " ".join(current))
    return lines


def fill(text: str, width: int = 70, indent: str = "") -> str:
    """Like :func:`wrap`, but return a single string joined with newlines."""
    return "\n".join(wrap(text, width, indent))
