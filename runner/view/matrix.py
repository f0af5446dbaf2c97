"""The task × arm matrix: every trial's outcome folded by (task, arm) with counts, and
each candidate arm's verdict per task against the control. Pure.

An arm passes a task when most of its repeats ended well (``success``, or ``abstain_ok``
on a negative task, as the report's refusal slice counts it; a tie is inconclusive); against
the control a task is *helped* (candidate passes, control does not), *hurt* (the
reverse), *same*, or *inconclusive* (a tie on either side), or ``n/a`` with no trial.

A trial whose verdict the last ``replay --reverify`` changed carries the change (``rv``:
its recorded and its new outcome), and its cell counts it (``changed``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runner.store.rundir import ledger_rule

PROMPT_CHARS = 4000  # of a prompt, kept in the index for search and the task page


def majority(passes: int, trials: int) -> str:
    """``pass``, ``fail`` or ``tie`` of an arm's repeats on one task (``none``: no trial)."""
    if trials == 0:
        return "none"
    if passes * 2 == trials:
        return "tie"
    return "pass" if passes * 2 > trials else "fail"


def versus(candidate: str, control: str) -> str:
    """helped, hurt, same, inconclusive or n/a from two arms' majorities."""
    if "none" in (candidate, control):
        return "n/a"
    if "tie" in (candidate, control):
        return "inconclusive"
    if candidate == control:
        return "same"
    return "helped" if candidate == "pass" else "hurt"


def _cell() -> dict[str, Any]:
    return {"counts": {}, "trials": [], "passes": 0, "changed": 0}


def build_index(
    meta: Mapping[str, Any],
    entries: Iterable[dict[str, Any]],
    tasks: Mapping[str, Mapping[str, Any]],
    reverified: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The matrix page's data: arms, the control, one row per task (run.json's order, then
    tasks only the ledger names), each arm's cell and each candidate's verdict, and every
    trial's small entry (``summary``) by ledger line; with ``reverified`` (reverify.json as
    the source read it), when it ran and how many verdicts it changed here."""
    arms = [str(arm) for arm in meta.get("arms") or []]
    control = str(meta.get("control_arm") or (arms[0] if arms else ""))
    order = [str(task.get("id")) for task in meta.get("tasks") or [] if isinstance(task, dict)]
    rows: dict[str, dict[str, Any]] = {task_id: {} for task_id in order}
    trials: dict[str, dict[str, Any]] = {}
    current, retried = ledger_rule(
        (str(entry.get("job") or ""), entry["out"] == "error", entry) for entry in entries
    )  # each job once, as the report counts it
    notes = 0
    for entry in current:
        trials[str(entry["i"])] = entry
        notes += bool(entry["note"])
        cells = rows.setdefault(entry["task"], {})
        cell = cells.setdefault(entry["arm"], _cell())
        cell["counts"][entry["out"]] = cell["counts"].get(entry["out"], 0) + 1
        cell["trials"].append(entry["i"])
        cell["passes"] += entry["good"]
        cell["changed"] += "rv" in entry
        if entry["arm"] not in arms:
            arms.append(entry["arm"])
    return {
        "arms": arms,
        "control": control,
        "rows": [_row(task_id, cells, arms, control, tasks) for task_id, cells in rows.items()],
        "trials": trials,
        "notes": notes,
        "retried": {str(entry["i"]): entry for entry in retried},
        "reverify": None if reverified is None else _reverify(reverified, trials),
    }


def _reverify(reverified: Mapping[str, Any], trials: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "ran_at": reverified.get("ran_at"),
        "checked": reverified.get("checked"),
        "changed": sum("rv" in entry for entry in trials.values()),
        "note": reverified.get("note"),
    }


def _row(
    task_id: str,
    cells: dict[str, dict[str, Any]],
    arms: list[str],
    control: str,
    tasks: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    info = tasks.get(task_id, {})
    status = {arm: majority(cell["passes"], len(cell["trials"])) for arm, cell in cells.items()}
    base = status.get(control, "none")
    prompt = info.get("prompt")
    return {
        "id": task_id,
        "kind": str(info.get("kind") or ""),
        "grading": str(info.get("grading") or ""),
        "tags": [str(tag) for tag in info.get("tags") or []],
        "prompt": prompt[:PROMPT_CHARS] if isinstance(prompt, str) else None,
        "cells": cells,
        "status": status,
        "vs": {arm: versus(status.get(arm, "none"), base) for arm in arms if arm != control},
    }
