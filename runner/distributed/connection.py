"""Connecting to Redis, for the coordinator and the workers alike."""

from __future__ import annotations

import redis

from runner.errors import UserError


def connect_redis(url: str) -> redis.Redis:
    """A Redis client for ``url``; ``UserError`` in one line when it is wrong or unreachable."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise UserError(f"--broker {url!r}: not a Redis URL; write it like redis://HOST:6379/0")
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
        client.ping()
    except (redis.RedisError, ValueError, OSError) as exc:
        raise UserError(
            f"Redis at {url} is unreachable ({exc}); start Redis or fix --broker"
        ) from exc
    return client
