"""A least-recently-used cache with hit/miss/eviction statistics."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, Hashable, List, Optional, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MISSING = object()


@dataclass
class CacheStats:
    """Counters describing how well a cache is doing."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0

    @property
    def hit_rate(self) -> float:
        """Fraction of lookups that were hits (0.0 before any lookup)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class LRUCache(Generic[K, V]):
    """A mapping-like cache holding at most *capacity* entries.

    When the cache is full, inserting a new key evicts the entry that was
    used least recently. Both reading an entry (``get``) and writing it
    (``put``) count as a use. Membership tests (``in``) do not.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.stats = CacheStats()
        self._data: "OrderedDict[K, V]" = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: K, default: Optional[V] = None) -> Optional[V]:
        """Return the value stored for *key*, or *default* if it is absent."""
        if key in self._data:
            self.stats.hits += 1
            return self._data[key]
        self.stats.misses += 1
        return default

    def put(self, key: K, value: V) -> None:
        """Store *value* under *key*, evicting the least recently used entry if full."""
        if len(self._data) >= self.capacity:
            self._data.popitem(last=False)
            self.stats.evictions += 1
        self._data[key] = value

    def pop(self, key: K, default: object = _MISSING) -> object:
        """Remove *key* and return its value (or *default*; KeyError without one)."""
        if default is _MISSING:
            return self._data.pop(key)
        return self._data.pop(key, default)

    def clear(self) -> None:
        """Drop every entry; statistics are kept."""
        self._data.clear()

    def keys(self) -> List[K]:
        """Keys ordered from least to most recently used."""
        return list(self._data)
