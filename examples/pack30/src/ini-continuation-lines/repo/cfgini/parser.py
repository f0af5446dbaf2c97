"""Parsing INI text into nested dictionaries."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Union

from cfgini.errors import IniError

Config = Dict[str, Dict[str, str]]

COMMENT_PREFIXES = (";", "#")
DEFAULT_SECTION = "DEFAULT"


def parse(text: str) -> Config:
    """Parse *text* into ``{section: {key: value}}``.

    Section and key names are case-insensitive (stored lower-case); values
    keep their case and are stripped. Keys before the first section header
    go into the ``DEFAULT`` section, which is left out when empty.
    """
    config: Config = {DEFAULT_SECTION: {}}
    section = config[DEFAULT_SECTION]
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(COMMENT_PREFIXES):
            continue
        if line.startswith("[") and line.endswith("]"):
            name = line[1:-1].strip().lower()
            if not name:
                raise IniError(number, "empty section name")
            section = config.setdefault(name, {})
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise IniError(number, f"expected 'key = value', got {line!r}")
        key = key.strip().lower()
        if not key:
            raise IniError(number, "empty key")
        section[key] = value.strip()
    if not config[DEFAULT_SECTION]:
        del config[DEFAULT_SECTION]
    return config


def parse_file(path: Union[str, Path], encoding: str = "utf-8") -> Config:
    """Read and parse the INI file at *path*."""
    return parse(Path(path).read_text(encoding=encoding))
