"""tinycache: a small LRU cache and a memoize decorator built on it."""

from tinycache.lru import CacheStats, LRUCache
from tinycache.memo import memoize

__all__ = ["CacheStats", "LRUCache", "memoize"]
