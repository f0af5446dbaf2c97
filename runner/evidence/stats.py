"""Pure-Python statistics for deltarun reports.

Everything here uses only the standard library (``math``, ``statistics`` and a
caller-supplied ``random.Random``), performs no I/O and touches no global random
state, so a report computed twice from the same trial records and the same seed
is bit-for-bit identical.  Each estimator and the reason it was chosen:

``wilson_interval``
    Wilson score interval for a pass rate.  Unlike the Wald interval
    ``p +/- z*sqrt(p(1-p)/n)`` it never collapses to a zero-width interval at 0 %
    or 100 % passes and keeps close to nominal coverage for the small ``n`` and
    extreme rates that agent suites produce.  ``n == 0`` gives the
    uninformative ``(0.0, 1.0)``.

``student_t_ppf`` / ``student_t_sf``
    Student's t quantile and survival function, implemented from the
    regularized incomplete beta function (the DiDonato-Morris continued fraction)
    and a bracketed Newton inversion in log-log coordinates.  They let the
    module build t intervals and p-values without SciPy.  Upper tails and the
    central mass ``P(0 < T < t)`` are each evaluated in the form that does not
    cancel, so quantiles are accurate to about 1e-12 relative.

``t_interval``
    Mean, sample standard deviation (``ddof=1``), standard error and the
    two-sided Student-t interval on the mean.  With fewer than two values the
    interval is undefined: the result then has ``defined=False``,
    ``sd = se = 0.0`` and ``low = high = mean`` (all finite, so it stays
    valid JSON) and reports print "n/a".  Identical values give a defined,
    zero-width interval at the mean.

``mcnemar_exact``
    Exact two-sided McNemar test on the discordant pair counts of a paired
    comparison (tasks that only the candidate solved versus tasks that only
    the control solved): a binomial test with ``p = 1/2``, computed with
    exact integer arithmetic.  Discordant counts in evals are often small, so
    the chi-square approximation is not used.

``sign_test_greater`` / ``sign_test_min_pairs``
    One-sided exact sign test (a binomial test with ``p = 1/2``, exact integers) for
    "more than chance" in one direction only, such as an arm that errs where its
    control did not; and the fewest discordant pairs at which that test can reach a
    given level at all, so a caller can tell "within chance" from "too few pairs to
    tell" (below that size every split, even all pairs one way, is "not significant").

``paired_bootstrap_interval``
    Percentile bootstrap of the mean per-task difference, resampling tasks
    (the unit that was sampled from the space of possible tasks) with the
    seeded generator it is given.  It makes no normality assumption about the
    paired differences, which are often bounded and lumpy (``{-1, 0, +1}``).

``clustered_se``
    Cluster-robust standard error of the overall mean when each task
    contributes several correlated observations (repeats), following Miller
    (2024), "Adding Error Bars to Evals".  Treating repeats as independent
    understates the error; clustering by task does not.  The small-sample
    convention is that of statsmodels' ``OLS(...).fit(cov_type="cluster")``
    with its default ``use_correction=True``, see the function docstring.

``newcombe_paired_interval``
    Newcombe's (1998) hybrid score ("square-and-add") interval for the
    difference of two paired pass rates, method 10 of that paper and the
    interval recommended for the paired 2x2 table by Fagerland, Lydersen and
    Laake (2017, ch. 8).  It combines the Wilson intervals of the two
    marginal rates with a continuity-corrected phi correlation, so it inherits
    Wilson's behaviour at 0 % and 100 % (never zero width, never outside
    ``[-1, 1]``) and, unlike the Wald interval for a paired difference, keeps
    close to nominal coverage with the few discordant tasks evals produce.

Minimum detectable effects are ``runner.evidence.power``; pass@k and pass^k are
``runner.evidence.passk``.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from runner.evidence.tdist import student_t_ppf, student_t_sf

__all__ = [
    "Z95",
    "MeanInterval",
    "clustered_se",
    "mcnemar_exact",
    "newcombe_paired_interval",
    "paired_bootstrap_interval",
    "sign_test_greater",
    "sign_test_min_pairs",
    "student_t_ppf",
    "student_t_sf",
    "t_interval",
    "wilson_interval",
]

Z95: float = 1.959963984540054
"""The 0.975 quantile of the standard normal distribution."""


# --------------------------------------------------------------------------- helpers


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _finite_floats(values: Sequence[float], what: str) -> list[float]:
    out = [float(v) for v in values]
    for v in out:
        if not math.isfinite(v):
            raise ValueError(f"{what} must be finite, got {v!r}")
    return out


# --------------------------------------------------------------------------- proportions


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``successes / n``.

    Returns ``(low, high)`` clamped to ``[0, 1]``; ``n == 0`` returns ``(0.0, 1.0)``.
    The bounds are exactly 0.0 when ``successes == 0`` and 1.0 when ``successes == n``.
    Raises ``ValueError`` unless ``0 <= successes <= n``.
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if not (z >= 0.0 and math.isfinite(z)):
        raise ValueError(f"z must be finite and >= 0, got {z!r}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2.0 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n)) / denom
    low = 0.0 if successes == 0 else min(1.0, max(0.0, center - half))
    high = 1.0 if successes == n else min(1.0, max(0.0, center + half))
    return low, high


def newcombe_paired_interval(
    both: int, only_first: int, only_second: int, neither: int, z: float = Z95
) -> tuple[float, float]:
    """Newcombe's hybrid score interval for the difference of two paired proportions.

    The four arguments are the cells of the paired 2x2 table: pairs (tasks) passed by
    both arms, by the first arm only, by the second arm only and by neither.  With
    ``n = both + only_first + only_second + neither``, ``p1 = (both + only_first) / n``,
    ``p2 = (both + only_second) / n`` and ``D = p1 - p2 = (only_first - only_second) / n``,
    this is method 10 of Newcombe (1998), Stat Med 17:2635-2650 (the "square-and-add"
    interval of Fagerland, Lydersen & Laake, 2017, ch. 8)::

        L = D - sqrt((p1 - l1)^2 - 2*phi*(p1 - l1)*(u2 - p2) + (u2 - p2)^2)
        U = D + sqrt((p2 - l2)^2 - 2*phi*(p2 - l2)*(u1 - p1) + (u1 - p1)^2)

    where ``(l1, u1)`` and ``(l2, u2)`` are the :func:`wilson_interval` bounds of ``p1``
    and ``p2`` for the same ``z``, and ``phi`` is the continuity-corrected correlation
    between the two arms: 0 when any margin (``both + only_first``,
    ``only_second + neither``, ``both + only_second``, ``only_first + neither``) is 0,
    otherwise ``C / sqrt(A)`` with ``A`` the product of the four margins,
    ``B = both * neither - only_first * only_second`` and ``C = B - n/2`` if ``B > n/2``,
    ``0`` if ``0 <= B <= n/2`` and ``B`` if ``B < 0``.  With ``phi == 0`` this is
    Newcombe's independent-samples hybrid score interval with ``n1 = n2 = n``.

    Returns ``(low, high)`` clamped to ``[-1, 1]`` (the square roots' arguments are floored
    at 0 against rounding).  ``n == 0`` returns the uninformative ``(-1.0, 1.0)``.  For
    every ``n >= 1`` and ``z > 0`` the interval has positive width and contains ``D``:
    ``low < D < high`` except at ``D == -1`` (then ``low == -1.0``) and ``D == 1`` (then
    ``high == 1.0``).  Swapping ``only_first`` and ``only_second`` negates and swaps the
    bounds.  Raises ``ValueError`` if a count is negative or ``z`` is not finite and
    ``>= 0``.
    """
    cells = (both, only_first, only_second, neither)
    if any(c < 0 for c in cells):
        raise ValueError(
            "paired counts must be >= 0, got "
            f"both={both}, only_first={only_first}, only_second={only_second}, "
            f"neither={neither}"
        )
    if not (z >= 0.0 and math.isfinite(z)):
        raise ValueError(f"z must be finite and >= 0, got {z!r}")
    n = both + only_first + only_second + neither
    if n == 0:
        return -1.0, 1.0
    first, second = both + only_first, both + only_second
    p1, p2 = first / n, second / n
    d = (only_first - only_second) / n
    l1, u1 = wilson_interval(first, n, z)
    l2, u2 = wilson_interval(second, n, z)
    phi = _paired_phi(both, only_first, only_second, neither)
    a_low, b_low = p1 - l1, u2 - p2
    a_high, b_high = p2 - l2, u1 - p1
    low = d - math.sqrt(max(0.0, a_low * a_low - 2.0 * phi * a_low * b_low + b_low * b_low))
    high = d + math.sqrt(max(0.0, a_high * a_high - 2.0 * phi * a_high * b_high + b_high * b_high))
    return max(-1.0, low), min(1.0, high)


def _paired_phi(both: int, only_first: int, only_second: int, neither: int) -> float:
    """The continuity-corrected phi of the paired 2x2 table (``newcombe_paired_interval``)."""
    n = both + only_first + only_second + neither
    margins = (both + only_first, only_second + neither, both + only_second, only_first + neither)
    if not all(m > 0 for m in margins):
        return 0.0
    b = both * neither - only_first * only_second  # exact integer
    # 2*B > n  <=>  B > n/2, compared in integers; C is then B - n/2 (exact in float).
    c = b - n / 2 if 2 * b > n else (0.0 if b >= 0 else float(b))
    return c / math.sqrt(math.prod(float(m) for m in margins))


# --------------------------------------------------------------------------- Student's t


# --------------------------------------------------------------------------- means


@dataclass(frozen=True)
class MeanInterval:
    """Mean with a Student-t confidence interval.

    ``defined`` is False when there are fewer than two values: then ``sd`` and ``se`` are
    0.0 and ``low == high == mean`` (finite placeholders so the record stays valid JSON);
    reports must print "n/a" for the interval in that case.
    """

    n: int
    mean: float
    sd: float
    se: float
    low: float
    high: float
    defined: bool


def t_interval(values: Sequence[float], confidence: float = 0.95) -> MeanInterval:
    """Mean, sample sd (``ddof=1``), ``se = sd / sqrt(n)`` and the two-sided t interval.

    The interval is ``mean -/+ t_{(1+confidence)/2, n-1} * se``.  ``n == 0`` raises
    ``ValueError`` (callers decide how to report an empty arm); ``n == 1`` returns
    ``defined=False`` (see :class:`MeanInterval`).  Identical values give ``sd == 0`` and a
    defined, zero-width interval at the mean.  The mean is correctly rounded.
    """
    _check_confidence(confidence)
    xs = _finite_floats(values, "values")
    n = len(xs)
    if n == 0:
        raise ValueError("t_interval needs at least one value")
    mean = float(statistics.mean(xs))
    if n == 1:
        return MeanInterval(n=1, mean=mean, sd=0.0, se=0.0, low=mean, high=mean, defined=False)
    sd = float(statistics.stdev(xs))
    se = sd / math.sqrt(n)
    if se == 0.0:
        return MeanInterval(n=n, mean=mean, sd=sd, se=0.0, low=mean, high=mean, defined=True)
    crit = student_t_ppf(0.5 + 0.5 * confidence, n - 1)
    half = crit * se
    return MeanInterval(
        n=n, mean=mean, sd=sd, se=se, low=mean - half, high=mean + half, defined=True
    )


# --------------------------------------------------------------------------- paired tests


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts ``b`` and ``c``.

    ``min(1, 2 * P[X <= min(b, c)])`` with ``X ~ Binomial(b + c, 1/2)``, computed with exact
    integer arithmetic and a single correctly rounded division.  ``b + c == 0`` gives 1.0.
    Matches ``statsmodels.stats.contingency_tables.mcnemar(table, exact=True).pvalue``.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    k = min(b, c)
    if n == 0 or 2 * k >= n:
        return 1.0
    term = 1  # C(n, 0)
    total = 1
    for i in range(k):
        term = term * (n - i) // (i + 1)
        total += term
    return min(1.0, (2 * total) / (1 << n))


def sign_test_greater(b: int, c: int) -> float:
    """One-sided exact sign test: ``P[X >= b]`` with ``X ~ Binomial(b + c, 1/2)``.

    The p-value that ``b`` discordant pairs going one way against ``c`` going the
    other is chance, when only "more than chance" is the question (an arm that
    errs where its control did not). Exact integers, one rounded division;
    ``b + c == 0`` gives 1.0. Matches
    ``scipy.stats.binomtest(b, b + c, 0.5, alternative="greater").pvalue``.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    term = 1  # C(n, n) counted down to C(n, b)
    total = 1
    for i in range(n, b, -1):  # C(n, i - 1) = C(n, i) * i / (n - i + 1)
        term = term * i // (n - i + 1)
        total += term
    return min(1.0, total / (1 << n))


def sign_test_min_pairs(alpha: float) -> int:
    """The fewest discordant pairs at which :func:`sign_test_greater` can fall below ``alpha``.

    The smallest ``n >= 1`` with ``sign_test_greater(n, 0) = 2**-n < alpha``: with fewer
    pairs even a split of all pairs one way has ``p >= alpha``, so the test cannot call
    any excess beyond chance and its "not significant" carries no information (5 for
    ``alpha = 0.05``: ``1/32 < 0.05 <= 1/16``). Raises ``ValueError`` unless
    ``0 < alpha < 1``.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    n = 1
    while sign_test_greater(n, 0) >= alpha:
        n += 1
    return n


def paired_bootstrap_interval(
    diffs: Sequence[float],
    rng: random.Random,
    resamples: int = 10000,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean of per-task paired differences.

    Each of ``resamples`` replicates draws ``len(diffs)`` tasks with replacement via
    ``rng.choices(diffs, k=len(diffs))`` and records their mean (``math.fsum / n``).  The
    bounds are the ``(1 - confidence)/2`` and ``(1 + confidence)/2`` quantiles of the
    replicate means with linear interpolation between order statistics (Hyndman-Fan type 7,
    NumPy's default).  The same seeded ``rng`` state always yields the same interval.
    """
    _check_confidence(confidence)
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    xs = _finite_floats(diffs, "diffs")
    n = len(xs)
    if n == 0:
        raise ValueError("paired_bootstrap_interval needs at least one difference")
    choices = rng.choices
    fsum = math.fsum
    means = sorted(fsum(choices(xs, k=n)) / n for _ in range(resamples))
    alpha = 1.0 - confidence
    return _quantile_sorted(means, 0.5 * alpha), _quantile_sorted(means, 1.0 - 0.5 * alpha)


def _quantile_sorted(sorted_values: Sequence[float], q: float) -> float:
    """Type-7 (linear interpolation) quantile of already sorted values."""
    h = (len(sorted_values) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    a = sorted_values[lo]
    return a + (h - lo) * (sorted_values[hi] - a)


def clustered_se(values_by_task: Sequence[Sequence[float]]) -> float:
    """Cluster-robust standard error of the grand mean of all observations, clustered by task.

    With ``N`` observations in ``G`` non-empty clusters, grand mean ``xbar`` and cluster
    residual sums ``S_g = sum_{i in g} (x_i - xbar)``::

        se^2 = G / (G - 1) * (N - 1) / (N - K) * sum_g S_g^2 / N^2,   K = 1

    i.e. the sandwich estimator of Miller (2024) with statsmodels' default small-sample
    correction (``OLS(x, ones).fit(cov_type="cluster", cov_kwds={"groups": g})``, where
    ``use_correction=True``); with one regressor ``(N - 1) / (N - K) == 1`` so the factor is
    ``G / (G - 1)``.  Empty clusters are ignored; fewer than two non-empty clusters raise
    ``ValueError`` because the estimator is then undefined.
    """
    clusters = [_finite_floats(c, "values") for c in values_by_task if len(c) > 0]
    g = len(clusters)
    if g < 2:
        raise ValueError("clustered_se needs at least two non-empty clusters")
    everything = [x for c in clusters for x in c]
    total_n = len(everything)
    xbar = math.fsum(everything) / total_n
    meat = math.fsum(math.fsum(x - xbar for x in c) ** 2 for c in clusters)
    var = g / (g - 1) * meat / (total_n * total_n)
    return math.sqrt(var)
