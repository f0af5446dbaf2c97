"""``deltarun worker -c auto``: Celery's autoscaler hook driven by the pacing rule.

Celery's ``--autoscale MAX,MIN`` grows the prefork pool to the number of messages the
worker has reserved; that number is the prefetch count, which Celery sets from MAX at
start. With late acks and a prefetch multiplier of 1 (``celery_app``) that would reserve
MAX trials at once and start them together: the start-up burst this replaces. So the
worker passes Celery the floor as both MAX and MIN (the consumer starts with a prefetch
of one level's worth) and names ``PacedAutoscaler`` in ``worker_autoscaler``; the
ceiling and the rest live in the ``Pacer`` it finds in the app's configuration.

Two threads of the main process share the work. The pacer thread (``Pacer.run``), every
``TICK_S``, reads the samples the pool processes left in Redis
(``pacing_samples``), this host's memory and the engine's disk, asks the pure rule
(``pacing.decide``) for the level, logs a change and publishes the level and its reason
in Redis for ``deltarun status``. Celery's event loop calls the autoscaler, which only
moves the pool and the prefetch count to that level: no I/O in the loop. A lower level
takes effect as trials end: the prefetch count drops at once (no new message is taken),
and an idle process is stopped at the next tick.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.worker import state as worker_state
from celery.worker.autoscale import Autoscaler

from runner.distributed import pacing
from runner.distributed.pacing_samples import level_key, samples_key

log = logging.getLogger("deltarun.worker")

TICK_S = float(os.environ.get("DELTARUN_PACE_TICK_S", "2"))
LEVEL_TTL_S = 60  # the published level goes stale (and out of ``status``) this long after
CONF_KEY = "deltarun_pacer"


def default_ceiling() -> int:
    """``--max`` when not given: twice the CPUs, at least 2 and at most 16 (engines are
    reported unreliable past 25-30 containers a host, and each trial has two)."""
    return max(2, min(16, 2 * (os.cpu_count() or 1)))


def config_from_env(ceiling: int) -> pacing.PaceConfig:
    """The rule's knobs; the hold and backoff can be shortened by the environment (tests)."""
    return pacing.PaceConfig(
        ceiling=ceiling,
        hold_s=float(os.environ.get("DELTARUN_PACE_HOLD_S", "10")),
        backoff_s=float(os.environ.get("DELTARUN_PACE_BACKOFF_S", "60")),
    )


def memory_used() -> float | None:
    """The fraction of this host's memory in use (MemAvailable), None without /proc."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        total = int(fields["MemTotal"].split()[0])
        available = int(fields["MemAvailable"].split()[0])
    except (OSError, KeyError, ValueError, IndexError):
        return None
    return 1.0 - available / total if total else None


def disk_used(path: str | None) -> float | None:
    """The fraction of the file system holding ``path`` in use; None when not visible here
    (a worker in a container does not see the engine's data root)."""
    if not path or not os.path.isdir(path):
        return None
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    return usage.used / usage.total if usage.total else None


class Pacer:
    """The main process's pacing state and its thread (see the module docstring)."""

    def __init__(
        self,
        config: pacing.PaceConfig,
        client: redis.Redis,
        node: str,
        disk_path: str | None,
        say: Callable[[str], None],
    ) -> None:
        self.config = config
        self.client = client
        self.node = node
        self.disk_path = disk_path
        self.say = say
        self.rng = random.Random(f"{node}:{time.time_ns()}")
        self.pace = pacing.first_pace(config, time.time(), self.rng.random())
        self.target = self.pace.level
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the pacer thread once (from the autoscaler, after the pool started)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self.run, name="deltarun-pacer", daemon=True)
            self._thread.start()
        self.say(
            f"pace: level {self.pace.level} of at most {self.config.ceiling}: {self.pace.reason}"
        )
        self.publish()

    def run(self) -> None:
        while True:
            time.sleep(TICK_S)
            try:
                self.tick(len(worker_state.active_requests))
            except Exception as exc:  # the pacer never takes the worker down; it holds
                log.warning("pace: no decision this tick (%s)", exc)

    def tick(self, busy: int) -> pacing.Pace:
        """One decision from the samples in Redis and this host's readings."""
        signals = pacing.Signals(
            now=time.time(),
            samples=self.samples(),
            busy=busy,
            memory_used=memory_used(),
            disk_used=disk_used(self.disk_path),
        )
        before = self.pace
        self.pace = pacing.decide(before, signals, self.config, self.rng.random())
        self.target = self.pace.level
        if self.pace.level != before.level:
            self.say(f"pace: level {before.level} -> {self.pace.level}: {self.pace.reason}")
        self.publish()
        return self.pace

    def samples(self) -> list[pacing.Sample]:
        import json

        found = []
        for raw in self.client.lrange(samples_key(self.node), 0, -1):
            try:
                at, kind, seconds = json.loads(raw)
                if kind in (pacing.START, pacing.FAILURE):
                    found.append(pacing.Sample(float(at), kind, float(seconds)))
            except (ValueError, TypeError):
                continue
        return found

    def publish(self) -> None:
        """The level and why, for ``deltarun status``; it expires if this worker dies."""
        key = level_key(self.node)
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(
                key,
                mapping={
                    "level": self.pace.level,
                    "ceiling": self.config.ceiling,
                    "reason": self.pace.reason,
                    "holding": self.pace.holding,
                    "at": f"{time.time():.0f}",
                },
            )
            pipe.expire(key, LEVEL_TTL_S)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("pace: level not published (%s)", exc)


class PacedAutoscaler(Autoscaler):  # type: ignore[misc]  # Celery is untyped
    """Celery's autoscaler with the pool size taken from the ``Pacer``, not from the
    number of reserved messages; named by ``worker_autoscaler``."""

    def __init__(
        self,
        pool: Any,
        max_concurrency: int,
        min_concurrency: int = 0,
        worker: Any = None,
        keepalive: float = TICK_S,
        mutex: Any = None,
    ) -> None:
        super().__init__(pool, max_concurrency, min_concurrency, worker, keepalive, mutex)
        self.pacer: Pacer = worker.app.conf[CONF_KEY]
        self.max_concurrency = self.pacer.config.ceiling
        self.min_concurrency = self.pacer.config.floor

    def _maybe_scale(self, req: Any = None) -> bool:
        self.pacer.start()
        if worker_state.should_stop is not None or worker_state.should_terminate is not None:
            return False  # draining: leave the pool alone
        return self.apply(self.pacer.target)

    def apply(self, level: int) -> bool:
        """Move the prefetch count and the pool to ``level``; whether the pool changed."""
        consumer: Any = getattr(self.worker, "consumer", None)
        qos = getattr(consumer, "qos", None)
        if qos is not None and qos.value and qos.value != level:
            diff = level - qos.value
            (qos.increment_eventually if diff > 0 else qos.decrement_eventually)(abs(diff))
            consumer.initial_prefetch_count = level  # what a reconnection restores
        procs = self.processes
        if level > procs:
            self.scale_up(level - procs)
            return True
        if level < procs:
            self._shrink(procs - level)  # only idle processes; the rest at a later tick
            return True
        return False


def install(app: Celery, pacer: Pacer) -> list[str]:
    """Name ``PacedAutoscaler`` in ``app``'s configuration; Celery's own arguments for it."""
    app.conf[CONF_KEY] = pacer
    app.conf.worker_autoscaler = f"{__name__}:PacedAutoscaler"
    floor = pacer.config.floor
    return ["--autoscale", f"{floor},{floor}"]
