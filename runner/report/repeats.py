"""Statistics that only exist with ``repeats > 1``. Pure.

Per arm, over ordinary tasks without infrastructure errors: the standard error
of the pass rate clustered by task (repeats of one task are not independent;
Miller 2024, "Adding Error Bars to Evals"), pass@k (the unbiased estimator of
Chen et al. 2021: the chance that at least one of k repeats passes) and pass^k
(the chance that all k pass), each averaged over the tasks with at least k
repeats, for every k up to the number of repeats.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from runner.evidence.passk import pass_at_k, pass_hat_k
from runner.evidence.stats import clustered_se
from runner.records import Outcome, Record, TaskKind


def repeat_stats(trials: Sequence[Record]) -> dict[str, Any] | None:
    """``None`` for single runs; otherwise clustered SE, pass@k and pass^k of one arm."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for t in trials:
        if t.task_kind is TaskKind.ORDINARY and t.outcome is not Outcome.ERROR:
            by_task[t.task_id].append(1.0 if t.passed else 0.0)
    most = max((len(v) for v in by_task.values()), default=0)
    if most < 2:
        return None
    groups = [values for values in by_task.values() if values]
    se = clustered_se(groups) if len(groups) >= 2 else None
    at_k: dict[str, float] = {}
    hat_k: dict[str, float] = {}
    for k in range(1, most + 1):
        eligible = [(len(v), int(sum(v))) for v in groups if len(v) >= k]
        if not eligible:
            continue
        at_k[str(k)] = round(sum(pass_at_k(n, c, k) for n, c in eligible) / len(eligible), 6)
        hat_k[str(k)] = round(sum(pass_hat_k(n, c, k) for n, c in eligible) / len(eligible), 6)
    return {
        "tasks": len(groups),
        "repeats_max": most,
        "clustered_se": None if se is None else round(se, 6),
        "pass_at_k": at_k,
        "pass_hat_k": hat_k,
    }
