"""A worker's start-up checks, before it takes a job: each problem is one line and an exit.

In order: the metrics port (when asked for), Redis, Docker, every image the worker
will serve (an image ``-Q`` names must be usable; one merely published is logged and
skipped), then the sandboxes a crashed worker of this name, or any owner gone from
this host, left behind. Logging is set up last, once the checks have passed.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from celery.signals import worker_process_shutdown

from runner import telemetry
from runner.distributed import registry
from runner.distributed.connection import connect_redis
from runner.distributed.disk_budget import shown
from runner.distributed.disk_budget_keeper import Keeper
from runner.distributed.served_images import ServedImages
from runner.distributed.worker_state import worker_name
from runner.errors import UsageError
from runner.sandbox.engine import engine_runtimes


@dataclass
class Started:
    """What the checks leave the serve loop: the worker's name, its Redis and Docker
    clients, and the images it serves from the start."""

    name: str
    redis: redis.Redis
    docker: Any
    served: ServedImages


def start_up(
    broker: str,
    *,
    images: list[str] | None,
    name: str | None,
    pull: bool,
    job_key: bytes,
    say: Callable[[str], None],
    log_json: bool,
    metrics_port: int | None,
    metrics_addr: str,
    disk_budget: int | None = None,
) -> Started:
    """Run the checks in the module docstring's order; raise (one line) on the first problem."""
    from runner.sandbox.engine import connect

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
    served = ServedImages(
        client, me, only=images, pull=pull, say=say, runtimes=engine_runtimes(client)
    )
    if disk_budget is not None:  # only live runs' images are pulled, from the start
        served.keeper = Keeper(disk_budget, me)
        served.keeper.refresh(client_redis, time.time())
        say(
            f"disk budget {shown(disk_budget)} for the images this worker pulls and its "
            f"cache {served.keeper.cache.root}"
        )
    served.start(registry.published(client_redis, job_key))
    reap_leftovers(client, me, say)
    _set_up_logging(log_json)
    return Started(me, client_redis, client, served)


def reap_leftovers(client: Any, me: str, say: Callable[[str], None]) -> None:
    """Remove what a crashed worker of this name left, and the sandboxes of any owner
    gone from this host."""
    from runner.sandbox.reaper import reap, reap_orphans

    for line in reap_orphans(client, me):
        say(f"reaper: {line}")
    for line in reap(client, dry_run=False, past_deadline=False):  # owners gone on this host
        if line != "nothing to remove":
            say(f"reaper: {line}")


def _set_up_logging(log_json: bool) -> None:
    """Warnings from everything, information from deltarun; one JSON object a line with
    ``log_json``."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("deltarun").setLevel(logging.INFO)
    if log_json:
        from runner.distributed.logjson import use_json_logs

        use_json_logs()
