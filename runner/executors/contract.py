"""What an executor is handed and what it hands back: the prepared run, the batches of
records, and the one way a run is interrupted. ``runner.run.prepare`` makes a
``PreparedRun``; ``runner.executors.local`` and ``runner.distributed.coordinator`` run it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from runner.agents.interface import Agent
from runner.config.loader import LoadedControls
from runner.grading.metrics import Metric
from runner.records import Job, Task, Trial
from runner.store.rundir import RunDir, RunMeta
from runner.suite.load import Suite


@dataclass
class PreparedRun:
    """A run ready to execute: its controls, sealed suite, run directory, the jobs still
    to do, and the agents and metrics they run with."""

    loaded: LoadedControls
    suite: Suite
    run_dir: RunDir
    meta: RunMeta
    jobs: list[Job]
    todo: list[Job]
    tasks: dict[str, Task]
    agents: dict[str, Agent]
    metrics: Mapping[str, Metric]
    metrics_source: bytes | None


class Interrupted(Exception):
    """The run was interrupted; every finished trial is recorded."""


RecordBatch = Callable[[list[Trial], list[Trial]], None]


class Executor(Protocol):
    """Runs jobs and hands back their records as they finish.

    ``record(fresh, duplicates)`` gets each batch; an exception it raises stops
    the run (the executor stops taking jobs and lets it propagate).
    """

    def run(self, prepared: PreparedRun, record: RecordBatch) -> None: ...
