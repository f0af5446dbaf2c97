"""Building query strings."""

from __future__ import annotations

from typing import Iterable, Mapping, Union
from urllib.parse import quote_plus


def build_query(params: Mapping[str, Union[str, Iterable[str]]]) -> str:
    """Encode *params* as ``name=value`` pairs joined by ``&`` (spaces as ``+``)."""
    pairs = []
    for name, value in params.items():
        values = [value] if isinstance(value, str) else list(value)
        for item in values:
            pairs.append(f"{quote_plus(name)}={quote_plus(item)}")
    return "&".join(pairs)
