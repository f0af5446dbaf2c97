"""The coordinator side: publish the protocol and the jobs, collect records into the ledger.

Celery is the transport, not the ledger: ``trials.jsonl`` keeps the first
record per job id. The coordinator re-enqueues a job a worker started whose
lease expired without a record, and survives its own restart: the stream
cursor is saved in the run directory, and ``--resume`` first collects every
record that arrived while it was away, then enqueues only jobs that are
neither recorded nor leased.

It also publishes the run's images (tag → pinned image ID, and with
``--registry`` the reference to pull it by digest) for workers to serve, and
says, within a minute, when jobs wait in a queue no live worker consumes.

Every job it sends is signed with the job key, and it keeps only records signed
with the same key (``runner.distributed.signing``): whoever can write to Redis
without the key can neither make workers run a job nor put a record in the ledger.
A worker that refuses a job (another key) leaves a notice; the coordinator names
that worker and both key fingerprints, and sends the job again for another worker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from pydantic import ValidationError

from runner import __version__
from runner.agents.installed.layer import LayerPins
from runner.distributed import blob_gc, keys, registry, run_budget
from runner.distributed import protocol_bundle as bundles
from runner.distributed.blobs import BlobStore
from runner.distributed.celery_app import make_app, required_visibility_s
from runner.distributed.connection import connect_redis
from runner.distributed.credentials import redact
from runner.distributed.keys import STOP_TTL_S
from runner.distributed.leases import RedisLeases
from runner.distributed.signing import fingerprint, record_signed, sign_job
from runner.errors import DeltarunError, UserError
from runner.executors.contract import Interrupted, PreparedRun
from runner.records import Job, Trial, task_timeout
from runner.trial.record import error_record
from runner.trial.sandbox_specs import SANDBOX_LIFETIME_MARGIN_S, image_of

log = logging.getLogger("deltarun.coordinator")
CURSOR_FILE = "stream.cursor"
REQUEUE_CHECK_S = float(os.environ.get("DELTARUN_REQUEUE_CHECK_S", "5"))
QUEUE_CHECK_S = float(os.environ.get("DELTARUN_QUEUE_CHECK_S", "30"))
REDIS_OUTAGE_S = 600.0
# Archives a run may keep in Redis memory before the coordinator suggests --registry.
BLOB_WARN_BYTES = 256 << 20


def longest_trial_s(prepared: PreparedRun) -> float:
    controls = prepared.loaded.controls
    longest = max(task_timeout(t, controls.runtime.timeout_s) for t in prepared.suite.tasks)
    return longest + controls.runtime.verify_timeout_s + 2 * SANDBOX_LIFETIME_MARGIN_S


def _read_cursor(path: Path) -> str:
    try:
        return path.read_text().strip() or "0-0"
    except FileNotFoundError:
        return "0-0"


def run_celery(
    prepared: PreparedRun,
    *,
    broker_url: str,
    record: Callable[[list[Trial], list[Trial]], None],
    visibility_timeout_s: int,
    warn: Callable[[str], None],
    job_key: bytes,
    task_name: str = keys.TRIAL_TASK,
    images: Mapping[str, registry.Published] | None = None,
    queue_check_s: float = QUEUE_CHECK_S,
    blob_registry: str | None = None,
    blob_warn_bytes: int = BLOB_WARN_BYTES,
) -> None:
    """Publish every job without a record and collect records until each job has one.

    The run's blobs go to ``blob_registry`` (HOST:PORT) when given, else into Redis, with a
    warning through ``warn`` when they exceed ``blob_warn_bytes``; the run's state is kept
    in Redis for ``deltarun gc --broker`` (``runner.distributed.blob_gc``).

    ``images`` is what workers learn of the run's images (default: each pinned image ID,
    no registry reference); every ``queue_check_s`` while jobs wait, a queue no live
    worker consumes is reported through ``warn``, once until a worker serves it.

    ``record(fresh, duplicates)`` receives each batch read from the stream: the
    first record of a pending job is fresh, any later one a duplicate. The
    cursor is saved only after the batch is recorded, so a crash re-reads, never skips.
    Longer than 60 lines by a run's budget (``budget.run_usd``): a run it ended is finished.
    """
    client = connect_redis(broker_url)
    _check_visibility(prepared, visibility_timeout_s, warn)
    run_id, protocol = prepared.meta.run_id, prepared.meta.protocol_sha256
    publish_inputs(prepared, client, blob_registry, blob_warn_bytes, warn)
    if images is None:
        images = {tag: registry.Published(pin) for tag, pin in prepared.meta.image_digests.items()}
    registry.publish(client, images, job_key, run_id)
    app = make_app(broker_url, visibility_timeout_s)
    coordinator = _Coordinator(
        prepared, client, app, record, warn, task_name, job_key, queue_check_s
    )
    ended = "interrupted"  # its queued jobs may still run: gc keeps its blobs a while
    try:
        coordinator.run()
        ended = "finished"
        _forget(client, run_id, "finished", visibility_timeout_s)
        if coordinator.ended is not None:  # ``record`` said the run's budget is reached
            raise coordinator.ended
    except KeyboardInterrupt:
        raise Interrupted() from None
    except DeltarunError as exc:  # ``record`` stopped the run: workers skip what is queued
        ended = "finished"
        with contextlib.suppress(redis.RedisError):
            _forget(client, run_id, exc.message[:500], STOP_TTL_S)
        raise
    except redis.RedisError as exc:
        raise UserError(
            f"lost Redis at {redact(broker_url)} ({exc}); every record so far is kept: "
            "restart Redis and continue with --resume"
        ) from exc
    finally:
        with contextlib.suppress(redis.RedisError):
            blob_gc.note_run(client, run_id, protocol, ended)


def _forget(client: redis.Redis, run_id: str, why: str, stop_for_s: int) -> None:
    """A finished run's keys go (every record is in the ledger); what stays is a stop flag,
    for ``stop_for_s``, so a late redelivery of one of its jobs is skipped, not run again."""
    pipe = client.pipeline(transaction=True)
    pipe.set(keys.stopped(run_id), why, ex=stop_for_s)
    pipe.delete(*keys.run_keys(run_id))
    pipe.execute()


def _check_visibility(
    prepared: PreparedRun, visibility_timeout_s: int, warn: Callable[[str], None]
) -> None:
    needed = required_visibility_s(longest_trial_s(prepared))
    if needed > visibility_timeout_s:
        warn(
            f"the longest trial needs a visibility timeout of {needed}s, above "
            f"{visibility_timeout_s}s: start workers with --visibility-timeout {needed} "
            "or a trial still running may be delivered twice (it is then skipped, not counted)"
        )


def publish_inputs(
    prepared: PreparedRun,
    client: redis.Redis,
    blob_registry: str | None,
    blob_warn_bytes: int,
    warn: Callable[[str], None],
) -> None:
    """The protocol bundle and its blobs (in ``blob_registry``, else in Redis, with a warning
    past ``blob_warn_bytes``), the run noted first so gc keeps them from then on."""
    protocol = prepared.meta.protocol_sha256
    blob_gc.note_run(client, prepared.meta.run_id, protocol)
    store = BlobStore(client, registry=blob_registry)
    bundles.publish(prepared.loaded, prepared.suite, store)
    in_redis = sum(store.sizes.values()) if blob_registry is None else 0
    if in_redis > blob_warn_bytes:
        warn(
            f"this run keeps {in_redis / 2**20:,.0f} MiB of archives in Redis memory (over "
            f"{blob_warn_bytes / 2**20:,.0f} MiB): pass --registry HOST:PORT to keep them in "
            "the registry, and `deltarun gc --broker` removes those no live run needs"
        )


class _Coordinator:
    """The jobs still pending, the stream cursor, and the three things done with them:
    send jobs, collect records, re-enqueue jobs whose worker stopped renewing its lease."""

    def __init__(
        self,
        prepared: PreparedRun,
        client: redis.Redis,
        app: Celery,
        record: Callable[[list[Trial], list[Trial]], None],
        warn: Callable[[str], None],
        task_name: str,
        job_key: bytes,
        queue_check_s: float = QUEUE_CHECK_S,
    ) -> None:
        self.prepared = prepared
        self.client = client
        self.app = app
        self.record = record
        self.warn = warn
        self.task_name = task_name
        self.job_key = job_key
        self.leases = RedisLeases(client, prepared.meta.run_id, job_key)
        self.layers = LayerPins(prepared.loaded.controls, prepared.meta.image_digests)
        self.cursor_path = prepared.run_dir.path / CURSOR_FILE
        self.cursor = _read_cursor(self.cursor_path)
        self.pending: dict[str, Job] = {job.job_id: job for job in prepared.todo}
        self.queue_check_s = queue_check_s
        self.unserved: set[str] = set()  # queues reported as waiting for a worker
        self.refusers: set[tuple[str, str]] = set()  # (worker, key fingerprint) reported
        self.unsigned = 0  # stream entries ignored for want of this run's signature
        # The run's dollar budget; the stop flag is lifted (a resumed run starts its workers
        # again) unless its account is spent (runner.distributed.run_budget).
        self.run_usd = run_budget.open_for(prepared, client)
        self.ended: Exception | None = None  # ``record``'s once the budget was spent

    def run(self) -> None:
        while self.collect(block_ms=None):  # records that arrived while this coordinator was away
            pass
        for chunk in self.chunks():
            busy = self.leases.leased_or_done(chunk)
            self.send([self.pending[job_id] for job_id in chunk if job_id not in busy])
        last_check = last_queue_check = time.monotonic()
        outage_since: float | None = None
        while self.pending:
            try:
                self.collect(block_ms=1000)
                if self.budget_ended():
                    break
                if time.monotonic() - last_check >= REQUEUE_CHECK_S:
                    last_check = time.monotonic()
                    self.requeue_stalled()
                if self.pending and time.monotonic() - last_queue_check >= self.queue_check_s:
                    self.check_refusals()
                    self.check_queues()
                    meta = self.prepared.meta  # still running: gc keeps its blobs
                    blob_gc.note_run(self.client, meta.run_id, meta.protocol_sha256)
                    last_queue_check = time.monotonic()
                outage_since = None
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                # Redis restarting: records, leases and queues survive in its append-only file.
                now = time.monotonic()
                if outage_since is None:
                    outage_since = now
                    self.warn(f"Redis unavailable ({exc}); waiting for it to come back")
                if now - outage_since > REDIS_OUTAGE_S:
                    raise
                time.sleep(1.0)

    def collect(self, block_ms: int | None) -> int:
        """Record the next batch from the stream; how many entries it had."""
        entries = self.leases.read(self.cursor, block_ms=block_ms)
        fresh: list[Trial] = []
        duplicates: list[Trial] = []
        for entry_id, raw, signature in entries:
            trial = self._parse(entry_id, raw, signature)
            if trial is None:
                continue
            if self.pending.pop(trial.job_id, None) is not None:
                fresh.append(trial)
            else:
                duplicates.append(trial)
        if fresh or duplicates:
            try:
                self.record(fresh, duplicates)
            except Exception as exc:  # the budget's end waits for the trials in flight
                spent = self.run_usd and run_budget.reached(self.client, self.prepared.meta.run_id)
                if isinstance(exc, DeltarunError | OSError | redis.RedisError) or not spent:
                    raise
                self.ended = self.ended or exc
        if entries:
            self.cursor = entries[-1][0]
            tmp = self.cursor_path.with_suffix(".tmp")
            tmp.write_text(self.cursor + "\n")
            tmp.replace(self.cursor_path)
        return len(entries)

    def budget_ended(self) -> bool:
        """The budget is spent, no pending job in flight (run_budget.end_line): the run ends."""
        busy = lambda: any(self.leases.leased_or_done(c) for c in self.chunks())  # noqa: E731
        line = self.run_usd and run_budget.end_line(self.client, self.prepared.meta.run_id, busy)
        if line:
            self.warn(line)
        return bool(line)

    def _parse(self, entry_id: str, raw: str, signature: str | None) -> Trial | None:
        meta = self.prepared.meta
        if not record_signed(self.job_key, raw, signature):
            self.unsigned += 1
            if self.unsigned == 1:  # said once; each one is ignored, its job stays pending
                self.warn(
                    f"stream {keys.records(meta.run_id)} entry {entry_id}: a record not signed "
                    f"with this run's job key ({fingerprint(self.job_key)}) is ignored; "
                    "something other than this run's workers writes to Redis"
                )
            return None
        try:
            trial = Trial.model_validate_json(raw)
        except ValidationError as exc:
            stand_in = self._unreadable(raw, exc)
            if stand_in is None:
                self.warn(
                    f"stream {keys.records(meta.run_id)} entry {entry_id}: not a trial record"
                )
            return stand_in
        if trial.protocol_sha256 != meta.protocol_sha256:
            self.warn(f"record of job {trial.job_id[:12]} belongs to another protocol; ignored")
            return None
        if trial.run_id != meta.run_id:  # job ids repeat across runs of one protocol
            self.warn(f"record of job {trial.job_id[:12]} belongs to run {trial.run_id}; ignored")
            return None
        return trial

    def _unreadable(self, raw: str, exc: ValidationError) -> Trial | None:
        """A record a worker wrote but this coordinator cannot read: an error record for
        its job (when it names a pending one), so the run neither waits forever nor counts
        the job as anything but deltarun's failure."""
        try:
            job_id = json.loads(raw).get("job_id")
        except (ValueError, AttributeError):
            return None
        job = self.pending.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            return None
        now = datetime.now(UTC)
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return error_record(
            job,
            self.prepared.tasks[job.task_id],
            "coordinator",
            f"the worker's record is unreadable ({where}: {first['msg']})",
            now,
            0.0,
            now,
        )

    def send(self, jobs: list[Job]) -> None:
        controls = self.prepared.loaded.controls
        runtime = controls.runtime.oci_runtime  # runsc: only workers whose engine has it
        with self.app.producer_or_acquire() as producer:
            for job in jobs:
                image = image_of(self.prepared.tasks[job.task_id], controls)
                message = {"job": job.model_dump(mode="json"), **self.layers.images(job.arm, image)}
                message["sig"] = sign_job(self.job_key, message)
                self.app.send_task(
                    self.task_name,
                    args=[message],
                    queue=keys.queue_for_image(image, runtime),
                    task_id=f"{job.job_id[:32]}-{uuid.uuid4().hex[:8]}",
                    producer=producer,
                    argsrepr=job.job_id[:12],  # not a repr of the whole payload per message
                )

    def chunks(self) -> Iterator[list[str]]:
        """Pending job ids, 1000 at a time, without copying the whole set."""
        it = iter(self.pending)
        while chunk := list(islice(it, 1000)):
            yield chunk

    def check_queues(self) -> None:
        """Warn about each queue whose jobs wait while no live worker consumes it, naming its
        image and the workers seen with their queues; once, until a worker serves it."""
        controls = self.prepared.loaded.controls
        waiting: Counter[str] = Counter()
        for job in self.pending.values():
            waiting[image_of(self.prepared.tasks[job.task_id], controls)] += 1
        try:
            seen = self.app.control.inspect(timeout=1.0).active_queues() or {}
        except Exception as exc:  # kombu/redis: the next round asks again
            log.info("inspect active_queues failed: %s", exc)
            return
        consumed = {queue["name"] for queues in seen.values() for queue in queues or []}
        runtime = controls.runtime.oci_runtime
        for image, count in sorted(waiting.items()):
            queue = keys.queue_for_image(image, runtime)
            if queue in consumed:
                self.unserved.discard(queue)
            elif queue not in self.unserved:
                self.unserved.add(queue)
                self.warn(
                    f"{count} job(s) wait in queue {queue} (image {image}) and no live worker "
                    f"consumes it; workers seen: {_workers_seen(seen)}; start a worker that has "
                    "the image (or one without -Q, which pulls what --registry published)"
                    + (
                        f" on an engine with the OCI runtime {runtime} (`make gvisor`)"
                        if queue != keys.queue_for_image(image)
                        else ""
                    )
                )

    def check_refusals(self) -> None:
        """Name each worker that refused this run's jobs (once per worker and key) and send
        the refused jobs still pending again, for a worker that holds this run's key."""
        name = keys.refused(self.prepared.meta.run_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.lrange(name, 0, -1)
        pipe.delete(name)
        raw_notices, _ = pipe.execute()
        again: dict[str, Job] = {}
        for raw in raw_notices:
            try:
                notice = json.loads(raw)
                worker, key, job_id = str(notice["worker"]), str(notice["key"]), notice["job_id"]
            except (ValueError, KeyError, TypeError):
                continue
            if (worker, key) not in self.refusers:
                self.refusers.add((worker, key))
                self.warn(_refusal_line(worker, key, notice, fingerprint(self.job_key)))
            if isinstance(job_id, str) and job_id in self.pending:
                again[job_id] = self.pending[job_id]
        if again:
            busy = self.leases.leased_or_done(list(again))
            self.send([job for job_id, job in again.items() if job_id not in busy])

    def requeue_stalled(self) -> None:
        stalled: list[str] = []
        for chunk in self.chunks():
            stalled += self.leases.stalled(chunk)
        if stalled:
            self.leases.forget_start(stalled)
            self.warn(f"re-enqueued {len(stalled)} job(s) whose worker stopped renewing its lease")
            self.send([self.pending[job_id] for job_id in stalled])


def _refusal_line(worker: str, key: str, notice: Mapping[str, Any], ours: str) -> str:
    """The coordinator's line for a worker's refusal notice: what to fix, on which worker."""
    reason = str(notice.get("reason", "?"))[:160]
    if notice.get("kind") == keys.VERSION_REFUSAL:
        return (
            f"worker {worker[:80]} cannot read this run's jobs ({reason}); this coordinator "
            f"runs deltarun {__version__}: install the same deltarun on that worker (or "
            "rebuild its image) and restart it"
        )
    return (
        f"worker {worker[:80]} (job key {key[:12]}) refused jobs of this run ({reason[:80]}); "
        f"this run signs with job key {ours}: copy this coordinator's job key file to that "
        "worker (--job-key-file or ~/.config/deltarun/job.key) and restart it"
    )


def _workers_seen(seen: Mapping[str, list[dict[str, object]] | None]) -> str:
    """``node (queue, queue); node (...)``, or ``none``: what ``inspect active_queues`` saw."""
    if not seen:
        return "none"
    parts = []
    for node, queues in sorted(seen.items()):
        names = sorted(str(q["name"]) for q in queues or [] if q.get("name") != keys.IDLE_QUEUE)
        parts.append(f"{node} ({', '.join(names) or 'no image yet'})")
    return "; ".join(parts)


class CeleryExecutor:
    """The ``Executor`` of many machines: jobs go to ``deltarun worker`` processes through
    Celery on Redis; records stream back and are collected here."""

    def __init__(
        self,
        broker_url: str,
        visibility_timeout_s: int,
        warn: Callable[[str], None],
        images: Mapping[str, registry.Published] | None = None,
        queue_check_s: float = QUEUE_CHECK_S,
        *,
        job_key: bytes,
        task_name: str = keys.TRIAL_TASK,
        blob_registry: str | None = None,
        blob_warn_bytes: int = BLOB_WARN_BYTES,
    ) -> None:
        self.blob_registry = blob_registry  # the run's blobs go there, not into Redis
        self.blob_warn_bytes = blob_warn_bytes
        self.broker_url = broker_url
        self.job_key = job_key
        self.task_name = task_name  # the workers' trial task; a benchmark names its own
        self.visibility_timeout_s = visibility_timeout_s
        self.warn = warn
        self.images = images
        self.queue_check_s = queue_check_s

    def run(
        self, prepared: PreparedRun, record: Callable[[list[Trial], list[Trial]], None]
    ) -> None:
        run_celery(
            prepared,
            broker_url=self.broker_url,
            record=record,
            visibility_timeout_s=self.visibility_timeout_s,
            warn=self.warn,
            images=self.images,
            queue_check_s=self.queue_check_s,
            job_key=self.job_key,
            task_name=self.task_name,
            blob_registry=self.blob_registry,
            blob_warn_bytes=self.blob_warn_bytes,
        )
