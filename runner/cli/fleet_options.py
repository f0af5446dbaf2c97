"""The options only ``deltarun worker`` or ``deltarun gc`` takes (``runner.cli.fleet``), one
alias each, so that each command's signature reads as the list of what it takes; the ones
they share with other commands (the broker's, the job key, --visibility-timeout) are in
``runner.cli.common``."""

from __future__ import annotations

from typing import Annotated

import typer

Concurrency = Annotated[
    str,
    typer.Option(
        "-c",
        "--concurrency",
        help="Trials at once, or auto: start at one and raise while the engine keeps up "
        "(container starts, exec failures, memory, disk), lower when it does not",
    ),
]
PaceMax = Annotated[
    int | None,
    typer.Option(
        "--max",
        min=1,
        help="With -c auto: the most trials at once (default: twice the CPUs, 2 to 16)",
    ),
]
Queues = Annotated[
    str | None,
    typer.Option(
        "-Q",
        "--queues",
        help="Comma-separated sandbox images this worker serves (default: every image "
        "runs publish, and deltarun/sandbox-python:bookworm when present)",
    ),
]
WorkerName = Annotated[
    str | None,
    typer.Option("--name", help="Worker name (default: $DELTARUN_WORKER_NAME or host)"),
]
RegistryPull = Annotated[
    bool,
    typer.Option(
        "--registry-pull/--no-registry-pull",
        help="Pull a missing image by the digest the run published (kept only with the "
        "pinned image ID)",
    ),
]
DrainTimeout = Annotated[
    float,
    typer.Option(
        "--drain-timeout",
        min=0,
        help="On SIGTERM, seconds the trials in flight may take to finish before their "
        "jobs are handed back (a second SIGTERM hands them back at once)",
    ),
]
LogJson = Annotated[
    bool, typer.Option("--log-json", help="One JSON object per log line (trial events)")
]
MetricsPort = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=1,
        max=65535,
        help="Serve Prometheus metrics of this worker on http://ADDR:PORT/metrics (default: off)",
    ),
]
DiskBudget = Annotated[
    str | None,
    typer.Option(
        "--disk-budget",
        help="Keep the images this worker pulls and its cache (blobs, git, trees) within "
        "this size (e.g. 50g), evicting the least recently used that no live run needs; "
        "pulls only live runs' images, before their first job (default: no budget)",
    ),
]
MetricsAddr = Annotated[
    str,
    typer.Option(
        "--metrics-addr",
        help="Address --metrics-port listens on; 0.0.0.0 exposes the metrics to the network",
    ),
]

DryRun = Annotated[bool, typer.Option("--dry-run", help="List, remove nothing")]
All = Annotated[bool, typer.Option("--all", help="Also those before their deadline")]
Cache = Annotated[
    bool,
    typer.Option(
        "--cache", help="Instead: empty this machine's cache ($DELTARUN_CACHE: blobs, git)"
    ),
]
BlobMaxAge = Annotated[
    float,
    typer.Option(
        "--max-age",
        min=0,
        help="With --broker: hours a run that did not finish (interrupted, or its "
        "coordinator gone) keeps its archives",
    ),
]
