"""The cache."""

from __future__ import annotations

from collections import OrderedDict
from typing import List, Optional

from blobcache.sizes import Blob, sizeof


class ByteLRU:
    """Least-recently-used cache whose values together take at most *max_bytes*."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self.total_bytes = 0
        self.evictions = 0
        self._items: "OrderedDict[str, Blob]" = OrderedDict()

    def get(self, key: str, default: Optional[Blob] = None) -> Optional[Blob]:
        if key not in self._items:
            return default
        self._items.move_to_end(key)
        return self._items[key]

    def put(self, key: str, value: Blob) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        self.total_bytes += sizeof(value)
        while self.total_bytes > self.max_bytes and self._items:
            _, evicted = self._items.popitem(last=False)
            self.total_bytes -= sizeof(evicted)
            self.evictions += 1

    def keys(self) -> List[str]:
        """Keys from least to most recently used."""
        return list(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)
