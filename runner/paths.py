"""Repository-relative paths the harness reasons about. Pure."""

from __future__ import annotations

from collections.abc import Iterable


def is_forbidden(rel: str, forbidden: Iterable[str]) -> bool:
    """True when ``rel`` is a forbidden path or lies under one (``.git/`` matches ``.git``)."""
    for entry in forbidden:
        base = entry.strip("/")
        if not base:
            continue
        if rel == base or rel.startswith(base + "/"):
            return True
    return False
