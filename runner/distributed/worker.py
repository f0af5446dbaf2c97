"""The worker side: the Celery task (a thin adapter around ``execute_trial``) and start-up.

The task validates its payload, skips a job that is done or leased, takes the
lease, runs the same ``execute_trial`` the local executor runs, publishes the
record and logs one line. Everything a job needs comes from Redis (the protocol
bundle and content-addressed blobs), never from the coordinator's disk.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from celery import Celery, Task

from runner.agents.base import Agent
from runner.distributed import bundle as bundles
from runner.distributed import keys
from runner.distributed.blobs import BlobStore
from runner.distributed.celery_app import VISIBILITY_TIMEOUT_S, make_app
from runner.distributed.leases import RedisLeases
from runner.errors import DeltarunError, UserError
from runner.models import Job, Outcome, Trial
from runner.models import Task as SuiteTask
from runner.trial import TrialEnv, execute_trial

log = logging.getLogger("deltarun.worker")

TrialBody = Callable[[Job, SuiteTask, Agent, TrialEnv], Trial]
UNKNOWN_PROTOCOL_RETRY_S = 30
PUBLISH_RETRY_FOR_S = 900.0
STOP_TTL_S = 7 * 24 * 3600  # a stopped run stays stopped for a week unless resumed


def worker_name() -> str:
    return os.environ.get("DELTARUN_WORKER_NAME") or socket.gethostname()


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


@dataclass
class WorkerState:
    """Per-process state, created lazily after the pool forks."""

    broker_url: str
    name: str = field(default_factory=worker_name)
    _redis: redis.Redis | None = None
    _blobs: BlobStore | None = None
    _inputs: bundles.RemoteInputs | None = None
    _sandboxes: Any = None
    _protocols: dict[str, bundles.Protocol] = field(default_factory=dict)
    _last_reap: float = 0.0

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = redis.Redis.from_url(self.broker_url, socket_timeout=60)
        return self._redis

    @property
    def blobs(self) -> BlobStore:
        if self._blobs is None:
            self._blobs = BlobStore(self.redis)
        return self._blobs

    @property
    def inputs(self) -> bundles.RemoteInputs:
        """One per process, so parsed archives are cached across jobs, not re-read per job."""
        if self._inputs is None:
            self._inputs = bundles.RemoteInputs(self.blobs)
        return self._inputs

    def sandboxes(self) -> Any:
        if self._sandboxes is None:
            from runner.sandbox.docker import DockerSandboxFactory
            from runner.sandbox.engine import connect

            self._sandboxes = DockerSandboxFactory(connect(), worker=self.name)
        return self._sandboxes

    def protocol(self, sha256: str) -> bundles.Protocol:
        if sha256 not in self._protocols:
            self._protocols[sha256] = bundles.load(self.redis, self.blobs, sha256)
        return self._protocols[sha256]

    def reap_orphans(self) -> None:
        """Remove sandboxes of this worker whose process is gone (a killed pool child)."""
        now = time.monotonic()
        if now - self._last_reap < 60:
            return
        self._last_reap = now
        from runner.sandbox.reaper import reap_orphans

        for line in reap_orphans(self.sandboxes().client, self.name):
            log.info("reaper: %s", line)


def _retrying(action: Callable[[], Any], what: str, deadline_s: float = PUBLISH_RETRY_FOR_S) -> Any:
    """Retry a Redis operation across a Redis restart, for up to ``deadline_s``."""
    start = time.monotonic()
    delay = 0.5
    while True:
        try:
            return action()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            if time.monotonic() - start > deadline_s:
                raise
            log.warning("%s: Redis unavailable (%s); retrying in %.1fs", what, exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def handle(state: WorkerState, payload: dict[str, Any], body: TrialBody) -> str:
    """Run one job message. Returns what happened, for the log."""
    job = Job.model_validate(payload["job"])
    ledger = RedisLeases(state.redis, job.run_id)
    holder = f"{state.name}:{os.getpid()}"
    taken = _retrying(lambda: ledger.acquire(job.job_id, holder), "lease")
    if taken == "done":
        return f"skip {job.job_id[:12]}: already recorded"
    if taken != "ok":
        return f"skip {job.job_id[:12]}: leased by another worker"
    reason = _retrying(lambda: state.redis.get(keys.stopped(job.run_id)), "stop check")
    if reason is not None:
        ledger.release(job.job_id, holder)
        return f"skip {job.job_id[:12]}: run stopped ({reason.decode('utf-8', 'replace')})"
    try:
        with ledger.held(job.job_id, holder):
            protocol = state.protocol(job.protocol_sha256)
            task = protocol.tasks[job.task_id]
            agent = protocol.agents[job.arm]
            if body is execute_trial:
                state.reap_orphans()
            env = TrialEnv(
                controls=protocol.controls,
                inputs=state.inputs,
                sandboxes=state.sandboxes() if body is execute_trial else _NoSandboxes(),
                worker=state.name,
                metrics=protocol.metrics,
            )
            trial = body(job, task, agent, env)
            first = _retrying(lambda: ledger.publish(trial, holder), "publish")
            if trial.route_mismatch and protocol.controls.channel == "scored":
                stop = keys.stopped(job.run_id)
                _retrying(lambda: state.redis.set(stop, "route mismatch", ex=STOP_TTL_S), "stop")
    except BaseException:
        try:
            ledger.release(job.job_id, holder)
        except redis.RedisError:
            pass  # the lease expires by itself
        raise
    dup = "" if first else " (duplicate, kept aside)"
    return (
        f"trial {job.job_id[:12]} {job.arm} {job.task_id}: {trial.outcome.value} "
        f"{trial.wall_s:.1f}s{dup}"
    )


class _NoSandboxes:
    """The bench-only body opens no sandbox; anything that tries is a bug."""

    def open(self, spec: Any) -> Any:
        raise RuntimeError("the bench-only trial body must not open a sandbox")


def bench_trial_without_docker(job: Job, task: SuiteTask, agent: Agent, env: TrialEnv) -> Trial:
    """BENCH ONLY: a trial body that does no Docker work, to measure dispatch overhead."""
    now = env.clock().isoformat()
    return Trial(
        run_id=job.run_id,
        job_id=job.job_id,
        protocol_sha256=job.protocol_sha256,
        task_id=job.task_id,
        arm=job.arm,
        repeat=job.repeat,
        task_kind=task.kind,
        outcome=Outcome.MISS,
        passed=False,
        timeout=False,
        tool_violation=False,
        abstained=False,
        wall_s=0.0,
        worker=env.worker,
        started_at=now,
        finished_at=now,
    )


def register(app: Celery, state: WorkerState) -> None:
    """Register the trial task (and the bench-only one) on ``app``."""

    def make(body: TrialBody) -> Callable[..., str]:
        def run(self: Task, payload: dict[str, Any]) -> str:
            try:
                line = handle(state, payload, body)
            except bundles.UnknownProtocol as exc:
                log.error("job %s: %s", payload.get("job", {}).get("job_id", "?")[:12], exc)
                raise self.retry(countdown=UNKNOWN_PROTOCOL_RETRY_S, max_retries=None) from exc
            except DeltarunError as exc:
                log.error("job %s: %s", payload.get("job", {}).get("job_id", "?")[:12], exc)
                raise self.retry(countdown=UNKNOWN_PROTOCOL_RETRY_S, max_retries=None) from exc
            log.info("%s", line)
            return line

        return run

    app.task(name=keys.TRIAL_TASK, bind=True)(make(execute_trial))
    app.task(name=keys.BENCH_TASK, bind=True)(make(bench_trial_without_docker))


def worker_app(broker_url: str, visibility_timeout_s: int = VISIBILITY_TIMEOUT_S) -> Celery:
    app = make_app(broker_url, visibility_timeout_s)
    register(app, WorkerState(broker_url))
    return app
