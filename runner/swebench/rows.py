"""The rows of a SWE-bench-style data file, each with where it came from (for one-line errors).

Three shapes are read: JSON Lines (one object per line: ``FILE:LINE``), a JSON array
(``FILE: item N``), and a JSON object, either one row (it has ``instance_id``) or a
mapping ``{instance_id: row}`` (``FILE: key 'ID'``). Pure: text in, rows out.
"""

from __future__ import annotations

import json
from typing import Any

from runner.errors import UserError


def json_rows(text: str, source: str, what: str) -> list[tuple[str, Any]]:
    """``(where, row)`` for each row of ``text``; ``what`` names a row in errors ("instance")."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")) and not _is_jsonl(stripped):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        if isinstance(data, dict) and "instance_id" in data:
            return [(source, data)]
        if isinstance(data, dict):
            return [
                (f"{source}: key {key!r}", {"instance_id": key, **value})
                if isinstance(value, dict)
                else (f"{source}: key {key!r}", value)
                for key, value in data.items()
            ]
        if isinstance(data, list):
            return [(f"{source}: item {i + 1}", row) for i, row in enumerate(data)]
        raise UserError(f"{source}: expected JSON Lines, a JSON array or an object")
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append((f"{source}:{number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise UserError(
                f"{source}:{number}: not a JSON object ({exc.msg}); write one {what} per line"
            ) from exc
    return rows


def _is_jsonl(text: str) -> bool:
    """Whether ``text`` is several JSON values, one per line (JSON Lines)."""
    first = text.split("\n", 1)[0]
    try:
        json.loads(first)
    except json.JSONDecodeError:
        return False
    return "\n" in text.strip()
