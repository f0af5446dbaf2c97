"""Commands about machines: worker (serve trials from Celery) and gc (remove leftovers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from runner.cli.common import (
    BrokerCa,
    BrokerCert,
    BrokerFile,
    BrokerKey,
    BrokerUrl,
    JobKeyFile,
    app,
    broker_of,
    err,
    job_key_of,
    out,
)

if TYPE_CHECKING:
    pass


@app.command()
def worker(
    broker: BrokerUrl = None,
    broker_file: BrokerFile = None,
    broker_ca: BrokerCa = None,
    broker_cert: BrokerCert = None,
    broker_key: BrokerKey = None,
    job_key_file: JobKeyFile = None,
    concurrency: Annotated[int, typer.Option("-c", "--concurrency", min=1)] = 2,
    queues: Annotated[
        str | None,
        typer.Option(
            "-Q",
            "--queues",
            help="Comma-separated sandbox images this worker serves (default: every image "
            "runs publish, and deltarun/sandbox-python:bookworm when present)",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Worker name (default: $DELTARUN_WORKER_NAME or host)"),
    ] = None,
    visibility_timeout: Annotated[
        int, typer.Option("--visibility-timeout", help="Seconds before Redis redelivers")
    ] = 7200,
    registry_pull: Annotated[
        bool,
        typer.Option(
            "--registry-pull/--no-registry-pull",
            help="Pull a missing image by the digest the run published (kept only with the "
            "pinned image ID)",
        ),
    ] = True,
    drain_timeout: Annotated[
        float,
        typer.Option(
            "--drain-timeout",
            min=0,
            help="On SIGTERM, seconds the trials in flight may take to finish before their "
            "jobs are handed back (a second SIGTERM hands them back at once)",
        ),
    ] = 900.0,
    log_json: Annotated[
        bool, typer.Option("--log-json", help="One JSON object per log line (trial events)")
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=1,
            max=65535,
            help="Serve Prometheus metrics of this worker on http://ADDR:PORT/metrics "
            "(default: off)",
        ),
    ] = None,
    metrics_addr: Annotated[
        str,
        typer.Option(
            "--metrics-addr",
            help="Address --metrics-port listens on; 0.0.0.0 exposes the metrics to the network",
        ),
    ] = "127.0.0.1",
) -> None:
    """Serve trials from Celery: checks Redis, Docker and the images first, reaps leftovers.

    Without -Q, serves every image runs publish (pulled by digest from the run's
    --registry when missing here) and takes on images published later. Runs only jobs
    signed with its job key (the coordinator's: same file). SIGTERM drains: no new job,
    the trials in flight finish, exit 0.
    """
    from runner.distributed.worker import serve

    found = broker_of(broker, broker_file, broker_ca, broker_cert, broker_key, required=True)
    assert found is not None
    serve(
        found.url,
        concurrency=concurrency,
        images=None if queues is None else [q.strip() for q in queues.split(",") if q.strip()],
        name=name,
        visibility_timeout_s=visibility_timeout,
        say=lambda line: err.print(line, highlight=False, markup=False),
        pull=registry_pull,
        drain_timeout_s=drain_timeout,
        log_json=log_json,
        job_key=job_key_of(job_key_file),
        metrics_port=metrics_port,
        metrics_addr=metrics_addr,
    )


@app.command()
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List, remove nothing")] = False,
    all_: Annotated[bool, typer.Option("--all", help="Also those before their deadline")] = False,
    cache: Annotated[
        bool,
        typer.Option(
            "--cache", help="Instead: empty this machine's cache ($DELTARUN_CACHE: blobs, git)"
        ),
    ] = False,
) -> None:
    """Remove deltarun containers and volumes left past their deadline."""
    if cache:
        from runner.fixtures.cache import CacheDir

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
