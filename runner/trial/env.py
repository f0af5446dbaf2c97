"""The environment every executor (local pool, Celery worker, ``replay --reverify``) runs
trials in, and which records stop a whole run."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Protocol

from runner.config.controls import Controls
from runner.grading.metrics import BUILTIN, Metric
from runner.grading.runners import harness_paths
from runner.records import RepoTask, Task, Trial
from runner.sandbox.base import SandboxFactory
from runner.trees.archives import Member
from runner.trees.cache import CacheDir
from runner.trees.staging import StagedFixture, Staging, fixture_key


class TrialInputs(Protocol):
    """Where a worker gets the checked archives of a task (local files or a remote cache)."""

    def fixture(self, task: RepoTask) -> list[Member]: ...

    def hidden(self, task: RepoTask) -> list[Member]: ...


@dataclass(frozen=True)
class TrialEnv:
    """Everything ``execute_trial`` needs besides the job itself."""

    controls: Controls
    inputs: TrialInputs
    sandboxes: SandboxFactory
    worker: str
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    metrics: Mapping[str, Metric] = field(default_factory=lambda: dict(BUILTIN))
    # Fixture tars and baselines made once per machine; None builds them per trial.
    staging: Staging | None = None
    # Image tag → the ID the run pins: every sandbox is made from that ID (a moved tag, or
    # an image a worker was told to pull, never decides what a trial runs in).
    pins: Mapping[str, str] = field(default_factory=dict)

    def fixture(self, task: Task) -> StagedFixture:
        """A task's fixture for one trial, read only when a staged entry must be made
        (``runner.trees.staging``); an answer task has none."""
        caps = self.controls.runtime.archive_caps
        if not isinstance(task, RepoTask):
            return StagedFixture(None, lambda: [], None, caps)
        load = partial(self.inputs.fixture, task)
        return StagedFixture(fixture_key(task), load, self.staging, caps, harness_paths(task))


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
    are staged once per machine in the cache (``runner.trees.staging``); ``pins``
    (image tag → ID) makes every sandbox from the run's pinned image."""
    staging = Staging(CacheDir())
    pinned = dict(pins or {})
    if metrics is None:
        return TrialEnv(controls, inputs, sandboxes, worker, staging=staging, pins=pinned)
    return TrialEnv(
        controls, inputs, sandboxes, worker, metrics=metrics, staging=staging, pins=pinned
    )
