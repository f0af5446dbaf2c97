"""Commands about machines: worker (serve trials from Celery) and gc (remove leftovers)."""

from __future__ import annotations

from dataclasses import replace

from runner.cli import common
from runner.cli import fleet_options as opt
from runner.cli.common import Lines, app, job_key_of, out
from runner.cli.groups import takes_groups
from runner.errors import UsageError


@app.command()
@takes_groups
def worker(
    *,
    broker: common.BrokerFlags,
    job_key_file: common.JobKeyFile = None,
    concurrency: opt.Concurrency = "2",
    pace_max: opt.PaceMax = None,
    queues: opt.Queues = None,
    name: opt.WorkerName = None,
    visibility: common.VisibilityTimeout = 7200,
    pull: opt.RegistryPull = True,
    drain: opt.DrainTimeout = 900.0,
    log_json: opt.LogJson = False,
    metrics_port: opt.MetricsPort = None,
    metrics_addr: opt.MetricsAddr = "127.0.0.1",
    disk_budget: opt.DiskBudget = None,
) -> None:
    """Serve trials from Celery: checks Redis, Docker and the images first, reaps leftovers.

    Without -Q, serves every image runs publish (pulled by digest from the run's
    --registry when missing here) and takes on images published later. Runs only jobs
    signed with its job key (the coordinator's: same file). SIGTERM drains: no new job,
    the trials in flight finish, exit 0.
    """
    from runner.distributed.worker import WorkerOptions
    from runner.sizes import parse_size

    try:
        budget = None if disk_budget is None else parse_size(disk_budget)
    except ValueError as exc:
        raise UsageError(f"--disk-budget: {exc}") from None
    found = broker.find(required=True)
    assert found is not None
    size, ceiling = _pool_size(concurrency, pace_max)
    options = WorkerOptions(
        size, queues, name, visibility, pull, drain, log_json, metrics_port, metrics_addr
    )
    if ceiling is not None:
        options = replace(options, pace_max=ceiling)
    if budget is not None:
        options = replace(options, disk_budget=budget)
    options.serve(found.url, job_key_of(job_key_file), Lines().note)


def _pool_size(concurrency: str, pace_max: int | None) -> tuple[int, int | None]:
    """``-c N`` → (N, None); ``-c auto`` → (1, the ceiling: ``--max`` or the default)."""
    from runner.distributed.pacing_scaler import default_ceiling

    if concurrency.strip().lower() == "auto":
        return 1, pace_max or default_ceiling()
    if not concurrency.strip().isdigit() or int(concurrency) < 1:
        raise UsageError(
            f"-c/--concurrency: {concurrency!r} is neither a whole number of at least 1 nor "
            "auto; give e.g. -c 2, or -c auto --max 4"
        )
    if pace_max is not None:
        raise UsageError(f"--max {pace_max}: it goes with -c auto; drop it or use -c auto")
    return int(concurrency), None


@app.command()
@takes_groups
def gc(
    dry_run: opt.DryRun = False,
    all_: opt.All = False,
    cache: opt.Cache = False,
    *,
    broker: common.BrokerFlags,
    max_age: opt.BlobMaxAge = 168.0,
) -> None:
    """Remove deltarun containers and volumes left past their deadline, and copy-free
    workspace views whose owner is gone.

    With --broker (or --broker-file): instead, remove the run archives (blobs) and
    protocol bundles no live run needs, from Redis and, for runs with --registry, the
    registry's manifests that keep them (its garbage-collect then frees the bytes).
    """
    if broker.named:
        found = broker.find(required=True)
        assert found is not None
        _blob_gc(found.url, dry_run, max_age)
        return
    if cache:
        from runner.trees.cache import CacheDir

        store = CacheDir()
        if dry_run:
            entries = store.entries()
            size = sum(e.size for e in entries)
            out.print(f"would remove {len(entries)} entries ({size} bytes) from {store.root}")
            return
        count, size = store.clear()
        out.print(
            f"removed {count} cache entries ({size} bytes) from {store.root}", highlight=False
        )
        return
    from runner.sandbox.engine import connect
    from runner.sandbox.reaper import reap

    for line in reap(connect(), dry_run=dry_run, include_live=all_):
        out.print(line, highlight=False)


def _blob_gc(url: str, dry_run: bool, max_age_h: float) -> None:
    from runner.distributed import blob_gc
    from runner.distributed.connection import connect_redis
    from runner.distributed.registry_blobs import RegistryBlobs, worker_url

    def drop(registry: str, tag: str) -> bool:
        return RegistryBlobs(worker_url(registry)).drop(tag)

    done = blob_gc.collect(connect_redis(url), drop, max_age_s=max_age_h * 3600, dry_run=dry_run)
    for line in done.lines(dry_run):
        out.print(line, highlight=False)
