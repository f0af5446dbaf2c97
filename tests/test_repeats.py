"""Repeat statistics: clustered SE, pass@k and pass^k per arm."""

from __future__ import annotations

from itertools import combinations

import pytest

from runner.evidence.stats import clustered_se
from runner.records import Outcome
from runner.report.repeats import repeat_stats
from tests.test_scoring import trial


def _arm(passes: dict[str, list[bool]]) -> list:  # type: ignore[type-arg]
    return [
        trial(task, "a", Outcome.SUCCESS if ok else Outcome.MISS, repeat=i)
        for task, oks in passes.items()
        for i, ok in enumerate(oks)
    ]


def test_single_runs_have_no_repeat_stats() -> None:
    assert repeat_stats(_arm({"t1": [True], "t2": [False]})) is None


def test_pass_at_k_and_hat_k_by_enumeration() -> None:
    passes = {"t1": [True, False, False], "t2": [True, True, False], "t3": [False, False, False]}
    stats = repeat_stats(_arm(passes))
    assert stats is not None and stats["repeats_max"] == 3
    for k in (1, 2, 3):
        at = hat = 0.0
        for oks in passes.values():
            subsets = list(combinations(oks, k))
            at += sum(any(s) for s in subsets) / len(subsets)
            hat += sum(all(s) for s in subsets) / len(subsets)
        assert stats["pass_at_k"][str(k)] == pytest.approx(at / 3, abs=1e-6)
        assert stats["pass_hat_k"][str(k)] == pytest.approx(hat / 3, abs=1e-6)
    expected = clustered_se([[1.0 if ok else 0.0 for ok in oks] for oks in passes.values()])
    assert stats["clustered_se"] == pytest.approx(expected, abs=1e-6)


def test_errors_are_left_out() -> None:
    trials = _arm({"t1": [True, True], "t2": [False, False]})
    trials.append(trial("t3", "a", Outcome.ERROR, repeat=0))
    stats = repeat_stats(trials)
    assert stats is not None and stats["tasks"] == 2
