"""The Celery task of a worker: a thin adapter around ``execute_trial``.

The task checks the job's signature (a job not signed with this worker's job key
is refused, logged and reported to its coordinator, never run), validates its
payload, skips a job that is done or leased, takes the lease, runs the same
``execute_trial`` the local executor runs, publishes the signed record and logs
one line. Everything a job needs comes from Redis (the protocol bundle and
content-addressed blobs), never from the coordinator's disk.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import redis
from celery import Celery, Task
from pydantic import ValidationError

from runner import __version__, telemetry
from runner.agents.interface import Agent
from runner.distributed import keys
from runner.distributed import protocol_bundle as bundles
from runner.distributed.keys import KEY_REFUSAL, STOP_TTL_S, VERSION_REFUSAL
from runner.distributed.leases import RedisLeases
from runner.distributed.rate_limits import RedisLimiters
from runner.distributed.run_budget import RedisAccounts
from runner.distributed.signing import fingerprint, job_refusal
from runner.distributed.worker_state import WorkerState
from runner.errors import DeltarunError
from runner.records import Job, Trial
from runner.records import Task as SuiteTask
from runner.trial.env import TrialEnv, stop_reason, trial_env
from runner.trial.execute import execute_trial

log = logging.getLogger("deltarun.worker")

TrialBody = Callable[[Job, SuiteTask, Agent, TrialEnv], Trial]
UNKNOWN_PROTOCOL_RETRY_S = 30
PUBLISH_RETRY_FOR_S = 900.0


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


def handle(
    state: WorkerState, payload: dict[str, Any], body: TrialBody, sandboxes: Any = None
) -> str:
    """Run one job message with ``body`` (``execute_trial``, on this worker's Docker engine
    unless ``sandboxes`` says otherwise). Returns what happened, for the log."""
    refusal = job_refusal(state.job_key, payload)
    if refusal is not None:
        return _refused(state, payload, refusal)
    try:
        job = Job.model_validate(payload["job"])
    except ValidationError as exc:  # signed by this run's key: written by another deltarun
        return _refused(state, payload, _unreadable(exc), kind=VERSION_REFUSAL)
    ledger = RedisLeases(state.redis, job.run_id, state.job_key)
    holder = f"{state.name}:{os.getpid()}"
    fields = _fields(state, job)
    skip = _take(state, ledger, job, holder)
    if skip is not None:
        return _skipped(job, skip, fields)
    log.info(
        "trial %s %s %s: started",
        job.job_id[:12],
        job.arm,
        job.task_id,
        extra={"fields": {"event": "trial_started", **fields}},
    )
    telemetry.trial_started()
    try:
        with ledger.held(job.job_id, holder):
            trial, first = _run(state, payload, job, body, sandboxes, ledger, holder)
    except bundles.UnreadableBundle as exc:  # another deltarun's run: refused, not retried
        with contextlib.suppress(redis.RedisError):  # else the lease expires by itself
            ledger.release(job.job_id, holder)
        return _refused(state, payload, str(exc), kind=VERSION_REFUSAL)
    except BaseException:
        try:
            ledger.release(job.job_id, holder)
        except redis.RedisError:
            pass  # the lease expires by itself
        raise
    return _finished(job, trial, first, fields)


def _fields(state: WorkerState, job: Job) -> dict[str, Any]:
    """The job's fields of every trial event this worker logs (``--log-json``)."""
    return {
        "run_id": job.run_id,
        "job_id": job.job_id,
        "task_id": job.task_id,
        "arm": job.arm,
        "repeat": job.repeat,
        "worker": state.name,
        "pid": os.getpid(),
    }


def _take(state: WorkerState, ledger: RedisLeases, job: Job, holder: str) -> str | None:
    """Take the job's lease for ``holder``; None once taken, else why the job is skipped
    (recorded, leased by another worker, or its run stopped: the lease given back)."""
    taken = _retrying(lambda: ledger.acquire(job.job_id, holder), "lease")
    if taken == "done":
        return "already recorded"
    if taken != "ok":
        return "leased by another worker"
    reason = _retrying(lambda: state.redis.get(keys.stopped(job.run_id)), "stop check")
    if reason is not None:
        ledger.release(job.job_id, holder)
        return f"run stopped ({reason.decode('utf-8', 'replace')})"
    return None


def _run(
    state: WorkerState,
    payload: dict[str, Any],
    job: Job,
    body: TrialBody,
    sandboxes: Any,
    ledger: RedisLeases,
    holder: str,
) -> tuple[Trial, bool]:
    """Run the leased job with ``body`` and publish its record; with the trial, whether this
    record was the job's first (a later one is kept aside)."""
    protocol = state.protocol(job.protocol_sha256)
    task = protocol.tasks[job.task_id]
    agent = protocol.agents[job.arm]
    if sandboxes is None:
        state.reap_orphans()
        sandboxes = state.sandboxes()
        # A gateway's spend goes to the run's account in the fleet's Redis (budget.run_usd),
        # its permits come from the route's limiter there (rate_limits).
        sandboxes.run_accounts = RedisAccounts(state.redis)
        sandboxes.limiters = RedisLimiters(state.redis)
    env = trial_env(
        protocol.controls,
        state.inputs(protocol),
        sandboxes,
        state.name,
        protocol.metrics,
        _pins(payload),
    )
    trial = body(job, task, agent, env)
    telemetry.trial_finished(trial.outcome.value)
    first = _retrying(lambda: ledger.publish(trial, holder), "publish")
    if stop_reason(trial, protocol.controls) is not None:
        # Set here too, not only by the coordinator: no next job of the run starts
        # in the second before the coordinator reads this record.
        stop = keys.stopped(job.run_id)
        _retrying(lambda: state.redis.set(stop, "route mismatch", ex=STOP_TTL_S), "stop")
    return trial, bool(first)


def _finished(job: Job, trial: Trial, first: bool, fields: dict[str, Any]) -> str:
    """Log the trial's one line (and its ``trial_finished`` event); return the line."""
    dup = "" if first else " (duplicate, kept aside)"
    line = (
        f"trial {job.job_id[:12]} {job.arm} {job.task_id}: {trial.outcome.value} "
        f"{trial.wall_s:.1f}s{dup}"
    )
    finished = {
        "event": "trial_finished",
        **fields,
        "outcome": trial.outcome.value,
        "wall_s": trial.wall_s,
        "duplicate": not first,
        "error": trial.error,
    }
    log.info("%s", line, extra={"fields": finished})
    return line


def _pins(payload: dict[str, Any]) -> dict[str, str]:
    """The signed message's image pins (tag → ID): the task image's, and an installed
    agent's layer on it; the job's sandboxes are made from them."""
    pins = {}
    for tag_field, id_field in (("image", "image_id"), ("agent_image", "agent_image_id")):
        image, pin = payload.get(tag_field), payload.get(id_field)
        if isinstance(image, str) and isinstance(pin, str):
            pins[image] = pin
    return pins


def _unreadable(exc: ValidationError) -> str:
    """Why a signed job cannot be read here: its coordinator runs another deltarun."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "job"
    return f"deltarun {__version__} cannot read the job ({where}: {first['msg']})"


def _refused(state: WorkerState, payload: Any, why: str, kind: str = KEY_REFUSAL) -> str:
    """Log a job this worker will not run and leave its coordinator a notice (the job's own
    run and id, as far as the message says them; nothing of it is trusted or run); ``kind``
    says whether the job key or the worker's deltarun is what does not match."""
    job = payload.get("job") if isinstance(payload, dict) else None
    job = job if isinstance(job, dict) else {}
    run_id, job_id = str(job.get("run_id", "?"))[:80], str(job.get("job_id", "?"))[:80]
    key = fingerprint(state.job_key)
    line = f"refused job {job_id[:12]} of run {run_id[:12]}: {why} (this worker's key {key})"
    log.error(
        "%s",
        line,
        extra={
            "fields": {
                "event": "job_refused",
                "run_id": run_id,
                "job_id": job_id,
                "reason": why,
                "worker": state.name,
                "key": key,
            }
        },
    )
    notice = json.dumps(
        {"worker": state.name, "key": key, "job_id": job_id, "reason": why, "kind": kind}
    )
    try:
        pipe = state.redis.pipeline(transaction=True)
        pipe.rpush(keys.refused(run_id), notice)
        pipe.ltrim(keys.refused(run_id), -1000, -1)
        pipe.expire(keys.refused(run_id), 24 * 3600)
        pipe.execute()
    except redis.RedisError:
        pass  # the notice is advice; the job is refused either way
    return line


def _skipped(job: Job, why: str, fields: dict[str, Any]) -> str:
    line = f"skip {job.job_id[:12]}: {why}"
    log.info("%s", line, extra={"fields": {"event": "trial_skipped", **fields, "reason": why}})
    return line


def register(
    app: Celery,
    state: WorkerState,
    name: str = keys.TRIAL_TASK,
    body: TrialBody = execute_trial,
    sandboxes: Any = None,
) -> None:
    """Register the Celery task ``name`` that runs jobs with ``body`` on ``app``: a thin
    adapter (validate, lease, run, publish); ``bench/`` registers a body without Docker."""

    def make(body: TrialBody) -> Callable[..., str]:
        def run(self: Task, payload: dict[str, Any]) -> str:
            try:
                line = handle(state, payload, body, sandboxes)
            except bundles.UnknownProtocol as exc:
                telemetry.infrastructure_error(telemetry.UNKNOWN_PROTOCOL)
                log.error("job %s: %s", payload.get("job", {}).get("job_id", "?")[:12], exc)
                raise self.retry(countdown=UNKNOWN_PROTOCOL_RETRY_S, max_retries=None) from exc
            except DeltarunError as exc:
                telemetry.infrastructure_error(telemetry.INFRA)
                log.error("job %s: %s", payload.get("job", {}).get("job_id", "?")[:12], exc)
                raise self.retry(countdown=UNKNOWN_PROTOCOL_RETRY_S, max_retries=None) from exc
            except Exception:
                telemetry.infrastructure_error(telemetry.INFRA)
                raise
            return line  # handle() logged it

        return run

    app.task(name=name, bind=True)(make(body))
