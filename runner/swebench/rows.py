"""The rows of a SWE-bench-style data file, each with where it came from (for one-line errors).

Three shapes are read: JSON Lines (one object per line: ``FILE:LINE``), a JSON array
(``FILE: item N``), and a JSON object, either one row (it has ``instance_id``) or a
mapping ``{instance_id: row}`` (``FILE: key 'ID'``). Pure: text in, rows out.

Every parse is bounded before it allocates (``runner.bounded_json``): a line within
``LINE_BOUNDS``, a whole document within ``DOCUMENT_BOUNDS``. Rows are yielded one at a
time, so a caller that keeps only what it needs of each holds one line's parse at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from runner.bounded_input import excerpt
from runner.bounded_json import BoundsError, JsonBounds, loads_bounded
from runner.errors import UserError

LINE_BOUNDS = JsonBounds(max_bytes=64 << 20, max_depth=32, max_items=1_000_000)
"""One line of JSON Lines: a large instance (a long patch, thousands of test ids) fits."""

DOCUMENT_BOUNDS = JsonBounds(max_bytes=256 << 20, max_depth=32, max_items=4_000_000)
"""A whole JSON array or object: every instance of SWE-bench's test split fits."""


def json_rows(text: str, source: str, what: str) -> Iterator[tuple[str, Any]]:
    """``(where, row)`` for each row of ``text``; ``what`` names a row in errors ("instance")."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")) and not _is_jsonl(stripped):
        data = _parse(text, DOCUMENT_BOUNDS, source, "not valid JSON")
        if isinstance(data, dict) and "instance_id" in data:
            yield source, data
        elif isinstance(data, dict):
            for key, value in data.items():
                where = f"{source}: key {excerpt(key)}"
                yield where, ({"instance_id": key, **value} if isinstance(value, dict) else value)
        elif isinstance(data, list):
            for i, row in enumerate(data):
                yield f"{source}: item {i + 1}", row
        else:
            raise UserError(f"{source}: expected JSON Lines, a JSON array or an object")
        return
    for number, line in _lines(text):
        reason = f"not a JSON object; write one {what} per line"
        yield f"{source}:{number}", _parse(line, LINE_BOUNDS, f"{source}:{number}", reason)


def _parse(text: str, bounds: JsonBounds, source: str, what: str) -> Any:
    try:
        return loads_bounded(text.encode("utf-8", "surrogatepass"), bounds)
    except BoundsError as exc:
        raise UserError(f"{source}: {what} ({str(exc).removeprefix('not JSON: ')})") from None


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """The non-blank lines of ``text`` with their numbers, split at ``\\n`` only (JSON may
    hold U+2028 and the like unescaped), one at a time."""
    start, number = 0, 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        number += 1
        line = text[start:end]
        start = end + 1
        if line.strip(" \t\r"):
            yield number, line


def _is_jsonl(text: str) -> bool:
    """Whether ``text`` is several JSON values, one per line (JSON Lines)."""
    newline = text.find("\n")
    if newline < 0 or not text[newline:].strip():
        return False
    try:
        loads_bounded(text[:newline].encode("utf-8", "surrogatepass"), LINE_BOUNDS)
    except BoundsError:
        return False
    return True
