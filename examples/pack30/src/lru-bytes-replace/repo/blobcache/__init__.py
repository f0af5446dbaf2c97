"""blobcache: an LRU cache bounded by bytes."""

from blobcache.lru import ByteLRU
from blobcache.sizes import sizeof

__all__ = ["ByteLRU", "sizeof"]
