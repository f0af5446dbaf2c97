"""apicache: response cache for the API gateway."""

from apicache.cache import ResponseCache
from apicache.settings import DEFAULT_TTL

__all__ = ["DEFAULT_TTL", "ResponseCache"]
