"""Whitespace clean-up."""

from __future__ import annotations


def collapse_whitespace(text: str) -> str:
    """Every run of whitespace (line breaks included) becomes one space; ends stripped."""
    return " ".join(text.split())
