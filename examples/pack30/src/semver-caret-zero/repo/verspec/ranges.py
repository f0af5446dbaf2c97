"""npm-style version ranges."""

from __future__ import annotations

import operator
import re
from typing import Callable, Dict, Iterable, Optional

from verspec.version import Version

_CLAUSE = re.compile(r"^(\^|~|>=|<=|>|<|=)?\s*(\S+)$")
_COMPARE: Dict[str, Callable[[Version, Version], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "=": operator.eq,
}


def _caret_upper(base: Version) -> Version:
    """The exclusive upper bound of ``^base``."""
    return Version(base.major + 1, 0, 0)


def _tilde_upper(base: Version) -> Version:
    """The exclusive upper bound of ``~base``."""
    return Version(base.major, base.minor + 1, 0)


def _matches(version: Version, clause: str) -> bool:
    match = _CLAUSE.match(clause.strip())
    if match is None:
        raise ValueError(f"invalid range clause: {clause!r}")
    op, text = match.group(1) or "=", match.group(2)
    base = Version.parse(text)
    if op == "^":
        return base <= version < _caret_upper(base)
    if op == "~":
        return base <= version < _tilde_upper(base)
    return _COMPARE[op](version, base)


def satisfies(version: str, spec: str) -> bool:
    """Does *version* match every comma-separated clause of *spec*?"""
    parsed = Version.parse(version)
    return all(_matches(parsed, clause) for clause in spec.split(","))


def max_satisfying(versions: Iterable[str], spec: str) -> Optional[str]:
    """The highest of *versions* that satisfies *spec*, or ``None``."""
    matching = [Version.parse(v) for v in versions if satisfies(v, spec)]
    return str(max(matching)) if matching else None
