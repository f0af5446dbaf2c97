"""The response cache."""

from __future__ import annotations

import time
from typing import Callable, Dict, Optional, Tuple

from apicache.settings import DEFAULT_TTL


class ResponseCache:
    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._entries: Dict[str, Tuple[bytes, float]] = {}

    def store(self, url: str, body: bytes) -> None:
        self._entries[url] = (body, self._clock() + self.ttl)

    def lookup(self, url: str) -> Optional[bytes]:
        entry = self._entries.get(url)
        if entry is None or self._clock() >= entry[1]:
            self._entries.pop(url, None)
            return None
        return entry[0]
