"""Parsing ``application/x-www-form-urlencoded`` query strings."""

from __future__ import annotations

from typing import Dict, List, Optional
from urllib.parse import unquote

Query = Dict[str, List[str]]


def parse_query(query: str, keep_blank: bool = False) -> Query:
    """Parse *query* (with or without the leading ``?``) into ``{name: [values]}``.

    Values of a repeated name are kept in order. Pairs with an empty value
    (``a=`` or a bare ``a``) are dropped unless *keep_blank* is true.
    """
    result: Query = {}
    for pair in unquote(query.lstrip("?")).split("&"):
        if not pair:
            continue
        name, _, value = pair.partition("=")
        if not value and not keep_blank:
            continue
        result.setdefault(name, []).append(value)
    return result


def get_first(query: Query, name: str, default: Optional[str] = None) -> Optional[str]:
    """The first value of *name* in a parsed query, or *default*."""
    values = query.get(name)
    return values[0] if values else default
