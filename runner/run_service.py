"""One run, whoever executes it: recording, duplicates, the stop rule, the trial environment.

The path of a run: ``prepare`` checks everything and plans the jobs; an
``Executor`` (``executors.local`` here, ``executors.celery`` on workers) runs the
jobs still to do and hands back each batch of records; ``Recording`` appends the
first record of each job to the run directory (later ones are kept aside as
duplicates, never counted), applies the stop rule and reports progress; then the
report is written. The CLI only parses arguments and draws the progress.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from runner.cache import CacheDir
from runner.config.model import Controls
from runner.errors import RouteMismatch
from runner.inputs import LocalInputs
from runner.metrics import Metric
from runner.models import Job, Trial
from runner.prepare import PreparedRun
from runner.sandbox.base import SandboxFactory
from runner.staging import Staging
from runner.trial import TrialEnv, TrialInputs, execute_trial

RecordBatch = Callable[[list[Trial], list[Trial]], None]


class Executor(Protocol):
    """Runs jobs and hands back their records as they finish.

    ``record(fresh, duplicates)`` gets each batch; an exception it raises stops
    the run (the executor stops taking jobs and lets it propagate).
    """

    def run(self, prepared: PreparedRun, record: RecordBatch) -> None: ...


def stop_reason(trial: Trial, controls: Controls) -> str | None:
    """Why this record stops the whole run, or None: in the scored channel, a reply from
    another model than the route pins (the route lock) stops the run."""
    if trial.route_mismatch and controls.channel == "scored":
        return f"{trial.arm} on {trial.task_id}: {trial.error}"
    return None


def trial_env(
    controls: Controls,
    inputs: TrialInputs,
    sandboxes: SandboxFactory,
    worker: str,
    metrics: Mapping[str, Metric] | None = None,
    pins: Mapping[str, str] | None = None,
) -> TrialEnv:
    """The environment every executor (and ``replay --reverify``) runs trials in: fixtures
    are staged once per machine in the cache (``runner.staging``); ``pins`` (image tag → ID)
    makes every sandbox from the run's pinned image."""
    staging = Staging(CacheDir())
    pinned = dict(pins or {})
    if metrics is None:
        return TrialEnv(controls, inputs, sandboxes, worker, staging=staging, pins=pinned)
    return TrialEnv(
        controls, inputs, sandboxes, worker, metrics=metrics, staging=staging, pins=pinned
    )


def local_runner(
    prepared: PreparedRun, sandboxes: SandboxFactory, worker: str
) -> Callable[[Job], Trial]:
    """``execute_trial`` for the jobs of a prepared run, on this machine."""
    env = trial_env(
        prepared.loaded.controls,
        LocalInputs(prepared.suite, prepared.loaded.controls.runtime.archive_caps),
        sandboxes,
        worker,
        prepared.metrics,
        prepared.meta.image_digests,
    )

    def run_one(job: Job) -> Trial:
        return execute_trial(job, prepared.tasks[job.task_id], prepared.agents[job.arm], env)

    return run_one


@dataclass
class Recording:
    """Records each batch into the run directory; counts passes per arm; stops a scored run
    at a route mismatch (the record is kept). ``on_trial`` sees every counted record."""

    prepared: PreparedRun
    on_trial: Callable[[Trial], None] = lambda trial: None
    finished: Counter[str] = field(default_factory=Counter)
    passes: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        for trial in self.prepared.run_dir.scored_trials():
            self.finished[trial.arm] += 1
            self.passes[trial.arm] += int(trial.passed)

    @property
    def recorded(self) -> int:
        return sum(self.finished.values())

    def batch(self, fresh: list[Trial], duplicates: list[Trial]) -> None:
        """Append a batch, fsync'd: ``fresh`` records are the first of their job (the
        executor knows: the local pool runs each job once, the Celery coordinator keeps the
        set of pending jobs); ``duplicates`` are kept aside for audit, never counted."""
        self.prepared.run_dir.write_records(fresh, duplicates)
        for trial in fresh:
            self._count(trial)

    def _count(self, trial: Trial) -> None:
        reason = stop_reason(trial, self.prepared.loaded.controls)
        if reason is not None:
            raise RouteMismatch(
                f"{reason}; a scored run stops at a reply from another model than the route "
                f"pins (the record is kept in {self.prepared.run_dir.ledger_path})"
            )
        self.finished[trial.arm] += 1
        self.passes[trial.arm] += int(trial.passed)
        self.on_trial(trial)


def describe(arms: Sequence[str], recording: Recording) -> str:
    """Passes per arm so far: ``ctrl 3/12 · cand 7/12``."""
    return " · ".join(f"{arm} {recording.passes[arm]}/{recording.finished[arm]}" for arm in arms)
