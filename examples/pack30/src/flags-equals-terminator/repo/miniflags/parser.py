"""Parsing long options (see docs/conventions.md)."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from miniflags.errors import FlagError

_INTEGER = re.compile(r"^[+-]?\d+$")


def _lookup(spec: Mapping[str, type], name: str) -> Tuple[str, type, bool]:
    """``(flag, kind, value for a boolean)`` for the text after ``--``."""
    if name in spec:
        return name, spec[name], True
    if name.startswith("no-") and spec.get(name[3:]) is bool:
        return name[3:], bool, False
    raise FlagError(f"unknown flag --{name}")


def _convert(flag: str, kind: type, text: str) -> Any:
    if kind is int:
        if not _INTEGER.match(text):
            raise FlagError(f"--{flag}: invalid integer {text!r}")
        return int(text)
    return text


def parse_flags(
    argv: Sequence[str], spec: Mapping[str, type]
) -> Tuple[Dict[str, Any], List[str]]:
    """Split *argv* into flag values and positional arguments.

    *spec* maps each flag name to ``str``, ``int`` or ``bool``. Flags not
    given are ``None`` (``False`` for booleans).
    """
    flags: Dict[str, Any] = {name: (False if kind is bool else None) for name, kind in spec.items()}
    positionals: List[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            flag, kind, on = _lookup(spec, arg[2:])
            if kind is bool:
                flags[flag] = on
            else:
                if i + 1 >= len(argv):
                    raise FlagError(f"--{flag} needs a value")
                flags[flag] = _convert(flag, kind, argv[i + 1])
                i += 1
        else:
            positionals.append(arg)
        i += 1
    return flags, positionals
