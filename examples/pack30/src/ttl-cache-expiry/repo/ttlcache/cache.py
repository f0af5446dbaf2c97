"""The cache."""

from __future__ import annotations

import time
from typing import Callable, Dict, Generic, Hashable, Optional, Tuple, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    """A mapping whose entries expire *ttl* seconds after they were last set."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.ttl = ttl
        self._clock = clock
        self._data: Dict[K, Tuple[V, float]] = {}

    def set(self, key: K, value: V) -> None:
        self._data[key] = (value, self._clock() + self.ttl)

    def get(self, key: K, default: Optional[V] = None) -> Optional[V]:
        entry = self._data.get(key)
        if entry is None:
            return default
        value, expires = entry
        if self._clock() > expires:
            del self._data[key]
            return default
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def purge(self) -> int:
        """Drop the expired entries; return how many were dropped."""
        now = self._clock()
        expired = [key for key, (_, expires) in self._data.items() if now > expires]
        for key in expired:
            del self._data[key]
        return len(expired)
