"""A memoizing decorator backed by :class:`LRUCache`."""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from tinycache.lru import LRUCache

F = TypeVar("F", bound=Callable[..., Any])

_MISS = object()


def memoize(capacity: int = 128) -> Callable[[F], F]:
    """Cache a function's results by its positional arguments.

    The cache is exposed as ``wrapped.cache`` so callers can inspect its
    statistics or clear it.
    """

    def decorate(func: F) -> F:
        cache: LRUCache = LRUCache(capacity)

        @functools.wraps(func)
        def wrapper(*args: Any) -> Any:
            value = cache.get(args, _MISS)
            if value is _MISS:
                value = func(*args)
                cache.put(args, value)
            return value

        wrapper.cache = cache  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
