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
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis

from runner import telemetry
from runner.distributed import keys
from runner.distributed.signing import sign_record
from runner.records import Trial

# A lease outlives a stalled renewal by two periods; tests shorten it through the environment.
LEASE_TTL_S = int(os.environ.get("DELTARUN_LEASE_TTL_S", "30"))
RENEW_EVERY_S = max(1.0, LEASE_TTL_S / 3)

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_ACQUIRE = """
if redis.call('HEXISTS', KEYS[3], ARGV[2]) == 1 then
  return 'done'
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[3]) then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
  redis.call('EXPIRE', KEYS[2], ARGV[4])
  return 'ok'
end
return 'leased'
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLeases:
    """Leases and records of one run; records are signed with ``key`` (the job key)."""

    def __init__(self, client: redis.Redis, run_id: str, key: bytes | None = None) -> None:
        self.client = client
        self.run_id = run_id
        self.key = key
        # Scripts run by digest (EVALSHA) after the first call: no script text per job.
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    # -- worker side --------------------------------------------------------------
    def acquire(self, job_id: str, holder: str) -> str:
        """One round trip: ``done`` if recorded, ``ok`` if the lease is ours now, or ``leased``."""
        result = self._acquire(
            keys=[
                keys.lease(self.run_id, job_id),
                keys.started(self.run_id),
                keys.done(self.run_id),
            ],
            args=[holder, job_id, LEASE_TTL_S, keys.RUN_KEY_TTL_S],
        )
        return result.decode() if isinstance(result, bytes) else str(result)

    def renew(self, job_id: str, holder: str) -> bool:
        key = keys.lease(self.run_id, job_id)
        return bool(self._renew(keys=[key], args=[holder, LEASE_TTL_S]))

    def release(self, job_id: str, holder: str) -> None:
        self._release(keys=[keys.lease(self.run_id, job_id)], args=[holder])

    def publish(self, trial: Trial, holder: str) -> bool:
        """Publish a record and release the lease in one round trip; True if it is the first."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hsetnx(keys.done(self.run_id), trial.job_id, trial.worker)
        raw = trial.model_dump_json()
        fields: dict[Any, Any] = {"trial": raw}
        if self.key is not None:
            fields["sig"] = sign_record(self.key, raw)
        pipe.xadd(keys.records(self.run_id), fields)
        # Every write refreshes the run's expiry: a run nobody finishes leaves nothing for good.
        pipe.expire(keys.done(self.run_id), keys.RUN_KEY_TTL_S)
        pipe.expire(keys.records(self.run_id), keys.RUN_KEY_TTL_S)
        self._release(keys=[keys.lease(self.run_id, trial.job_id)], args=[holder], client=pipe)
        first, *_ = pipe.execute()
        return bool(first)

    @contextmanager
    def held(self, job_id: str, holder: str) -> Iterator[None]:
        """Keep the lease renewed (by this process's keeper thread) while the body runs."""
        keeper = LeaseKeeper.instance()
        keeper.add(self, job_id, holder)
        try:
            yield
        finally:
            keeper.discard(self, job_id)

    # -- coordinator side ----------------------------------------------------------
    def read(
        self, cursor: str, count: int = 500, block_ms: int | None = 1000
    ) -> list[tuple[str, str, str | None]]:
        """Records after ``cursor`` (a stream id), oldest first, as (id, trial JSON, signature)."""
        reply: Any = self.client.xread(
            {keys.records(self.run_id): cursor}, count=count, block=block_ms
        )
        out: list[tuple[str, str, str | None]] = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                eid = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                raw = _text(fields.get(b"trial") or fields.get("trial")) or ""
                out.append((eid, raw, _text(fields.get(b"sig") or fields.get("sig"))))
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


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class LeaseKeeper:
    """One daemon thread per process that renews every lease the process holds.

    One thread for all leases, rather than one per trial, keeps the per-job cost
    of a lease to two Redis round trips (take with the done check; release with
    the record).
    """

    _instance: LeaseKeeper | None = None
    _instance_pid = 0

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], tuple[RedisLeases, str]] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
        self._thread.start()

    @classmethod
    def instance(cls) -> LeaseKeeper:
        # A forked pool child must not reuse its parent's (dead) thread.
        if cls._instance is None or cls._instance_pid != os.getpid():
            cls._instance = LeaseKeeper()
            cls._instance_pid = os.getpid()
        return cls._instance

    def add(self, ledger: RedisLeases, job_id: str, holder: str) -> None:
        with self._lock:
            self._held[(ledger.run_id, job_id)] = (ledger, holder)

    def discard(self, ledger: RedisLeases, job_id: str) -> None:
        with self._lock:
            self._held.pop((ledger.run_id, job_id), None)

    def _loop(self) -> None:
        while True:
            time.sleep(RENEW_EVERY_S)
            with self._lock:
                held = list(self._held.items())
            for (run, job_id), (ledger, holder) in held:
                try:
                    kept = ledger.renew(job_id, holder)
                except redis.RedisError:
                    continue  # Redis restarting: try again at the next tick
                with self._lock:
                    # A lease its trial gave up meanwhile (published, let go) is not lost.
                    still = (run, job_id) in self._held
                if kept or still:
                    telemetry.lease_renewed(kept)
