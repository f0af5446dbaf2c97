"""Cache keys for calls."""

from __future__ import annotations

from typing import Any, Hashable, Mapping, Tuple


def make_key(args: Tuple[Any, ...], kwargs: Mapping[str, Any]) -> Hashable:
    """A hashable key: the positional arguments, then the keyword arguments by name."""
    return (args, tuple(sorted(kwargs.items())))
