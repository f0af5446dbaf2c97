"""The cost intervals (runner/evidence/cost_bounds.py) against an independent computation:
Fieller's quadratic solved by numpy, the delta method in matrix form over numpy's sample
covariance (the gradient of the log ratio at the means), and their coverage over
simulated suites."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import scipy.stats as sps

from runner.evidence.cost_bounds import per_pass_interval, per_pass_ratio_interval


def _t(n: int) -> float:
    return float(sps.t.ppf(0.975, n - 1))


def _delta_se(columns: np.ndarray, gradient: np.ndarray) -> float:  # the ratio's se
    """sqrt(g' S g / n): S the sample covariance (n - 1) of the per-task columns."""
    cov = np.cov(columns, rowvar=False, ddof=1)
    return float(math.sqrt(gradient @ cov @ gradient / columns.shape[0]))


def _tasks(rng: random.Random, n: int, price: float, p: float) -> list[tuple[float, float]]:
    """Per task of 3 trials: dollars (a lognormal spend per trial) and passes."""
    out = []
    for _ in range(n):
        hard = rng.random() < 0.3  # hard tasks cost more and pass less
        usd = sum(price * rng.lognormvariate(0.5 if hard else 0.0, 0.4) for _ in range(3))
        passes = sum(rng.random() < (p / 2 if hard else p) for _ in range(3))
        out.append((usd, float(passes)))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_per_pass_is_fiellers_interval(seed: int) -> None:
    # Fieller's set by numpy: the roots of the quadratic in r, from numpy's covariance.
    rng = random.Random(seed)
    tasks = _tasks(rng, 25, 0.2, 0.6)
    got = per_pass_interval(tasks)
    assert got is not None
    data = np.array(tasks)
    ybar, xbar = data.mean(axis=0)
    cov = np.cov(data, rowvar=False, ddof=1) / len(tasks)
    t2 = _t(25) ** 2
    roots = np.roots(
        [
            xbar**2 - t2 * cov[1, 1],
            -2 * (ybar * xbar - t2 * cov[0, 1]),
            ybar**2 - t2 * cov[0, 0],
        ]
    )
    assert got.estimate == pytest.approx(ybar / xbar, rel=1e-12)
    assert (got.low, got.high) == pytest.approx(tuple(sorted(roots.real)), rel=1e-9)
    assert got.low < got.estimate < got.high


def test_per_pass_has_no_upper_bound_when_passes_are_not_clearly_above_zero() -> None:
    got = per_pass_interval([(1.0, 0.0), (1.0, 0.0), (1.0, 1.0)])
    assert got is not None and got.high == math.inf and got.estimate == 3.0


@pytest.mark.parametrize("seed", range(5))
def test_the_ratio_matches_the_matrix_delta_method_on_the_log_scale(seed: int) -> None:
    rng = random.Random(100 + seed)
    arm, ctrl = _tasks(rng, 30, 0.3, 0.7), _tasks(rng, 30, 0.2, 0.5)
    pairs = [(a[0], a[1], c[0], c[1]) for a, c in zip(arm, ctrl, strict=True)]
    got = per_pass_ratio_interval(pairs)
    assert got is not None
    data = np.array(pairs)
    ya, xa, yc, xc = data.mean(axis=0)
    log = math.log((ya / xa) / (yc / xc))
    se = _delta_se(data, np.array([1 / ya, -1 / xa, -1 / yc, 1 / xc]))
    assert got.estimate == pytest.approx(math.exp(log), rel=1e-12)
    assert (got.low, got.high) == pytest.approx(
        (math.exp(log - _t(30) * se), math.exp(log + _t(30) * se)), rel=1e-9
    )


def test_no_interval_without_two_tasks_a_pass_or_dollars() -> None:
    assert per_pass_interval([(1.0, 1.0)]) is None
    assert per_pass_interval([(1.0, 0.0), (2.0, 0.0)]) is None
    assert per_pass_ratio_interval([(1.0, 1.0, 1.0, 1.0)]) is None
    assert per_pass_ratio_interval([(1.0, 1.0, 0.0, 1.0), (1.0, 1.0, 0.0, 1.0)]) is None
    with pytest.raises(ValueError):
        per_pass_interval([(1.0, 1.0), (-1.0, 1.0)])
    with pytest.raises(ValueError):
        per_pass_interval([(1.0, 1.0), (math.nan, 1.0)])


def test_coverage_over_simulated_suites() -> None:
    # 2,000 suites of 40 tasks from one population: each one-sided bound covers the true
    # dollars per pass (and the true ratio) near 97.5% (the delta method is asymptotic;
    # allowed down to 96.5%: the delta method's R + 1.96 se was at 94.8% from above).
    rng = random.Random(7)
    population_a = _tasks(rng, 200_000, 0.3, 0.7)
    population_c = _tasks(rng, 200_000, 0.2, 0.5)
    true_a = sum(y for y, _ in population_a) / sum(x for _, x in population_a)
    true_c = sum(y for y, _ in population_c) / sum(x for _, x in population_c)
    below = above = ratio_below = ratio_above = 0
    suites = 2000
    for _ in range(suites):
        picks = [rng.randrange(len(population_a)) for _ in range(40)]
        arm = [population_a[i] for i in picks]
        ctrl = [population_c[i] for i in picks]  # the same tasks: paired
        one = per_pass_interval(arm)
        ratio = per_pass_ratio_interval([(*a, *c) for a, c in zip(arm, ctrl, strict=True)])
        assert one is not None and ratio is not None
        below += one.low <= true_a
        above += true_a <= one.high
        ratio_below += ratio.low <= true_a / true_c
        ratio_above += true_a / true_c <= ratio.high
    for covered in (below, above, ratio_below, ratio_above):
        assert 0.965 <= covered / suites <= 0.995, (below, above, ratio_below, ratio_above)
