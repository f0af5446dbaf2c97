"""Answer-task metrics one by one: each metric's rate for the control and a candidate,
paired per task, with the delta and its sd. Pure.

A task's metrics are the names its trials recorded (``Trial.metrics``). A trial of
an answer task whose answer was never scored (none given, invalid, abstained, timed
out) holds none of them; trials that ended in an infrastructure error are left out,
as in every other rate. Repeats are averaged per task first, as in the paired delta.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from runner.records import Outcome, Record, TaskKind


@dataclass(frozen=True)
class MetricDelta:
    candidate: str
    control: str
    metric: str
    n_tasks: int  # answer tasks both arms ran without error
    control_mean: float | None
    candidate_mean: float | None
    delta: float | None
    sd: float | None  # of the per-task differences; None below two tasks


def _metric_names(trials: Sequence[Record]) -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for t in trials:
        if t.metrics and t.task_kind is TaskKind.ORDINARY:
            names.setdefault(t.task_id, set()).update(t.metrics)
    return names


def _scores(trials: Sequence[Record], names: dict[str, set[str]]) -> dict[tuple[str, str], float]:
    """(task, metric) → the share of one arm's non-error trials on that task where it held."""
    held: dict[tuple[str, str], int] = {}
    runs: dict[str, int] = {}
    for t in trials:
        if t.outcome is Outcome.ERROR:
            continue
        runs[t.task_id] = runs.get(t.task_id, 0) + 1
        for metric in names[t.task_id]:
            key = (t.task_id, metric)
            held[key] = held.get(key, 0) + bool((t.metrics or {}).get(metric, False))
    return {
        (task, metric): held.get((task, metric), 0) / n
        for task, n in runs.items()
        for metric in names[task]
    }


def metric_deltas(
    trials: Sequence[Record], candidates: Sequence[str], control: str
) -> list[MetricDelta]:
    """For each candidate and each metric of the answer tasks: control, candidate, delta, sd."""
    names = _metric_names(trials)
    if not names:
        return []
    by_arm: dict[str, list[Record]] = {}
    for t in trials:
        if t.task_id in names:
            by_arm.setdefault(t.arm, []).append(t)
    ctrl = _scores(by_arm.get(control, []), names)
    out: list[MetricDelta] = []
    for arm in candidates:
        cand = _scores(by_arm.get(arm, []), names)
        for metric in sorted({m for ms in names.values() for m in ms}):
            keys = sorted(k for k in cand.keys() & ctrl.keys() if k[1] == metric)
            a = [cand[k] for k in keys]
            c = [ctrl[k] for k in keys]
            diffs = [x - y for x, y in zip(a, c, strict=True)]
            out.append(
                MetricDelta(
                    candidate=arm,
                    control=control,
                    metric=metric,
                    n_tasks=len(keys),
                    control_mean=statistics.fmean(c) if c else None,
                    candidate_mean=statistics.fmean(a) if a else None,
                    delta=statistics.fmean(diffs) if diffs else None,
                    sd=statistics.stdev(diffs) if len(diffs) > 1 else None,
                )
            )
    return out
