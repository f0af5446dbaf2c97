"""What a worker's trials tell its pacer (``-c auto``): each container start's latency and
each exec failure, pushed by the pool process that saw it to a short list in Redis that
the worker's main process reads (``pacing_scaler``). Also the jittered first start of each
pool process: a level raised by one, or workers started together, do not start their
containers in the same instant.

A start is timed from the sandbox session's entry to its started container (volumes, the
model gateway when the trial has one, create, start), the same span as the
``sandbox_start_seconds`` metric. An exec failure is an engine error starting a sandbox
or a trial recorded as an infrastructure ``error``; nothing an agent writes or how long
it thinks is a sample, so an agent cannot steer its worker's level.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Callable
from typing import Any

import redis

from runner.agents.interface import Agent
from runner.distributed import keys
from runner.errors import SandboxError
from runner.records import Job, Trial
from runner.records import Task as SuiteTask
from runner.trial.env import TrialEnv

log = logging.getLogger("deltarun.worker")

KEEP = 500  # samples kept per worker: far more than a decision looks at
SAMPLES_TTL_S = 3600  # a worker gone leaves its list for an hour at most


def samples_key(node: str) -> str:
    """The list of recent samples of the worker ``node`` (its Celery node name)."""
    return f"{keys.PREFIX}:pace:{node}:samples"


def level_key(node: str) -> str:
    """The hash the worker ``node`` publishes its level and reason in (``status``)."""
    return f"{keys.PREFIX}:pace:{node}"


def push(client: redis.Redis, node: str, kind: str, seconds: float = 0.0) -> None:
    """Add one sample; a Redis hiccup loses it (pacing is advice, never a trial's fate)."""
    key = samples_key(node)
    try:
        pipe = client.pipeline(transaction=False)
        pipe.rpush(key, json.dumps([time.time(), kind, round(seconds, 4)]))
        pipe.ltrim(key, -KEEP, -1)
        pipe.expire(key, SAMPLES_TTL_S)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("pace: sample not recorded (%s)", exc)


class TimedFactory:
    """A sandbox factory whose sessions report their start latency and engine failures;
    everything else is the wrapped factory's."""

    def __init__(self, inner: Any, record: Callable[[str, float], None]) -> None:
        self._inner = inner
        self._record = record

    def open(self, spec: Any) -> _TimedSession:
        return _TimedSession(self._inner.open(spec), self._record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _TimedSession:
    def __init__(self, inner: Any, record: Callable[[str, float], None]) -> None:
        self._inner = inner
        self._record = record

    def __enter__(self) -> Any:
        began = time.monotonic()
        try:
            sandbox = self._inner.__enter__()
        except SandboxError:
            self._record("failure", 0.0)
            raise
        self._record("start", time.monotonic() - began)
        return sandbox

    def __exit__(self, *exc_info: object) -> None:
        self._inner.__exit__(*exc_info)


class FirstStartJitter:
    """Sleep a random part of ``jitter_s`` before the first trial of each pool process (a
    process is new at start and at each raise), seeded by the process id."""

    def __init__(self, jitter_s: float) -> None:
        self.jitter_s = jitter_s
        self._done_in: int | None = None

    def wait(self) -> float:
        pid = os.getpid()
        if self._done_in == pid or self.jitter_s <= 0:
            return 0.0
        self._done_in = pid
        delay = random.Random(pid).uniform(0, self.jitter_s)
        time.sleep(delay)
        return delay


Body = Callable[[Job, SuiteTask, Agent, TrialEnv], Trial]


def paced(body: Body, jitter: FirstStartJitter, record: Callable[[str, float], None]) -> Body:
    """``body`` (``execute_trial``) with the first-start jitter before it and a failure
    sample for a trial recorded as an infrastructure ``error``."""

    def run(job: Job, task: SuiteTask, agent: Agent, env: TrialEnv) -> Trial:
        jitter.wait()
        trial = body(job, task, agent, env)
        if trial.outcome.value == "error":
            record("failure", 0.0)
        return trial

    return run
