"""memokit: memoisation with statistics."""

from memokit.keys import make_key
from memokit.memo import CacheInfo, memoize

__all__ = ["CacheInfo", "make_key", "memoize"]
