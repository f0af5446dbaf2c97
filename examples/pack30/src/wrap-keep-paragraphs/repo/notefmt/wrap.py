"""Wrapping."""

from __future__ import annotations

import textwrap

from notefmt.clean import collapse_whitespace


def wrap_text(text: str, width: int = 72, indent: str = "") -> str:
    """Re-flow *text* to lines of at most *width* characters, each prefixed by *indent*."""
    if width <= len(indent):
        raise ValueError("width must be larger than the indent")
    lines = textwrap.wrap(
        collapse_whitespace(text),
        width=width,
        initial_indent=indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return "\n".join(lines)
