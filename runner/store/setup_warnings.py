"""Setup warnings: records that look like a broken task or arm, not agent behaviour. Pure.

A user's setup mistake must never pass for an agent's score, so the report names
what the records show of one, each with its tasks:

- a control that changes nothing (a scripted arm) passes a task (a task that passes
  without any change is broken, or its test imports the image's own copy of the
  code: ``deltarun validate``); a control that is itself an agent or recorded
  patches (an older model) passing tasks is what it is for;
- an arm's agent exits 126 or 127 (not executable, not found) in most trials;
- a patch arm's recorded patch does not apply;
- a patch arm has no recorded output for a task (counted as an empty answer);
- the hidden test ran no test (a wrong path, nothing collected or selected).

The checklist's ``setup`` row fails while any remain.
"""

from __future__ import annotations

from collections.abc import Sequence

from runner.config.arms import Arm, PatchAgent, ScriptedAgent
from runner.config.controls import Controls
from runner.records import Record, ScoredTrial, TaskKind
from runner.setup_signals import NO_OUTPUT, NO_TEST_RAN, signal_of

SHOWN = 8


def _signal(record: Record) -> str | None:
    if isinstance(record, ScoredTrial):
        return record.setup_signal
    return signal_of(record.reason, record.agent_log)


def _tasks(ids: Sequence[str]) -> str:
    unique = sorted(set(ids))
    shown = ", ".join(unique[:SHOWN])
    more = f" and {len(unique) - SHOWN} more" if len(unique) > SHOWN else ""
    return f"{len(unique)} task(s): {shown}{more}"


def _no_change(arm: Arm) -> bool:
    """Whether an arm's agent changes nothing, so its passes mean a broken task."""
    return isinstance(arm.agent, ScriptedAgent)


def first_sign(controls: Controls, record: Record) -> tuple[str, str] | None:
    """(kind, line) when this one record looks like a setup mistake: what the progress
    shows as records arrive (the report's warnings weigh all of them)."""
    arm = next((a for a in controls.arms if a.name == record.arm), None)
    where = f"{record.arm} on {record.task_id}"
    ordinary = record.task_kind is TaskKind.ORDINARY
    if arm is not None and arm.control and _no_change(arm) and record.passed and ordinary:
        return "control-passes", f"the control passes a task ({where}): broken task?"
    if arm is not None and isinstance(arm.agent, PatchAgent):
        if record.agent_exit_code not in (0, None):
            return f"refused:{record.arm}", f"the recorded patch does not apply ({where})"
        if _signal(record) == NO_OUTPUT:
            return f"empty:{record.arm}", f"no recorded output ({where})"
    elif record.agent_exit_code in (126, 127):
        return f"lost:{record.arm}", f"the agent exited {record.agent_exit_code} ({where})"
    if _signal(record) == NO_TEST_RAN:
        return "no-test", f"the hidden test ran no test ({where})"
    return None


def setup_warnings(controls: Controls, records: Sequence[Record]) -> list[str]:
    """One line per warning, in a fixed order (control, arms in the controls' order, tests)."""
    found: list[str] = []
    control_arm = next(arm for arm in controls.arms if arm.control)
    control = control_arm.name
    passed = [
        r.task_id
        for r in records
        if r.arm == control and r.passed and r.task_kind is TaskKind.ORDINARY
    ]
    if not _no_change(control_arm):
        passed = []
    if passed:
        found.append(
            f"the control {control} passes {_tasks(passed)}: a task that passes without a "
            "change is broken or its test imports the image's own copy (deltarun validate)"
        )
    for arm in controls.arms:
        mine = [r for r in records if r.arm == arm.name]
        if not mine:
            continue
        if isinstance(arm.agent, PatchAgent):
            refused = [r.task_id for r in mine if r.agent_exit_code not in (0, None)]
            if refused:
                found.append(
                    f"arm {arm.name}: the recorded patch does not apply on {_tasks(refused)}"
                )
            empty = [r.task_id for r in mine if _signal(r) == NO_OUTPUT]
            if empty:
                found.append(
                    f"arm {arm.name}: no recorded output for {_tasks(empty)} (counted as empty "
                    "answers)"
                )
            continue
        lost = [r.task_id for r in mine if r.agent_exit_code in (126, 127)]
        if len(lost) * 2 > len(mine):
            found.append(
                f"arm {arm.name}: the agent exited 126/127 (not executable or not found) in "
                f"{len(lost)} of {len(mine)} trials, on {_tasks(lost)}: check its argv"
            )
    empty_tests = [r.task_id for r in records if _signal(r) == NO_TEST_RAN]
    if empty_tests:
        found.append(
            f"the hidden test ran no test on {_tasks(empty_tests)}: check hidden_tests or "
            "hidden_test (deltarun validate)"
        )
    return found
