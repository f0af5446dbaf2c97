"""ttlcache: a small TTL cache."""

from ttlcache.cache import TTLCache
from ttlcache.clock import ManualClock

__all__ = ["ManualClock", "TTLCache"]
