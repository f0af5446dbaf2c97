"""The worker: start-up checks, then Celery's serve loop over the queues of its images.

``serve`` runs the checks (``startup``), registers the trial task (``trial_task``: a
thin adapter around ``execute_trial``), hooks the image watcher (``served_images``)
and the scale-down drain (``drain``) to Celery's signals, and hands the process to
Celery's prefork worker. ``WorkerOptions`` is what ``deltarun worker`` asks for.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from celery import Celery
from celery.signals import worker_ready, worker_shutdown, worker_shutting_down

from runner import telemetry
from runner.distributed import keys
from runner.distributed.celery_app import VISIBILITY_TIMEOUT_S, make_app
from runner.distributed.drain import Drain
from runner.distributed.pacing_samples import FirstStartJitter, paced
from runner.distributed.pacing_scaler import Pacer, config_from_env, install
from runner.distributed.served_images import IMAGE_POLL_S, Watcher
from runner.distributed.signing import fingerprint
from runner.distributed.startup import Started, start_up
from runner.distributed.trial_task import register
from runner.distributed.worker_state import WorkerState
from runner.trial.execute import execute_trial

DRAIN_TIMEOUT_S = 900.0
FIRST_START_JITTER_S = 2.0  # -c auto: the first trial of each pool process waits up to this


def serve(
    broker: str,
    *,
    concurrency: int,
    images: list[str] | None,
    name: str | None = None,
    visibility_timeout_s: int = VISIBILITY_TIMEOUT_S,
    say: Callable[[str], None] = print,
    extra: Callable[[Celery, WorkerState], None] | None = None,
    pull: bool = True,
    poll_s: float = IMAGE_POLL_S,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
    log_json: bool = False,
    job_key: bytes,
    metrics_port: int | None = None,
    metrics_addr: str = telemetry.DEFAULT_ADDR,
    disk_budget: int | None = None,
    pace_max: int | None = None,
) -> None:
    """Check Redis, Docker and every image (one line and exit on any problem with an image
    ``-Q`` names, before a job is taken), reap what a crashed worker of this name left, then
    serve the queues of ``images``; with ``images`` None, of every image a run published
    (pulled by digest when missing, kept only with its pinned ID) and of the default sandbox
    image when present. A background thread takes on images published later.
    ``extra`` registers more tasks (the benchmarks' Docker-free body). With ``metrics_port``,
    Prometheus metrics of the whole pool are served on ``metrics_addr`` (``telemetry``).
    ``pace_max`` (``-c auto``): the pacer sizes the pool, from 1 to ``pace_max``."""
    started = start_up(
        broker,
        images=images,
        name=name,
        pull=pull,
        job_key=job_key,
        say=say,
        log_json=log_json,
        metrics_port=metrics_port,
        metrics_addr=metrics_addr,
        disk_budget=disk_budget,
    )
    state = WorkerState(broker, job_key)
    app = make_app(broker, visibility_timeout_s)
    pool_args, node = _register(app, state, started, concurrency, pace_max, say)
    if extra is not None:
        extra(app, state)
    app.conf.worker_hijack_root_logger = False
    served = started.served
    what = ", ".join(served.served) or "none yet (waiting for a run to publish its images)"
    say(
        f"deltarun worker {started.name}: -c {_level(concurrency, pace_max)}, images {what}, "
        f"OCI runtimes {', '.join(served.runtimes) or 'the default'}, visibility timeout "
        f"{visibility_timeout_s}s, job key {fingerprint(job_key)}"
    )
    queues = [q for i in served.served for q in keys.queues_for_image(i, served.runtimes)]
    queues = queues or [keys.IDLE_QUEUE]
    served.consuming.update(queues)
    watcher = Watcher(app, node, served, broker, poll_s, job_key)
    worker_ready.connect(watcher.on_ready, weak=False)
    worker_shutdown.connect(watcher.on_shutdown, weak=False)
    _hook_drain(started, drain_timeout_s, say)
    app.worker_main(_celery_argv(pool_args, queues, node))


def _register(
    app: Celery,
    state: WorkerState,
    started: Started,
    concurrency: int,
    pace_max: int | None,
    say: Callable[[str], None],
) -> tuple[list[str], str]:
    """Register the trial task; Celery's arguments for the pool (``concurrency`` processes,
    or with ``pace_max``, ``-c auto``: Celery's autoscaler hook driven by the pacer,
    ``pacing_scaler``, the trials timed for it and jittered, ``pacing_samples``) and the
    worker's Celery node name."""
    node = f"deltarun-{os.getpid()}@{started.name}"
    if pace_max is None:
        register(app, state)
        return ["--concurrency", str(concurrency)], node
    pacer = Pacer(config_from_env(pace_max), started.redis, node, _engine_root(started), say)
    state.pace_node = node
    jitter = FirstStartJitter(FIRST_START_JITTER_S)
    register(app, state, body=paced(execute_trial, jitter, state.record_pace))
    return install(app, pacer), node


def _level(concurrency: int, pace_max: int | None) -> str:
    return str(concurrency) if pace_max is None else f"auto (1 to {pace_max})"


def _engine_root(started: Started) -> str | None:
    """The engine's data root (images, containers, volumes), whose disk pacing watches."""
    try:
        root = started.docker.info().get("DockerRootDir")
    except Exception:  # any engine error: pacing then watches memory and starts only
        return None
    return str(root) if root else None


def _hook_drain(started: Started, timeout_s: float, say: Callable[[str], None]) -> None:
    """On SIGTERM, drain (``runner.distributed.drain``): the sandboxes of trials handed back
    are reaped like a crashed worker's."""
    from runner.sandbox.reaper import reap

    client = started.docker
    drain = Drain(
        started.redis,
        started.name,
        timeout_s,
        say,
        lambda: reap(client, dry_run=False, past_deadline=False),
    )
    worker_shutting_down.connect(drain.on_shutting_down, weak=False)


def _celery_argv(pool_args: list[str], queues: list[str], node: str) -> list[str]:
    """Celery's own command line: a prefork pool (its size: ``pool_args``) consuming
    ``queues`` as ``node``."""
    return [
        "worker",
        *pool_args,
        "--queues",
        ",".join(queues),
        "--hostname",
        node,
        "--loglevel",
        "WARNING",
        "--pool",
        "prefork",
        "--without-gossip",
        "--without-mingle",
    ]


@dataclass(frozen=True)
class WorkerOptions:
    """What ``deltarun worker`` asks for, as its command line gives it (``serve`` says
    what each option does)."""

    concurrency: int
    queues: str | None  # -Q: comma-separated sandbox images; None serves what runs publish
    name: str | None
    visibility_timeout_s: int
    pull: bool
    drain_timeout_s: float
    log_json: bool
    metrics_port: int | None
    metrics_addr: str
    disk_budget: int | None = None  # --disk-budget, in bytes
    pace_max: int | None = None  # -c auto: the ceiling (--max); None: a fixed -c

    def images(self) -> list[str] | None:
        """The images ``-Q`` names (blanks dropped), or None without ``-Q``."""
        if self.queues is None:
            return None
        return [q.strip() for q in self.queues.split(",") if q.strip()]

    def serve(self, broker: str, job_key: bytes, say: Callable[[str], None]) -> None:
        """Serve as these options say, on ``broker``, running jobs signed with ``job_key``."""
        serve(
            broker,
            concurrency=self.concurrency,
            images=self.images(),
            name=self.name,
            visibility_timeout_s=self.visibility_timeout_s,
            say=say,
            pull=self.pull,
            drain_timeout_s=self.drain_timeout_s,
            log_json=self.log_json,
            job_key=job_key,
            metrics_port=self.metrics_port,
            metrics_addr=self.metrics_addr,
            disk_budget=self.disk_budget,
            pace_max=self.pace_max,
        )
