"""The checklist's "same limits" row: every arm ran each task under the control's limits.

A record carries what its trial ran under (``limits``: ``runner.trial.limits``, as the
worker applied it and the engine reported it) and the image ID it ran on. Per task,
each arm's records are compared with the control's records of that task:

- ``SANDBOX_FIELDS`` for every arm: timeouts, resources, OCI runtime, read-only root,
  workspace size, tool allowlist, forbidden paths, repeats; and the image ID, except for
  an installed agent, whose layer is an image of its own (the run pins each layer);
- ``MODEL_FIELDS`` among the arms a model drives, against the control when a model drives
  it, else against the first such arm: the network (model-only), and the temperature,
  output tokens, request timeout, attempts, seed, turns and budgets the model was asked
  under (a scripted control has none of them to compare).

A difference fails the row naming the arm, the task and the field. Records without
``limits`` (written before the field, or errors before any sandbox) compare their image
only; a run none of whose records has limits keeps the row's older wording. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runner.config.controls import Controls
from runner.records import Outcome, Record

ITEM = "control arm present and run under the same limits"
SANDBOX_FIELDS = (
    "timeout_s", "verify_timeout_s", "memory_bytes", "nano_cpus", "pids", "nofile",
    "workspace_bytes", "oci_runtime", "read_only", "tools", "forbidden_paths", "repeats",
)  # fmt: skip
# Under the record's ``limits.model``; MODEL_FIELDS adds the sandbox's network to them.
MODEL_SETTINGS = (
    "temperature", "max_output_tokens", "request_timeout_s", "max_attempts", "seed",
    "max_turns", "trial_tokens", "trial_usd",
)  # fmt: skip
MODEL_FIELDS = ("network", *MODEL_SETTINGS)


def _shown(values: set[str]) -> str:
    return ", ".join(sorted(values))


def _field_values(records: Sequence[Record], name: str) -> set[str]:
    """What the records say of one field (model fields under ``model``), as text."""
    found = set()
    for record in records:
        limits = record.limits or {}
        value: Any
        if name == "image":
            value = record.image_digest.removeprefix("sha256:")[:12] or None
        elif name in MODEL_SETTINGS:
            value = (limits.get("model") or {}).get(name)
        else:
            value = limits.get(name)
        if value is not None:
            found.add(value if isinstance(value, str) else repr(value))
    return found


def _differences(
    task: str, arm: str, mine: Sequence[Record], other: str, theirs: Sequence[Record],
    fields: Sequence[str],
) -> list[str]:  # fmt: skip
    out = []
    for name in fields:
        a, b = _field_values(mine, name), _field_values(theirs, name)
        if a and b and a != b:
            out.append(f"{arm} on {task}: {name} {_shown(a)}, {other} {_shown(b)}")
    return out


def _model_driven(records: Sequence[Record]) -> bool:
    return any((r.limits or {}).get("model") is not None for r in records)


def same_limits_differences(controls: Controls, trials: Sequence[Record]) -> list[str]:
    """Every difference, as "<arm> on <task>: <field> <values>, the reference's <values>"."""
    control = controls.control_arm
    layered = {leg.name for leg in controls.legs() if leg.arm.agent.type == "installed"}
    order = {leg.name: i for i, leg in enumerate(controls.legs())}
    by_task: dict[str, dict[str, list[Record]]] = {}
    for t in trials:
        if t.outcome is not Outcome.ERROR:
            by_task.setdefault(t.task_id, {}).setdefault(t.arm, []).append(t)
    differ: list[str] = []
    for task, by_arm in sorted(by_task.items()):
        reference = by_arm.get(control, [])
        driven = sorted(
            (arm for arm, records in by_arm.items() if _model_driven(records)),
            key=lambda arm: (arm != control, order.get(arm, len(order)), arm),
        )
        for arm, records in sorted(by_arm.items(), key=lambda item: order.get(item[0], 0)):
            if arm != control and reference:
                fields = [*SANDBOX_FIELDS, *(() if arm in layered else ("image",))]
                differ += _differences(task, arm, records, "the control's", reference, fields)
            if arm in driven and arm != driven[0]:
                first = driven[0]
                differ += _differences(
                    task, arm, records, f"{first}'s", by_arm[first], MODEL_FIELDS
                )
    return differ


def any_limits(trials: Sequence[Record]) -> bool:
    """Does any record carry ``limits`` (a run written since the field exists)?"""
    return any(t.limits is not None for t in trials)
