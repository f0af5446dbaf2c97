"""The ``memoize`` decorator."""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Hashable, List, NamedTuple, TypeVar

from memokit.keys import make_key

F = TypeVar("F", bound=Callable[..., Any])


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    size: int


def memoize(func: F) -> F:
    """Cache *func*'s results by its arguments (which must be hashable)."""
    cache: Dict[Hashable, Any] = {}
    stats: List[int] = [0, 0]  # hits, misses

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        key = make_key(args, kwargs)
        if key in cache:
            stats[0] += 1
            return cache[key]
        stats[1] += 1
        result = cache[key] = func(*args, **kwargs)
        return result

    def cache_info() -> CacheInfo:
        return CacheInfo(stats[0], stats[1], len(cache))

    def cache_clear() -> None:
        cache.clear()
        stats[:] = [0, 0]

    wrapper.cache_info = cache_info  # type: ignore[attr-defined]
    wrapper.cache_clear = cache_clear  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]
