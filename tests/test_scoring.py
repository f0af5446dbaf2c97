"""Scoring: outcomes, per-arm summaries, refusal slice and paired deltas, checked independently."""

from __future__ import annotations

import random
from typing import Any

import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

from runner.evidence.power import paired_min_detectable_delta
from runner.evidence.scoring import paired_delta, score, summarise
from runner.evidence.stats import newcombe_paired_interval
from runner.grading.outcomes import classify
from runner.records import Outcome, TaskKind, Trial


def trial(
    task: str,
    arm: str,
    outcome: Outcome,
    *,
    kind: TaskKind = TaskKind.ORDINARY,
    repeat: int = 0,
    **extra: Any,
) -> Trial:
    return Trial(
        run_id="r",
        job_id=f"{task}-{arm}-{repeat}",
        protocol_sha256="p",
        task_id=task,
        arm=arm,
        repeat=repeat,
        task_kind=kind,
        outcome=outcome,
        passed=outcome is Outcome.SUCCESS,
        timeout=outcome is Outcome.TIMEOUT,
        tool_violation=extra.pop("tool_violation", False),
        abstained=outcome in (Outcome.ABSTAIN_OK, Outcome.FALSE_ABSTAIN),
        wall_s=extra.pop("wall_s", 1.0),
        worker="w",
        started_at="s",
        finished_at="f",
        **extra,
    )


@pytest.mark.parametrize(
    ("kind", "infra", "timed_out", "abstained", "passed", "expected"),
    [
        (TaskKind.ORDINARY, True, True, True, True, Outcome.ERROR),
        (TaskKind.ORDINARY, False, True, False, True, Outcome.TIMEOUT),
        (TaskKind.ORDINARY, False, False, True, False, Outcome.FALSE_ABSTAIN),
        (TaskKind.ORDINARY, False, False, False, True, Outcome.SUCCESS),
        (TaskKind.ORDINARY, False, False, False, False, Outcome.MISS),
        (TaskKind.NEGATIVE, False, False, True, False, Outcome.ABSTAIN_OK),
        (TaskKind.NEGATIVE, False, False, False, True, Outcome.INVALID_COMPLETION),
        (TaskKind.NEGATIVE, False, True, True, False, Outcome.TIMEOUT),
    ],
)
def test_classify(
    kind: TaskKind, infra: bool, timed_out: bool, abstained: bool, passed: bool, expected: Outcome
) -> None:
    assert (
        classify(
            kind=kind, infra_error=infra, timed_out=timed_out, abstained=abstained, passed=passed
        )
        is expected
    )


def test_summary_denominators_and_wilson() -> None:
    trials = [
        trial("a", "x", Outcome.SUCCESS, prompt_tokens=100, completion_tokens=50),
        trial("b", "x", Outcome.SUCCESS, prompt_tokens=10),
        trial("c", "x", Outcome.MISS, tool_violation=True),
        trial("d", "x", Outcome.TIMEOUT),
        trial("e", "x", Outcome.ERROR),
        trial("f", "x", Outcome.FALSE_ABSTAIN),
        trial("n1", "x", Outcome.ABSTAIN_OK, kind=TaskKind.NEGATIVE),
        trial("n2", "x", Outcome.INVALID_COMPLETION, kind=TaskKind.NEGATIVE),
        trial("n3", "x", Outcome.ABSTAIN_OK, kind=TaskKind.NEGATIVE),
    ]
    s = summarise("x", False, trials)
    assert (s.n, s.passes, s.trials) == (5, 2, 9)  # the error is not in n
    assert s.pass_rate.value == pytest.approx(2 / 5)
    low, high = proportion_confint(2, 5, alpha=0.05, method="wilson")
    assert s.pass_rate.wilson95 == pytest.approx((low, high), abs=1e-9)
    assert (s.timeout_rate.k, s.timeout_rate.n) == (1, 8)
    assert (s.tool_violation_rate.k, s.error_rate.k, s.error_rate.n) == (1, 1, 9)
    assert s.tokens_per_pass == pytest.approx(160 / 2)
    assert (s.abstention_accuracy.k, s.abstention_accuracy.n) == (2, 3)
    assert (s.invalid_completion_rate.k, s.false_abstention_rate.k, s.false_abstention_rate.n) == (
        1,
        1,
        5,
    )
    empty = summarise("y", False, [])
    assert empty.pass_rate.value is None and empty.pass_rate.wilson95 is None
    assert empty.tokens_per_pass is None


def test_paired_delta_matches_scipy_and_statsmodels() -> None:
    rng = random.Random(7)
    for _ in range(50):
        n = rng.randint(2, 40)
        tasks = [f"t{i}" for i in range(n)]
        cand, ctrl = [], []
        for t in tasks:
            cand.append(trial(t, "cand", rng.choice([Outcome.SUCCESS, Outcome.MISS])))
            ctrl.append(trial(t, "ctrl", rng.choice([Outcome.SUCCESS, Outcome.MISS, Outcome.MISS])))
        d = paired_delta("cand", "ctrl", cand, ctrl, tasks)
        diffs = [float(a.passed) - float(b.passed) for a, b in zip(cand, ctrl, strict=True)]
        assert d.n_tasks == n and d.mean == pytest.approx(sum(diffs) / n, abs=1e-12)
        b = sum(x > 0 for x in diffs)
        c = sum(x < 0 for x in diffs)
        assert (d.helped, d.hurt, d.same) == (b, c, n - b - c)
        table = [[0, b], [c, 0]]
        assert d.mcnemar_p == pytest.approx(mcnemar(table, exact=True).pvalue, abs=1e-9)
        # Single runs: Newcombe's paired score interval on the 2x2 table (tested against
        # the published example and statsmodels in tests/test_stats.py), never zero width.
        both = sum(a.passed and z.passed for a, z in zip(cand, ctrl, strict=True))
        neither = n - b - c - both
        assert d.ci_method == "newcombe-paired"
        assert d.ci95 == newcombe_paired_interval(both, b, c, neither)
        assert d.ci95 is not None and d.ci95[0] <= d.mean <= d.ci95[1] and d.ci95[0] < d.ci95[1]
        assert d.mde == paired_min_detectable_delta(n, b + c)


def test_agreeing_single_runs_still_get_an_interval_of_width() -> None:
    """All tasks helped: a t interval over identical differences would be [+1, +1]."""
    tasks = [f"t{i}" for i in range(12)]
    cand = [trial(t, "cand", Outcome.SUCCESS) for t in tasks]
    ctrl = [trial(t, "ctrl", Outcome.MISS) for t in tasks]
    d = paired_delta("cand", "ctrl", cand, ctrl, tasks)
    assert d.mean == 1.0 and d.ci95 is not None and d.ci95[0] < 0.9 and d.ci95[1] == 1.0
    assert d.ci_method == "newcombe-paired" and d.mde is not None and 0.5 < d.mde < 1.0


def test_missing_and_errored_tasks_are_inconclusive_not_dropped() -> None:
    cand = [
        trial("a", "cand", Outcome.SUCCESS),
        trial("b", "cand", Outcome.ERROR),
        trial("c", "cand", Outcome.SUCCESS),
    ]
    ctrl = [trial("a", "ctrl", Outcome.MISS), trial("b", "ctrl", Outcome.MISS)]
    d = paired_delta("cand", "ctrl", cand, ctrl, ["a", "b", "c"])
    assert d.n_tasks == 1 and d.inconclusive == 2
    statuses = {c.task_id: (c.control_status, c.candidate_status, c.delta) for c in d.cases}
    assert statuses == {
        "a": ("fail", "pass", 1.0),
        "b": ("fail", "error", None),
        "c": ("skipped", "pass", None),
    }
    assert d.ci95 is not None and d.ci95[1] - d.ci95[0] > 0.5  # one task: a wide interval


def test_repeats_average_per_task_before_pairing() -> None:
    cand = [
        trial("a", "cand", Outcome.SUCCESS, repeat=0),
        trial("a", "cand", Outcome.MISS, repeat=1),
        trial("b", "cand", Outcome.SUCCESS, repeat=0),
        trial("b", "cand", Outcome.SUCCESS, repeat=1),
    ]
    ctrl = [
        trial("a", "ctrl", Outcome.MISS, repeat=0),
        trial("a", "ctrl", Outcome.MISS, repeat=1),
        trial("b", "ctrl", Outcome.SUCCESS, repeat=0),
        trial("b", "ctrl", Outcome.MISS, repeat=1),
    ]
    d = paired_delta("cand", "ctrl", cand, ctrl, ["a", "b"])
    assert [c.delta for c in d.cases] == [0.5, 0.5]
    assert d.mcnemar_p is None  # McNemar is for single-run pairs only
    cand.append(trial("c", "cand", Outcome.SUCCESS))
    ctrl.append(trial("c", "ctrl", Outcome.MISS))
    d = paired_delta("cand", "ctrl", cand, ctrl, ["a", "b", "c"])
    diffs = [0.5, 0.5, 1.0]
    low, high = sps.t.interval(0.95, 2, loc=sum(diffs) / 3, scale=sps.sem(diffs))
    assert d.ci_method == "t" and d.ci95 == pytest.approx((low, high), abs=1e-9)
    z = sps.norm.ppf(0.975) + sps.norm.ppf(0.8)
    assert d.mde == pytest.approx(z * sps.tstd(diffs) / 3**0.5, abs=1e-9)


def test_the_refusal_slice_is_paired_on_negative_tasks() -> None:
    neg = TaskKind.NEGATIVE
    trials = [trial("o", arm, Outcome.MISS) for arm in ("ctrl", "cand")]
    for i in range(6):
        trials.append(trial(f"n{i}", "ctrl", Outcome.INVALID_COMPLETION, kind=neg))
        won = Outcome.ABSTAIN_OK if i < 4 else Outcome.INVALID_COMPLETION
        trials.append(trial(f"n{i}", "cand", won, kind=neg))
    scores = score(trials, ["ctrl", "cand"], "ctrl", ["o", *(f"n{i}" for i in range(6))])
    [refusal] = scores.refusal
    assert (refusal.arm, refusal.n_tasks, refusal.helped, refusal.same) == ("cand", 6, 4, 2)
    assert refusal.mean == pytest.approx(4 / 6)
    assert refusal.ci95 == newcombe_paired_interval(0, 4, 0, 2)
    assert [c.task_id for c in scores.deltas[0].cases] == ["o"]  # negatives stay out


def test_score_orders_arms_and_pairs_each_candidate() -> None:
    trials = [trial("a", arm, Outcome.MISS) for arm in ("ctrl", "c1", "c2")]
    scores = score(trials, ["ctrl", "c1", "c2"], "ctrl", ["a"])
    assert [s.arm for s in scores.summaries] == ["ctrl", "c1", "c2"]
    assert [(d.arm, d.control) for d in scores.deltas] == [("c1", "ctrl"), ("c2", "ctrl")]
