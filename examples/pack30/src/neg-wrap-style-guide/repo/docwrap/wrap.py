"""Wrapping one release-note entry as a bullet."""

from __future__ import annotations

import textwrap

WIDTH = 72


def wrap_note(kind: str, text: str) -> str:
    """*text* as a ``- `` bullet wrapped to ``WIDTH`` columns (*kind* is the note type)."""
    if kind not in ("feature", "fix", "security"):
        raise ValueError(f"unknown note type: {kind!r}")
    return textwrap.fill(
        " ".join(text.split()),
        width=WIDTH,
        initial_indent="- ",
        subsequent_indent="  ",
        break_long_words=False,
        break_on_hyphens=False,
    )
