"""The environment every executor (local pool, Celery worker, ``replay --reverify``) runs
trials in, and which records stop a whole run."""

from __future__ import annotations

from collections.abc import Mapping

from runner.config.controls import Controls
from runner.grading.metrics import Metric
from runner.records import Trial
from runner.sandbox.base import SandboxFactory
from runner.trees.cache import CacheDir
from runner.trees.staging import Staging
from runner.trial.execute import TrialEnv, TrialInputs


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
