"""Selecting paths with include and exclude patterns."""

from __future__ import annotations

from typing import Iterable, List

from globmatch.pattern import match


def select(patterns: Iterable[str], paths: Iterable[str]) -> List[str]:
    """Return the *paths* selected by *patterns*, in their original order.

    Patterns apply in order, like ``.gitignore``: a path is selected by the
    last pattern that matches it; a pattern starting with ``!`` deselects.
    """
    rules = [(p[1:], False) if p.startswith("!") else (p, True) for p in patterns]
    selected = []
    for path in paths:
        keep = False
        for pattern, include in rules:
            if match(pattern, path):
                keep = include
        if keep:
            selected.append(path)
    return selected
