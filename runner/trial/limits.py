"""The record's ``limits``: what one trial ran under, as the worker that ran it applied it.

Every arm of a comparison must run each task under the control's limits; the
checklist's "same limits" row compares these per task (``runner.report.checklist``).
They are taken where they take effect, not copied from the controls:

- the sandbox's resources, workspace size, runtime, network and read-only root as the
  sandbox reports them for the agent's sandbox (``Sandbox.applied``,
  ``runner.sandbox.applied``: the engine's own account of the container);
- the timeouts the worker gave this task's phases (a task's own ``timeout_s``
  included), the tool allowlist and forbidden paths, the repeats;
- for an arm a model drives (``Controls.model_route``), what the model is asked under:
  temperature, output tokens, request timeout, attempts, seed, turns and the trial's
  token and dollar budgets (``model``; None for the other arms).

Pure: the caller hands in what the sandbox reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.config.controls import Controls
from runner.records import Task, task_timeout


def model_settings(controls: Controls, arm: str) -> dict[str, Any] | None:
    """What the model of a model-driven arm (a planned leg name) is asked under."""
    leg = next((leg for leg in controls.legs() if leg.name == arm), None)
    route = None if leg is None else controls.model_route(leg.arm.agent)
    if leg is None or route is None:
        return None
    budget = controls.budget
    return {
        "temperature": route.temperature,
        "max_output_tokens": route.max_output_tokens,
        "request_timeout_s": route.request_timeout_s,
        "max_attempts": route.max_attempts,
        "seed": route.seed,
        "max_turns": getattr(leg.arm.agent, "max_turns", None),
        "trial_tokens": budget.trial_tokens if budget else None,
        "trial_usd": budget.trial_usd if budget else None,
    }


def trial_limits(
    controls: Controls,
    arm: str,
    task: Task,
    applied: Mapping[str, object],
) -> dict[str, Any]:
    """The ``limits`` of a record: ``applied`` (the sandbox's report on the agent's sandbox)
    and what the worker set for the trial."""
    runtime, tools = controls.runtime, controls.tools
    return {
        **applied,
        "timeout_s": task_timeout(task, runtime.timeout_s),
        "verify_timeout_s": runtime.verify_timeout_s,
        "tools": sorted(tools.allowlist),
        "forbidden_paths": sorted(tools.forbidden_paths),
        "repeats": runtime.repeats,
        "model": model_settings(controls, arm),
    }
