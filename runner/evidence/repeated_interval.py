"""The repeated confidence interval of a look: from the paired differences, or, for binary
pairs whose differences all agree, from exact bounds on the counts.  Pure.

A look of ``runner.evidence.sequential`` with boundary ``c_k`` reads the interval
``estimate -/+ crit * se`` (J&T 2000 ch. 9), ``crit`` being ``c_k`` or its t-corrected
value; the module docstring of ``runner.evidence.sequential`` says when each is used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from runner.evidence.tdist import normal_sf, student_t_ppf

__all__ = [
    "EXACT_AGREEING",
    "RepeatedInterval",
    "agreeing_repeated_interval",
    "paired_repeated_interval",
    "repeated_interval",
]


EXACT_AGREEING = "exact-agreeing"  # agreeing_repeated_interval's method


@dataclass(frozen=True)
class RepeatedInterval:
    """``estimate -/+ crit * se``: ``crit`` is the look's boundary, or its t-corrected value."""

    n: int
    estimate: float
    se: float
    crit: float
    low: float
    high: float
    method: str = "t"  # or EXACT_AGREEING (agreeing_repeated_interval), se 0


def repeated_interval(
    estimate: float, se: float, bound: float, *, df: float | None = None
) -> RepeatedInterval:
    """The repeated confidence interval at a look with boundary ``bound`` (J&T 2000 ch. 9).

    With ``df`` the critical value is ``t_df`` at the boundary's nominal level,
    ``student_t_ppf(Phi(bound), df)``.  ``n`` is ``df + 1`` when given, else 0.
    """
    if not (math.isfinite(estimate) and se >= 0.0 and math.isfinite(se)):
        raise ValueError(f"need a finite estimate and se >= 0, got {estimate!r}, {se!r}")
    if math.isnan(bound):
        raise ValueError("bound must not be NaN")
    crit = bound
    if df is not None and math.isfinite(bound):
        crit = -student_t_ppf(normal_sf(bound), df)
    half = crit * se if se > 0.0 else (math.inf if math.isinf(crit) else 0.0)
    n = int(df) + 1 if df is not None else 0
    return RepeatedInterval(n, estimate, se, crit, estimate - half, estimate + half)


def paired_repeated_interval(
    diffs: Sequence[float], bound: float, *, t_correction: bool = True
) -> RepeatedInterval:
    """The repeated interval from the per-task paired differences seen so far.

    Estimate: their mean; ``se``: sample sd (``n - 1``) over ``sqrt(n)``; critical value
    ``bound``, or with ``t_correction`` Student's t with ``n - 1`` degrees of freedom at the
    boundary's nominal level.  Fewer than two differences give ``se = 0`` (never decides).
    """
    xs = [float(x) for x in diffs]
    n = len(xs)
    if n == 0:
        raise ValueError("need at least one paired difference")
    if not all(math.isfinite(x) for x in xs):
        raise ValueError("paired differences must be finite")
    mean = math.fsum(xs) / n
    se = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1) / n) if n > 1 else 0.0
    df = n - 1 if t_correction and n > 1 else None
    out = repeated_interval(mean, se, bound, df=df)
    return RepeatedInterval(n, out.estimate, out.se, out.crit, out.low, out.high)


def agreeing_repeated_interval(table: Sequence[int], bound: float) -> RepeatedInterval:
    """The repeated interval of binary pairs whose differences all agree: every task helped,
    every task hurt, or none changed. ``table`` is the paired 2x2 table (both pass, only the
    candidate, only the control, neither).

    Their standard error is 0, so ``estimate -/+ crit * se`` has no width; the width comes
    from the counts instead.  The delta is ``P(only the candidate passes) - P(only the
    control passes)``; each share gets its exact (Clopper-Pearson) bound at half the look's
    one-sided level ``a = 1 - Phi(bound)``, whose closed forms at 0 and n of n tasks are
    ``share >= (a/2)^(1/n)`` when seen in every task and ``share <= 1 - (a/2)^(1/n)`` when
    seen in none; the difference of the bounds holds at ``1 - a`` on each side (Bonferroni),
    as the look's t interval does.  Eight tasks all helped pass superiority at a look whose
    level is 2.5%; four do not (a coin would give four heads in 1 of 16 suites).  ``se`` is
    reported as 0, ``method`` as ``EXACT_AGREEING``."""
    both, only_cand, only_ctrl, neither = (int(c) for c in table)
    n = both + only_cand + only_ctrl + neither
    if n < 1 or min(both, only_cand, only_ctrl, neither) < 0:
        raise ValueError(f"need a paired table of counts >= 0 with n >= 1, got {list(table)!r}")
    if only_cand not in (0, n) or only_ctrl not in (0, n):
        raise ValueError(f"the paired differences do not all agree: {list(table)!r}")
    if math.isnan(bound):
        raise ValueError("bound must not be NaN")
    r = (normal_sf(bound) / 2.0) ** (1.0 / n)  # 0 at an infinite bound: [-1, 1]

    def least(k: int) -> float:
        return r if k == n else 0.0

    def most(k: int) -> float:
        return 1.0 if k == n else 1.0 - r

    low, high = least(only_cand) - most(only_ctrl), most(only_cand) - least(only_ctrl)
    estimate = (only_cand - only_ctrl) / n
    return RepeatedInterval(n, estimate, 0.0, bound, low, high, EXACT_AGREEING)
