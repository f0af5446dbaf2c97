"""Reading a CLI's session log as steps: bounded, tolerant, never executed. Content from the
sandbox is hostile: every text is cut to ``EXCERPT_CHARS`` and every line that is not a JSON
object is skipped, so a log can make a trajectory short, never make the reader fail."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

EXCERPT_CHARS = 2000
MAX_LINES = 20_000


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """``value`` as text of at most ``limit`` characters (marked when cut)."""
    text = value if isinstance(value, str) else "" if value is None else str(value)
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more]"


def count(value: object) -> int:
    """A token count from a log: a non-negative integer, else 0 (never a bool or a float)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def loads(text: str | bytes) -> Any:
    """JSON, or None for anything that is not (too deep included: a log can nest ``[``
    past Python's recursion limit)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def json_lines(data: bytes) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines log, skipping anything else."""
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines()):
        if number >= MAX_LINES:
            return
        value = loads(line)
        if isinstance(value, dict):
            yield value
