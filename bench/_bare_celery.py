"""The baseline of bench/dispatch.py: a bare Celery no-op task with deltarun's settings.

The task only increments a Redis counter, so the benchmark can tell when every
message has been handled; it does no lease, no ledger and no record stream.
"""

from __future__ import annotations

import os

import redis

from runner.distributed.celery_app import make_app

BROKER = os.environ["BENCH_BROKER"]
app = make_app(BROKER)
_client: redis.Redis | None = None


@app.task(name="bench.bare_noop")
def bare_noop(counter: str) -> None:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(BROKER)
    _client.incr(counter)
