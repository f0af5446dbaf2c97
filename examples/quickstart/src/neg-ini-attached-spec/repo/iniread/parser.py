"""Parsing INI text into nested dictionaries."""

from __future__ import annotations

from typing import Dict

Config = Dict[str, Dict[str, str]]

_COMMENT_PREFIXES = (";", "#")


class IniError(ValueError):
    """Malformed INI input; ``line`` is the 1-based line number."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


def _strip_inline_comment(value: str) -> str:
    """Drop a ``#`` or ``;`` comment that follows whitespace in a value."""
    for index, char in enumerate(value):
        if char in _COMMENT_PREFIXES and index > 0 and value[index - 1] in " \t":
            return value[:index].rstrip()
    return value


def parse(text: str) -> Config:
    """Parse *text* and return ``{section: {key: value}}``.

    Blank lines and lines starting with ``;`` or ``#`` are ignored. Keys
    before the first section header are an error.
    """
    config: Config = {}
    section = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(_COMMENT_PREFIXES):
            continue
        if line.startswith("[") and line.endswith("]"):
            name = line[1:-1].strip()
            if not name:
                raise IniError(number, "empty section name")
            if name in config:
                raise IniError(number, f"duplicate section [{name}]")
            section = config[name] = {}
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise IniError(number, f"expected 'key = value', got {line!r}")
        if section is None:
            raise IniError(number, "key outside of any section")
        key = key.strip().lower()
        if key in section:
            raise IniError(number, f"duplicate key {key!r}")
        section[key] = _strip_inline_comment(value.strip())
    return config
