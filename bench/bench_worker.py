"""BENCH ONLY: a deltarun worker that also serves a trial body without Docker.

``bench/dispatch.py`` measures deltarun's dispatch path (protocol and blobs in
Redis, leases, the done set, the record stream, the coordinator's ledger)
without the cost of sandboxes. It starts this worker, which is the production
``serve`` with one more task registered: ``BENCH_TASK`` runs
``bench_trial_without_docker`` instead of ``execute_trial``. Nothing here ships
in the package.

    python bench/bench_worker.py [--broker redis://127.0.0.1:6379/0] [-c 2] [--name b1]

Without ``--broker`` the broker comes from the environment as for ``deltarun worker``:
``$DELTARUN_BROKER_URL`` with ``$DELTARUN_BROKER_CA``/``_CERT``/``_KEY`` for TLS, which
keeps a password off the command line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.agents.interface import Agent  # noqa: E402
from runner.distributed.credentials import (  # noqa: E402
    BrokerOptions,
    load_job_key,
    resolve_broker,
)
from runner.distributed.trial_task import register  # noqa: E402
from runner.distributed.worker import serve  # noqa: E402
from runner.records import Job, Outcome, Task, Trial  # noqa: E402
from runner.trial.env import TrialEnv  # noqa: E402
from runner.trial.record import bare_record  # noqa: E402
from tests.helpers import PY_IMAGE  # noqa: E402

BENCH_TASK = "deltarun.bench_trial_without_docker"


class NoSandboxes:
    """The bench body opens no sandbox; anything that tries is a bug."""

    def open(self, spec: Any) -> Any:
        raise RuntimeError("the bench-only trial body must not open a sandbox")


def bench_trial_without_docker(job: Job, task: Task, agent: Agent, env: TrialEnv) -> Trial:
    """A trial body that does no Docker work: a miss, recorded and published as usual."""
    now = env.clock()
    return bare_record(job, task.kind, Outcome.MISS, env.worker, now, now)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", default=None, help="default: $DELTARUN_BROKER_URL")
    parser.add_argument("-c", "--concurrency", type=int, default=2)
    parser.add_argument("--name", default=None)
    args = parser.parse_args()
    broker = resolve_broker(BrokerOptions(url=args.broker), os.environ)
    if broker is None:
        parser.error("no broker: give --broker URL or set $DELTARUN_BROKER_URL")
    for warning in broker.warnings:
        print(f"bench worker: warning: {warning}", file=sys.stderr)
    serve(
        broker.url,
        concurrency=args.concurrency,
        images=[PY_IMAGE],
        name=args.name,
        extra=lambda app, state: register(
            app, state, BENCH_TASK, bench_trial_without_docker, NoSandboxes()
        ),
        job_key=load_job_key(None, os.environ).key,
    )


if __name__ == "__main__":
    main()
