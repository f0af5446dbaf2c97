"""Errors raised while reading CSV text."""

from __future__ import annotations


class CsvError(ValueError):
    """Malformed CSV input; ``line`` is the 1-based line number."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
