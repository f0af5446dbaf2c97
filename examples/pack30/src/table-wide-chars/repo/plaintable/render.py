"""Rendering rows as a table."""

from __future__ import annotations

from typing import List, Optional, Sequence

from plaintable.width import display_width, pad


def render(
    rows: Sequence[Sequence[object]],
    headers: Optional[Sequence[str]] = None,
    align: Optional[Sequence[str]] = None,
) -> str:
    """Rows as aligned text columns separated by two spaces; trailing spaces stripped."""
    table: List[List[str]] = [[str(cell) for cell in row] for row in rows]
    if headers is not None:
        table.insert(0, list(headers))
    if not table:
        return ""
    columns = max(len(row) for row in table)
    for row in table:
        row.extend([""] * (columns - len(row)))
    widths = [max(display_width(row[i]) for row in table) for i in range(columns)]
    aligns = list(align or []) + ["left"] * columns
    lines = []
    for number, row in enumerate(table):
        cells = [pad(cell, widths[i], aligns[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
        if headers is not None and number == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
