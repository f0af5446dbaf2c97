"""The Redis side of the ledger: leases, the done set and the record stream.

A worker takes a lease (``SET NX`` with an expiry, renewed while the trial runs)
before it starts and skips a job that is already done or leased. It publishes
every record it produces to the run's stream; the coordinator keeps the first
record per job id in ``trials.jsonl`` and sets later ones aside. A job whose
worker started it and whose lease expired without a record is re-enqueued by
the coordinator.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis

from runner.distributed import keys
from runner.models import Trial

# A lease outlives a stalled renewal by two periods; tests shorten it through the environment.
LEASE_TTL_S = int(os.environ.get("DELTARUN_LEASE_TTL_S", "30"))
RENEW_EVERY_S = max(1.0, LEASE_TTL_S / 3)

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLedger:
    """Leases and records of one run."""

    def __init__(self, client: redis.Redis, run_id: str) -> None:
        self.client = client
        self.run_id = run_id

    # -- worker side --------------------------------------------------------------
    def is_done(self, job_id: str) -> bool:
        return bool(self.client.hexists(keys.done(self.run_id), job_id))

    def acquire(self, job_id: str, holder: str) -> bool:
        """Take the job's lease; False when another holder has it."""
        ok = self.client.set(keys.lease(self.run_id, job_id), holder, nx=True, ex=LEASE_TTL_S)
        if ok:
            self.client.hset(keys.started(self.run_id), job_id, holder)
        return bool(ok)

    def renew(self, job_id: str, holder: str) -> bool:
        key = keys.lease(self.run_id, job_id)
        return bool(self.client.eval(_RENEW, 1, key, holder, LEASE_TTL_S))

    def release(self, job_id: str, holder: str) -> None:
        self.client.eval(_RELEASE, 1, keys.lease(self.run_id, job_id), holder)

    def publish(self, trial: Trial) -> bool:
        """Publish a record; True when it is the first for its job."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hsetnx(keys.done(self.run_id), trial.job_id, trial.worker)
        pipe.xadd(keys.records(self.run_id), {"trial": trial.model_dump_json()})
        first, _ = pipe.execute()
        return bool(first)

    @contextmanager
    def held(self, job_id: str, holder: str) -> Iterator[None]:
        """Renew the lease in the background while the body runs; release it after."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(RENEW_EVERY_S):
                try:
                    self.renew(job_id, holder)
                except redis.RedisError:
                    pass  # Redis restarting: try again at the next tick

        thread = threading.Thread(target=renew, name=f"lease-{job_id[:8]}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)

    # -- coordinator side ----------------------------------------------------------
    def read(
        self, cursor: str, count: int = 500, block_ms: int | None = 1000
    ) -> list[tuple[str, str]]:
        """Records after ``cursor`` (a stream id), oldest first, as (id, trial JSON)."""
        reply: Any = self.client.xread(
            {keys.records(self.run_id): cursor}, count=count, block=block_ms
        )
        out: list[tuple[str, str]] = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                eid = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                raw = fields.get(b"trial") or fields.get("trial")
                out.append((eid, raw.decode() if isinstance(raw, bytes) else str(raw)))
        return out

    def stalled(self, job_ids: Sequence[str]) -> list[str]:
        """Jobs a worker started whose lease expired without a record."""
        if not job_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hexists(keys.started(self.run_id), job_id)
            pipe.exists(keys.lease(self.run_id, job_id))
            pipe.hexists(keys.done(self.run_id), job_id)
        flags = pipe.execute()
        out: list[str] = []
        for index, job_id in enumerate(job_ids):
            started, leased, done = flags[3 * index : 3 * index + 3]
            if started and not leased and not done:
                out.append(job_id)
        return out

    def forget_start(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self.client.hdel(keys.started(self.run_id), *job_ids)

    def leased_or_done(self, job_ids: Sequence[str]) -> set[str]:
        pipe = self.client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.exists(keys.lease(self.run_id, job_id))
            pipe.hexists(keys.done(self.run_id), job_id)
        flags = pipe.execute()
        return {
            job_id
            for index, job_id in enumerate(job_ids)
            if flags[2 * index] or flags[2 * index + 1]
        }
