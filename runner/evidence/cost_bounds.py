"""Intervals for dollars per pass, and for its ratio to the control's. Pure.

Dollars per pass is a ratio of two sums over the run's tasks: ``R = sum(usd) / sum(passes)``.
Tasks are the unit that repeats (a task's trials share its difficulty and its cost), so
both sums are taken per task first (every trial of the task, its repeats included), and
the interval is Fieller's for a ratio of two means (Fieller 1954; Cochran 1977 ch. 6): the
set of ``r`` with::

    (Ybar - r Xbar)^2 <= t^2 (s_yy - 2 r s_xy + r^2 s_xx) / n

``Y_i`` the task's dollars, ``X_i`` its passes, ``s`` their sample covariances (``n - 1``),
``t`` Student's quantile with ``n - 1`` degrees of freedom (each one-sided bound at 97.5%
for a 95% interval, as the gate reads the delta's). It carries the uncertainty of the
passes in the denominator, which the delta method's symmetric ``R -/+ 1.96 se`` does not: in
simulated 40-task suites with a skewed spend, that one covered the true cost per pass from
above in 94.8% of suites (it would pass a too-dear arm twice as often as the gate says),
Fieller's in about 97% (``tests/test_cost_bounds.py``). When the passes are not clearly
above 0 the set is unbounded: no finite upper bound.

The ratio of an arm's dollars per pass to the control's, on the same tasks (paired), is
taken on the log scale, where the delta method is closer to normal and the interval stays
positive::

    log(Ra / Rc),   psi_i = (Ya_i / Ya_bar - Xa_i / Xa_bar) - (Yc_i / Yc_bar - Xc_i / Xc_bar)

and the interval is ``exp(log(Ra / Rc) -/+ c sd(psi) / sqrt(n))``. The pairing keeps the
covariance of the two arms' costs on a task (a hard task is dear for both).

Both need at least two tasks and a pass (and, for the ratio, dollars on both sides);
otherwise there is no interval (None) and the gate says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from runner.evidence.tdist import student_t_ppf

__all__ = ["CostInterval", "per_pass_interval", "per_pass_ratio_interval"]


@dataclass(frozen=True)
class CostInterval:
    """An estimate and its interval over ``n`` tasks."""

    n: int
    estimate: float
    low: float
    high: float


def _sd(values: Sequence[float]) -> float:
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _crit(confidence: float, n: int) -> float:
    """Student's t quantile with ``n - 1`` degrees of freedom for a two-sided ``confidence``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return student_t_ppf(1.0 - (1.0 - confidence) / 2.0, n - 1)


def _check(tasks: Sequence[Sequence[float]]) -> None:
    for task in tasks:
        if not all(math.isfinite(v) and v >= 0.0 for v in task):
            raise ValueError(f"dollars and passes must be finite and >= 0, got {list(task)!r}")


def per_pass_interval(
    tasks: Sequence[tuple[float, float]], confidence: float = 0.95
) -> CostInterval | None:
    """Dollars per pass over ``tasks``, each (dollars, passes) summed over its trials, with
    Fieller's interval; None with fewer than two tasks or no pass."""
    _check(tasks)
    n = len(tasks)
    usd = math.fsum(y for y, _ in tasks)
    passes = math.fsum(x for _, x in tasks)
    if n < 2 or passes == 0.0:
        return None
    ybar, xbar = usd / n, passes / n
    ratio = ybar / xbar
    dev = [(y - ybar, x - xbar) for y, x in tasks]
    syy = math.fsum(dy * dy for dy, _ in dev) / (n - 1) / n  # covariances of the means
    sxx = math.fsum(dx * dx for _, dx in dev) / (n - 1) / n
    sxy = math.fsum(dy * dx for dy, dx in dev) / (n - 1) / n
    t2 = _crit(confidence, n) ** 2
    # (ybar - r xbar)^2 <= t^2 (syy - 2 r sxy + r^2 sxx): a r^2 + b r + c <= 0
    a = xbar * xbar - t2 * sxx
    b = -2.0 * (ybar * xbar - t2 * sxy)
    c = ybar * ybar - t2 * syy
    if a <= 0.0:  # passes not clearly above 0: no finite upper bound
        return CostInterval(n, ratio, 0.0, math.inf)
    root = math.sqrt(max(0.0, b * b - 4.0 * a * c))
    low, high = (-b - root) / (2.0 * a), (-b + root) / (2.0 * a)
    return CostInterval(n, ratio, max(0.0, min(low, ratio)), max(high, ratio))


def per_pass_ratio_interval(
    pairs: Sequence[tuple[float, float, float, float]], confidence: float = 0.95
) -> CostInterval | None:
    """The arm's dollars per pass over the control's, on tasks both ran: each pair is (the
    arm's dollars, its passes, the control's dollars, its passes) of one task. None with
    fewer than two tasks, or when either arm has no pass or spent nothing."""
    _check(pairs)
    n = len(pairs)
    if n < 2:
        return None
    ya, xa, yc, xc = (math.fsum(p[k] for p in pairs) / n for k in range(4))
    if min(ya, xa, yc, xc) == 0.0:
        return None
    estimate = (ya / xa) / (yc / xc)
    psi = [(p[0] / ya - p[1] / xa) - (p[2] / yc - p[3] / xc) for p in pairs]
    half = _crit(confidence, n) * _sd(psi) / math.sqrt(n)
    log = math.log(estimate)
    return CostInterval(n, estimate, math.exp(log - half), math.exp(log + half))
