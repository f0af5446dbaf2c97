"""``scorecard.json``: an arm's on and off legs in seed 001's DeltaScorecard shape. Pure.

A run in which an arm with toggles runs both legs (``baseline: both`` in the controls, or
``deltarun run --baseline-mode both``) gets one beside ``report.json``: ``scorecard.json``
when one arm does, ``scorecard-<arm>.json`` for each when several do. ``report.json``'s
``baseline_legs`` keeps deltarun's richer form (intervals, McNemar, the arms' detail);
this file is the seed's plain contract, its fields exactly::

    schema_version (1), suite_id, suite_path, generated_at, skill_on_run_id,
    skill_off_run_id, skill_on_aggregate, skill_off_aggregate, aggregate_delta,
    per_case[]: case_id, skill_on_status, skill_off_status, skill_on_score,
    skill_off_score, delta

The rules (docs/outcomes-and-statistics.md, "scorecard.json"):

- the cases are the run's tasks in run.json's order, ordinary and negative; a record
  *wins* when it passed (ordinary) or abstained correctly (negative: ``abstain_ok``);
- a leg's repeats of a case reduce to one status and score (``reduce_repeats``): no
  record ``skipped``; only ``error`` records ``error``, no score; otherwise the score is
  the share of wins among the records without an error, and the status ``pass`` when more
  than half of them win, ``fail`` when fewer than half, ``inconclusive`` on a tie;
- ``delta`` (``case_delta``): +1 when the on leg passes and the off leg does not, -1 the
  other way round, 0 when both or neither pass; null when either leg is ``error`` or
  ``skipped`` (an infrastructure error is never an agent failure, nor a missing record);
- the aggregates are each leg's mean score over the cases both legs scored, and
  ``aggregate_delta`` is on minus off as published (null when no case has both scores);
- numbers are rounded to 6 digits, as the report publishes them; ``generated_at`` is the
  report's (the last record's ``finished_at``), so ``replay`` writes the same bytes;
- a withheld report (two or more checklist rows fail) withholds these numbers too: the
  aggregates are null and ``per_case`` is empty (report.json keeps them for the author).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from runner.config.controls import Controls
from runner.records import Outcome, Record, TaskKind
from runner.report.contents import rounded

SCHEMA_VERSION = 1
ON_SUFFIX, OFF_SUFFIX = "-skill-on", "-skill-off"


@dataclass(frozen=True)
class LegCase:
    """One leg's repeats of one case, reduced: its status and score (None: nothing scored)."""

    status: str  # pass | fail | error | skipped | inconclusive
    score: float | None


def _won(record: Record) -> bool:
    if record.task_kind is TaskKind.NEGATIVE:
        return record.outcome is Outcome.ABSTAIN_OK
    return record.passed


def reduce_repeats(records: Sequence[Record]) -> LegCase:
    """A case's records on one leg as one status and score: the majority of the repeats
    without an infrastructure error, a tie ``inconclusive``; the score their share of wins."""
    if not records:
        return LegCase("skipped", None)
    scored = [r for r in records if r.outcome is not Outcome.ERROR]
    if not scored:
        return LegCase("error", None)
    wins = sum(_won(r) for r in scored)
    status = "pass" if 2 * wins > len(scored) else "fail" if 2 * wins < len(scored) else ""
    return LegCase(status or "inconclusive", wins / len(scored))


def case_delta(on: LegCase, off: LegCase) -> int | None:
    """+1 the skill helped (only the on leg passes), -1 it hurt, 0 the legs agree on pass /
    not pass; None when a leg has no verdict to compare (``error``, ``skipped``)."""
    if on.score is None or off.score is None:
        return None
    return int(on.status == "pass") - int(off.status == "pass")


def _mean(values: list[float]) -> float | None:
    return rounded(sum(values) / len(values)) if values else None


@dataclass(frozen=True)
class Head:
    """What every scorecard of a run shares."""

    run_id: str
    suite_id: str  # the suite digest, as report.json's suite_id
    suite_path: str  # suite.file as the controls name it
    generated_at: str  # the report's


def _by_task(records: Iterable[Record]) -> dict[str, list[Record]]:
    found: dict[str, list[Record]] = {}
    for record in records:
        found.setdefault(record.task_id, []).append(record)
    return found


def scorecard(
    head: Head,
    on_records: Iterable[Record],
    off_records: Iterable[Record],
    task_ids: Sequence[str],
    withheld: bool = False,
) -> dict[str, Any]:
    """The scorecard of one arm from the records of its on and off legs; ``task_ids`` are
    the cases, in order."""
    on, off = _by_task(on_records), _by_task(off_records)
    cases: list[dict[str, Any]] = []
    on_scores: list[float] = []
    off_scores: list[float] = []
    for task_id in task_ids:
        a, b = reduce_repeats(on.get(task_id, [])), reduce_repeats(off.get(task_id, []))
        if a.score is not None and b.score is not None:
            on_scores.append(a.score)
            off_scores.append(b.score)
        cases.append(
            {
                "case_id": task_id,
                "skill_on_status": a.status,
                "skill_off_status": b.status,
                "skill_on_score": rounded(a.score),
                "skill_off_score": rounded(b.score),
                "delta": case_delta(a, b),
            }
        )
    on_aggregate, off_aggregate = _mean(on_scores), _mean(off_scores)
    delta = None
    if on_aggregate is not None and off_aggregate is not None:
        delta = rounded(on_aggregate - off_aggregate)
    if withheld:
        on_aggregate = off_aggregate = delta = None
    return {
        "schema_version": SCHEMA_VERSION,
        "suite_id": head.suite_id,
        "suite_path": head.suite_path,
        "generated_at": head.generated_at,
        "skill_on_run_id": head.run_id + ON_SUFFIX,
        "skill_off_run_id": head.run_id + OFF_SUFFIX,
        "skill_on_aggregate": on_aggregate,
        "skill_off_aggregate": off_aggregate,
        "aggregate_delta": delta,
        "per_case": [] if withheld else cases,
    }


def dumps_scorecard(data: dict[str, Any]) -> str:
    """The file's text: the seed's key order, two-space indent, one final newline."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def both_arms(controls: Controls) -> list[str]:
    """The arms that ran both legs (``<arm>-on``, ``<arm>-off``), in the controls' order."""
    return [arm.name for arm in controls.arms if arm.baseline == "both"]


def scorecard_name(arm: str, arms: Sequence[str]) -> str:
    """``scorecard.json`` for a run's only arm with both legs; ``scorecard-<arm>.json`` each
    when there are several (an arm name is a safe file name: letters, digits, ``._-``)."""
    return "scorecard.json" if len(arms) == 1 else f"scorecard-{arm}.json"


def scorecard_files(
    controls: Controls,
    head: Head,
    trials: Iterable[Record],
    task_ids: Sequence[str],
    withheld: bool,
) -> tuple[tuple[str, str], ...]:
    """(file name, text) of each scorecard of a run; none when no arm ran both legs."""
    arms = both_arms(controls)
    if not arms:
        return ()
    by_leg: dict[str, list[Record]] = {}
    for trial in trials:
        by_leg.setdefault(trial.arm, []).append(trial)
    files = []
    for arm in arms:
        on, off = by_leg.get(f"{arm}-on", []), by_leg.get(f"{arm}-off", [])
        data = scorecard(head, on, off, task_ids, withheld)
        files.append((scorecard_name(arm, arms), dumps_scorecard(data)))
    return tuple(files)
