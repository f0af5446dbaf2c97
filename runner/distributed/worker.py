"""The worker side: the Celery task (a thin adapter around ``execute_trial``) and start-up.

The task checks the job's signature (a job not signed with this worker's job key
is refused, logged and reported to its coordinator, never run), validates its
payload, skips a job that is done or leased, takes the lease, runs the same
``execute_trial`` the local executor runs, publishes the signed record and logs
one line. Everything a job needs comes from Redis (the protocol bundle and
content-addressed blobs), never from the coordinator's disk.

Images: a worker serves one Celery queue per sandbox image (``ServedImages``).
Without ``-Q`` it serves what runs publish in ``deltarun:images`` (tag → pinned
image ID and registry reference), pulling a missing image by digest and keeping
it only with the pinned ID; a thread of the main process (``Watcher``) takes on
images published later and starts consuming their queues.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from celery import Celery, Task
from celery.signals import (
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)

from runner import telemetry
from runner.agents.base import Agent
from runner.distributed import bundle as bundles
from runner.distributed import keys, registry
from runner.distributed.blobs import BlobStore
from runner.distributed.celery_app import VISIBILITY_TIMEOUT_S, make_app
from runner.distributed.connection import connect_redis
from runner.distributed.drain import Drain
from runner.distributed.keys import STOP_TTL_S
from runner.distributed.leases import RedisLeases
from runner.distributed.signing import fingerprint, job_refusal
from runner.errors import DeltarunError, DigestMismatch, UsageError
from runner.models import Job, Trial
from runner.models import Task as SuiteTask
from runner.trial.env import stop_reason, trial_env
from runner.trial.execute import TrialEnv, execute_trial

log = logging.getLogger("deltarun.worker")

TrialBody = Callable[[Job, SuiteTask, Agent, TrialEnv], Trial]
UNKNOWN_PROTOCOL_RETRY_S = 30
PUBLISH_RETRY_FOR_S = 900.0
IMAGE_POLL_S = float(os.environ.get("DELTARUN_IMAGE_POLL_S", "10"))
DRAIN_TIMEOUT_S = 900.0


def worker_name() -> str:
    return os.environ.get("DELTARUN_WORKER_NAME") or socket.gethostname()


@dataclass
class WorkerState:
    """Per-process state, created lazily after the pool forks."""

    broker_url: str
    job_key: bytes
    name: str = field(default_factory=worker_name)
    _redis: redis.Redis | None = None
    _blobs: BlobStore | None = None
    _inputs: dict[str, bundles.RemoteInputs] = field(default_factory=dict)
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

    def inputs(self, protocol: bundles.Protocol) -> bundles.RemoteInputs:
        """One per protocol, sharing the process's git store and bounded member cache."""
        if protocol.sha256 not in self._inputs:
            shared = next(iter(self._inputs.values()), None)
            self._inputs[protocol.sha256] = bundles.RemoteInputs(
                self.blobs,
                protocol.git_blobs,
                protocol.controls.runtime.archive_caps,
                store=shared.store if shared else None,
                cache=shared.cache if shared else None,
            )
        return self._inputs[protocol.sha256]

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


def handle(
    state: WorkerState, payload: dict[str, Any], body: TrialBody, sandboxes: Any = None
) -> str:
    """Run one job message with ``body`` (``execute_trial``, on this worker's Docker engine
    unless ``sandboxes`` says otherwise). Returns what happened, for the log."""
    refusal = job_refusal(state.job_key, payload)
    if refusal is not None:
        return _refused(state, payload, refusal)
    job = Job.model_validate(payload["job"])
    ledger = RedisLeases(state.redis, job.run_id, state.job_key)
    holder = f"{state.name}:{os.getpid()}"
    fields = {
        "run_id": job.run_id,
        "job_id": job.job_id,
        "task_id": job.task_id,
        "arm": job.arm,
        "repeat": job.repeat,
        "worker": state.name,
        "pid": os.getpid(),
    }
    taken = _retrying(lambda: ledger.acquire(job.job_id, holder), "lease")
    if taken == "done":
        return _skipped(job, "already recorded", fields)
    if taken != "ok":
        return _skipped(job, "leased by another worker", fields)
    reason = _retrying(lambda: state.redis.get(keys.stopped(job.run_id)), "stop check")
    if reason is not None:
        ledger.release(job.job_id, holder)
        return _skipped(job, f"run stopped ({reason.decode('utf-8', 'replace')})", fields)
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
            protocol = state.protocol(job.protocol_sha256)
            task = protocol.tasks[job.task_id]
            agent = protocol.agents[job.arm]
            if sandboxes is None:
                state.reap_orphans()
                sandboxes = state.sandboxes()
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
    except BaseException:
        try:
            ledger.release(job.job_id, holder)
        except redis.RedisError:
            pass  # the lease expires by itself
        raise
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
    """The signed message's image pin (tag → ID): the job's sandboxes are made from it."""
    image, pin = payload.get("image"), payload.get("image_id")
    return {image: pin} if isinstance(image, str) and isinstance(pin, str) else {}


def _refused(state: WorkerState, payload: Any, why: str) -> str:
    """Log a job this worker will not run and leave its coordinator a notice (the job's own
    run and id, as far as the message says them; nothing of it is trusted or run)."""
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
    notice = json.dumps({"worker": state.name, "key": key, "job_id": job_id, "reason": why})
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
) -> None:
    """Check Redis, Docker and every image (one line and exit on any problem with an image
    ``-Q`` names, before a job is taken), reap what a crashed worker of this name left, then
    serve the queues of ``images``; with ``images`` None, of every image a run published
    (pulled by digest when missing, kept only with its pinned ID) and of the default sandbox
    image when present. A background thread takes on images published later.
    ``extra`` registers more tasks (the benchmarks' Docker-free body). With ``metrics_port``,
    Prometheus metrics of the whole pool are served on ``metrics_addr`` (``telemetry``)."""
    from runner.sandbox.engine import connect
    from runner.sandbox.reaper import reap, reap_orphans

    if name:
        os.environ["DELTARUN_WORKER_NAME"] = name
    if metrics_port is not None:  # first: a port in use is one line before anything else
        url = telemetry.start(metrics_port, metrics_addr)
        worker_process_shutdown.connect(telemetry.on_process_shutdown, weak=False)
        say(f"metrics: {url}")
    me = worker_name()
    client_redis = connect_redis(broker)
    client = connect()
    if images is not None and not images:
        raise UsageError("-Q: name at least one sandbox image, or leave -Q out")
    served = ServedImages(client, me, only=images, pull=pull, say=say)
    served.start(registry.published(client_redis, job_key))
    for line in reap_orphans(client, me):
        say(f"reaper: {line}")
    for line in reap(client, dry_run=False, past_deadline=False):  # owners gone on this host
        if line != "nothing to remove":
            say(f"reaper: {line}")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("deltarun").setLevel(logging.INFO)
    if log_json:
        from runner.distributed.logjson import use_json_logs

        use_json_logs()
    state = WorkerState(broker, job_key)
    app = make_app(broker, visibility_timeout_s)
    register(app, state)
    if extra is not None:
        extra(app, state)
    app.conf.worker_hijack_root_logger = False
    node = f"deltarun-{os.getpid()}@{me}"
    what = ", ".join(served.served) or "none yet (waiting for a run to publish its images)"
    say(
        f"deltarun worker {me}: -c {concurrency}, images {what}, "
        f"visibility timeout {visibility_timeout_s}s, job key {fingerprint(job_key)}"
    )
    queues = [keys.queue_for_image(i) for i in served.served] or [keys.IDLE_QUEUE]
    served.consuming.update(queues)
    watcher = Watcher(app, node, served, broker, poll_s, job_key)
    worker_ready.connect(watcher.on_ready, weak=False)
    worker_shutdown.connect(watcher.on_shutdown, weak=False)
    drain = Drain(
        client_redis,
        me,
        drain_timeout_s,
        say,
        lambda: reap(client, dry_run=False, past_deadline=False),
    )
    worker_shutting_down.connect(drain.on_shutting_down, weak=False)
    app.worker_main(
        [
            "worker",
            "--concurrency",
            str(concurrency),
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
    )


def default_image() -> str:
    """The sandbox image of controls that name none: served when present, without -Q."""
    from runner.config.model import Runtime

    return str(Runtime.model_fields["image"].default)


@dataclass
class ServedImages:
    """The images a worker serves, each present with the image ID the run pins and past the
    preflight. ``only`` is ``-Q`` (a filter; None serves whatever runs publish); ``pull``
    allows pulling a missing image by the digest a run published."""

    client: Any
    worker: str
    only: list[str] | None
    pull: bool
    say: Callable[[str], None]
    served: dict[str, str] = field(default_factory=dict)  # tag → image ID
    consuming: set[str] = field(default_factory=set)  # Celery queues
    refused: dict[str, registry.Published] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # tag → last message logged

    def start(self, published: dict[str, registry.Published]) -> None:
        """The images to serve from the start: an image ``-Q`` names must be usable (one
        line and exit otherwise); one merely published is logged and skipped when not."""
        if self.only is not None:
            for tag in self.only:
                self.admit(tag, published.get(tag))
            return
        tags = sorted(published)
        default = default_image()
        if default not in published and _present(self.client, default):
            tags.append(default)
        for tag in tags:
            try:
                self.admit(tag, published.get(tag))
            except DeltarunError as exc:
                self.note(tag, published.get(tag), exc, self.say)

    def admit(self, tag: str, entry: registry.Published | None) -> None:
        """Make ``tag`` servable: present with the published pin (pulled by digest when
        missing and pulling is on), then the preflight with default limits."""
        from runner.sandbox.engine import image_id

        if entry is None:
            pinned = image_id(self.client, tag)  # a missing image: one line naming how to build
        else:
            ref = entry.ref if self.pull else None
            if registry.ensure(self.client, ref, entry.id, tag) == "pulled":
                self.say(f"pulled {tag} ({entry.id[:19]}) from {entry.ref}")
            pinned = entry.id
        _preflight(self.client, self.worker, [tag])
        self.served[tag] = pinned
        self.refused.pop(tag, None)
        self.failures.pop(tag, None)

    def note(
        self,
        tag: str,
        entry: registry.Published | None,
        exc: DeltarunError,
        say: Callable[[str], None],
    ) -> None:
        """Log a failure once; a refused pin is not tried again until the run publishes
        another entry for the tag (a registry that is down is tried again each round)."""
        if isinstance(exc, DigestMismatch) and entry is not None:
            self.refused[tag] = entry
        line = f"not served: {exc}" if tag in str(exc) else f"not served: {tag}: {exc}"
        if self.failures.get(tag) != line:
            self.failures[tag] = line
            say(line)

    def changes(self, published: dict[str, registry.Published]) -> list[str]:
        """Tags published with a pin this worker does not serve yet (and may: ``-Q``)."""
        return [
            tag
            for tag, entry in sorted(published.items())
            if (self.only is None or tag in self.only)
            and self.served.get(tag) != entry.id
            and self.refused.get(tag) != entry
        ]


@dataclass
class Watcher:
    """The background thread of a worker's main process: every ``poll_s`` it reads the
    images runs published, ensures the new ones and consumes their queues (Celery remote
    control to this very node, which works with the prefork pool: the main process
    consumes, the pool children only run tasks)."""

    app: Celery
    node: str
    images: ServedImages
    broker: str
    poll_s: float
    job_key: bytes
    stop: threading.Event = field(default_factory=threading.Event)

    def on_ready(self, sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", self.app) is self.app and not self.stop.is_set():
            threading.Thread(target=self.run, name="deltarun-images", daemon=True).start()

    def on_shutdown(self, **_: Any) -> None:
        self.stop.set()

    def run(self) -> None:
        from runner.sandbox.engine import connect

        client = redis.Redis.from_url(self.broker, socket_timeout=30)
        self.images.client = connect()  # this thread's own engine connection
        self.images.say = lambda line: log.info("%s", line)
        while not self.stop.wait(self.poll_s):
            try:
                self.round(registry.published(client, self.job_key))
            except (redis.RedisError, OSError) as exc:
                log.warning("images: Redis unavailable (%s); trying again", exc)
            except Exception:  # the thread must outlive any one failure
                log.exception("images: unexpected failure; trying again")

    def round(self, published: dict[str, registry.Published]) -> None:
        """Ensure every newly published image, then consume (or stop consuming) queues."""
        for tag in self.images.changes(published):
            entry = published[tag]
            try:
                self.images.admit(tag, entry)
            except DeltarunError as exc:
                self.images.note(tag, entry, exc, lambda line: log.error("%s", line))
                self.images.served.pop(tag, None)  # pinned anew and unusable here: stop
        wanted = {keys.queue_for_image(tag): tag for tag in self.images.served}
        for queue in sorted(set(wanted) - self.images.consuming):
            if self._control(queue, add=True):
                log.info("images: now serving %s (queue %s)", wanted[queue], queue)
        for queue in sorted(self.images.consuming - set(wanted) - {keys.IDLE_QUEUE}):
            if self._control(queue, add=False):
                log.info("images: no longer serving queue %s", queue)

    def _control(self, queue: str, *, add: bool) -> bool:
        """Start (or stop) consuming ``queue`` on this node; True once the node confirmed."""
        control = self.app.control
        method = control.add_consumer if add else control.cancel_consumer
        try:
            replies = method(queue, destination=[self.node], reply=True, timeout=5) or []
        except Exception as exc:  # kombu/redis errors: tried again next round
            log.warning("images: %s %s failed (%s)", "adding" if add else "cancelling", queue, exc)
            return False
        confirmed = any(self.node in reply for reply in replies)
        if confirmed:
            (self.images.consuming.add if add else self.images.consuming.discard)(queue)
        return confirmed


def _present(client: Any, image: str) -> bool:
    from runner.sandbox.engine import API_ERRORS

    try:
        client.inspect_image(image)
    except API_ERRORS:
        return False
    return True


def _preflight(client: Any, worker: str, images: list[str]) -> None:
    """Every image present and usable with default limits, before any job is taken."""
    from runner.sandbox.base import Limits, SandboxSpec
    from runner.sandbox.docker import DockerSandboxFactory
    from runner.sandbox.engine import image_id

    factory = DockerSandboxFactory(client, worker=worker)
    limits = Limits(memory_bytes=1 << 30, nano_cpus=10**9, pids=256, workspace_bytes=512 << 20)
    for image in images:
        image_id(client, image)  # a missing image is one line before any job is taken
        factory.preflight(
            SandboxSpec(
                image=image,
                limits=limits,
                lifetime_s=60,
                labels={"run": "preflight", "job": "preflight"},
            )
        )
