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

``pass_at_k`` / ``pass_hat_k``
    The unbiased pass@k estimator of Chen et al. (2021), the probability that
    at least one of ``k`` samples drawn without replacement from ``n``
    attempts with ``c`` passes passes, and pass^k, the probability that all
    ``k`` pass (a reliability measure).
"""

from __future__ import annotations

import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "Z95",
    "MeanInterval",
    "clustered_se",
    "mcnemar_exact",
    "paired_bootstrap_interval",
    "pass_at_k",
    "pass_hat_k",
    "student_t_ppf",
    "student_t_sf",
    "t_interval",
    "wilson_interval",
]

Z95: float = 1.959963984540054
"""The 0.975 quantile of the standard normal distribution."""

# Continued-fraction / root-finding controls.
_CF_EPS = 3e-16
_CF_MAX_ITER = 100_000
_NEWTON_MAX_ITER = 200
_LOG_TOL = 4e-16
_U_LIMIT = math.log(sys.float_info.max)  # |log t| beyond this is not representable


# --------------------------------------------------------------------------- helpers


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _check_df(df: float) -> None:
    if not (df > 0.0 and math.isfinite(df)):
        raise ValueError(f"degrees of freedom must be finite and > 0, got {df!r}")


def _finite_floats(values: Sequence[float], what: str) -> list[float]:
    out = [float(v) for v in values]
    for v in out:
        if not math.isfinite(v):
            raise ValueError(f"{what} must be finite, got {v!r}")
    return out


def _lgamma_stirling_corr(z: float) -> float:
    """Remainder ``lgamma(z) - ((z - 1/2) log z - z + log(2 pi) / 2)`` for ``z >= 10``."""
    w = 1.0 / (z * z)
    series = -691.0 / 360360.0 + w / 156.0
    series = 1.0 / 1188.0 + w * series
    series = -1.0 / 1680.0 + w * series
    series = 1.0 / 1260.0 + w * series
    series = -1.0 / 360.0 + w * series
    series = 1.0 / 12.0 + w * series
    return series / z


def _log_beta(a: float, b: float) -> float:
    """``log B(a, b)``; avoids the cancellation of three large lgammas when one argument is big."""
    small, big = (a, b) if a <= b else (b, a)
    if big < 10.0:
        return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    # lgamma(big + small) - lgamma(big) from Stirling's series, written without cancellation.
    diff = (
        (big - 0.5) * math.log1p(small / big)
        + small * math.log(big + small)
        - small
        + _lgamma_stirling_corr(big + small)
        - _lgamma_stirling_corr(big)
    )
    return math.lgamma(small) - diff


def _bfrac(a: float, b: float, x: float, y: float, lam: float) -> float:
    """Continued fraction ``r`` with ``I_x(a, b) = x^a y^b / B(a, b) * r``.

    This is BFRAC of DiDonato & Morris (1992, ACM TOMS 708), an equivalence transform of
    the classical incomplete-beta continued fraction whose terms use ``lam = a - (a + b) x``
    (computed by the caller from whichever of ``x`` and ``y = 1 - x`` is accurate).  The
    textbook Lentz form computes ``1 - (a + b) x / (a + 1)`` instead and loses about ``a``
    ulps to cancellation when ``a`` is large, i.e. for Student's t with many degrees of
    freedom.  Requires ``lam >= 0``, where it converges in a few dozen steps.
    """
    c = lam + 1.0
    c0 = b / a
    c1 = 1.0 / a + 1.0
    yp1 = y + 1.0
    p = 1.0
    s = a + 1.0
    an, bn, anp1, bnp1 = 0.0, 1.0, 1.0, c / c1
    r = c1 / c
    for i in range(1, _CF_MAX_ITER + 1):
        n = float(i)
        t = n / a
        w = n * (b - n) * x
        e = a / s
        alpha = p * (p + c0) * e * e * (w * x)
        e = (t + 1.0) / (c1 + t + t)
        beta = n + w / s + e * (c + n * yp1)
        p = t + 1.0
        s += 2.0
        an, anp1 = anp1, alpha * an + beta * anp1
        bn, bnp1 = bnp1, alpha * bn + beta * bnp1
        r0 = r
        r = anp1 / bnp1
        if abs(r - r0) <= _CF_EPS * r:
            return r
        an /= bnp1
        bn /= bnp1
        anp1 = r
        bnp1 = 1.0
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b})")


def _log_betainc(a: float, b: float, x: float, y: float, log_x: float, log_y: float) -> float:
    """``log I_x(a, b)``, the log of the regularized incomplete beta function.

    The caller passes both ``x`` and ``y = 1 - x`` (and their logs), each computed without
    cancellation.  Below the mean ``a / (a + b)`` the continued fraction gives ``I_x(a, b)``
    directly; above it the symmetry ``I_x(a, b) = 1 - I_y(b, a)`` is used, which is accurate
    whenever the result is not tiny - the callers below arrange for that.
    """
    if log_x == -math.inf:
        return -math.inf
    if log_y == -math.inf:
        return 0.0
    log_front = a * log_x + b * log_y - _log_beta(a, b)
    lam = (a + b) * y - b if a > b else a - (a + b) * x
    if lam >= 0.0:
        return log_front + math.log(_bfrac(a, b, x, y, lam))
    other = math.exp(log_front) * _bfrac(b, a, y, x, -lam)
    return math.log1p(-other) if other < 1.0 else -math.inf


def _t_coords(t: float, df: float) -> tuple[float, float, float, float]:
    """``(x, y, log x, log y)`` with ``x = df / (df + t^2)`` and ``y = t^2 / (df + t^2)``, t > 0."""
    r = t * t / df
    if 1e-300 < r < 1e300:
        log1p_r = math.log1p(r)
        log_x = -log1p_r
        log_y = -math.log1p(1.0 / r) if r > 1.0 else math.log(r) - log1p_r
        return 1.0 / (1.0 + r), r / (1.0 + r), log_x, log_y
    # t^2 / df under- or overflows: work with logarithms only.
    log_r = 2.0 * math.log(t) - math.log(df)
    if log_r > 0.0:
        log_x = -(log_r + math.log1p(math.exp(-log_r)))
        log_y = -math.log1p(math.exp(-log_r))
    else:
        log_x = -math.log1p(math.exp(log_r))
        log_y = log_r + log_x
    return math.exp(log_x), math.exp(log_y), log_x, log_y


def _log_t_tail(t: float, df: float) -> float:
    """``log P(T > t)`` for ``t > 0``; relatively accurate in the far tail."""
    x, y, log_x, log_y = _t_coords(t, df)
    return math.log(0.5) + _log_betainc(0.5 * df, 0.5, x, y, log_x, log_y)


def _log_t_center(t: float, df: float) -> float:
    """``log P(0 < T < t)`` for ``t > 0``; relatively accurate for tiny ``t``."""
    x, y, log_x, log_y = _t_coords(t, df)
    return math.log(0.5) + _log_betainc(0.5, 0.5 * df, y, x, log_y, log_x)


def _log_t_pdf(t: float, df: float) -> float:
    """``log f(t)`` of Student's t density for ``t > 0``."""
    _, _, log_x, _ = _t_coords(t, df)
    return 0.5 * (df + 1.0) * log_x - 0.5 * math.log(df) - _log_beta(0.5, 0.5 * df)


def _solve_monotone_log(
    func: Callable[[float], tuple[float, float]],
    target_log: float,
    increasing: bool,
) -> float:
    """Find ``u`` with ``func(u)[0] == target_log`` by bracketed Newton iteration.

    ``func(u)`` returns ``(log g(e^u), d log g / du)`` for a monotone ``g``.  In log-log
    coordinates Student's t tails and centre are nearly linear, so Newton converges in a
    handful of steps; bisection keeps every iterate inside a sign-change bracket.
    """

    def resid(u: float) -> tuple[float, float]:
        val, der = func(u)
        r = val - target_log
        return (r if increasing else -r), (der if increasing else -der)

    # Bracket a sign change by exponential steps away from u = 0 (t = 1), clipped to the
    # range of representable t; a root beyond it means the quantile is 0 or infinite.
    r0, _ = resid(0.0)
    if r0 == 0.0:
        return 0.0
    direction = -1.0 if r0 > 0.0 else 1.0
    prev = 0.0
    step = 1.0
    while True:
        u_next = min(max(direction * step, -_U_LIMIT), _U_LIMIT)
        r_next, _ = resid(u_next)
        if r_next == 0.0:
            return u_next
        if (r_next > 0.0) != (r0 > 0.0):
            break
        if abs(u_next) >= _U_LIMIT:
            return direction * math.inf
        prev = u_next
        step *= 2.0
    lo, hi = (prev, u_next) if direction > 0.0 else (u_next, prev)

    u = 0.5 * (lo + hi)
    for _ in range(_NEWTON_MAX_ITER):
        r, dr = resid(u)
        if r == 0.0:
            return u
        if r < 0.0:
            lo = u
        else:
            hi = u
        new_u = u - r / dr if dr > 0.0 and math.isfinite(dr) else math.nan
        if not (lo < new_u < hi):
            new_u = 0.5 * (lo + hi)
        tol = _LOG_TOL * max(1.0, abs(u))
        if abs(new_u - u) <= tol or hi - lo <= tol:
            return new_u
        u = new_u
    return u


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


# --------------------------------------------------------------------------- Student's t


def student_t_sf(t: float, df: float) -> float:
    """Survival function ``P(T > t)`` of Student's t with ``df`` degrees of freedom.

    ``df`` may be any finite positive real.  The upper tail is computed as
    ``I_x(df/2, 1/2) / 2`` with ``x = df / (df + t^2)``, keeping relative accuracy far into
    the tail.  A two-sided p-value for a statistic ``t`` is ``2 * student_t_sf(abs(t), df)``.
    """
    _check_df(df)
    if math.isnan(t):
        raise ValueError("t must not be NaN")
    if t == 0.0:
        return 0.5
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = math.exp(_log_t_tail(abs(t), df))
    return tail if t > 0 else 1.0 - tail


def student_t_ppf(p: float, df: float) -> float:
    """Inverse CDF (quantile function) of Student's t with ``df`` degrees of freedom.

    ``p`` in ``(0, 1)``; ``p == 0`` and ``p == 1`` give ``-inf`` and ``+inf``.  For tail
    probabilities below 1/4 the equation ``P(T > t) = q`` is solved, otherwise the central
    equation ``P(0 < T < t) = |p - 1/2|`` (whose right side is exact in floating point), both
    by bracketed Newton iteration on ``log t``.  Accurate to about 1e-12 relative.
    """
    _check_df(df)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    if p == 0.0:
        return -math.inf
    if p == 1.0:
        return math.inf
    if p == 0.5:
        return 0.0
    sign = 1.0 if p > 0.5 else -1.0
    tail = 1.0 - p if p > 0.5 else p  # exact (Sterbenz) for p >= 1/2

    if tail < 0.25:

        def tail_fn(u: float) -> tuple[float, float]:
            t = math.exp(u)
            log_g = _log_t_tail(t, df)
            return log_g, -math.exp(u + _log_t_pdf(t, df) - log_g)

        u = _solve_monotone_log(tail_fn, math.log(tail), increasing=False)
    else:
        center = abs(p - 0.5)  # exact for 1/4 <= p <= 3/4

        def center_fn(u: float) -> tuple[float, float]:
            t = math.exp(u)
            log_g = _log_t_center(t, df)
            return log_g, math.exp(u + _log_t_pdf(t, df) - log_g)

        u = _solve_monotone_log(center_fn, math.log(center), increasing=True)
    return sign * math.exp(u)


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


# --------------------------------------------------------------------------- pass@k


def _check_nck(n: int, c: int, k: int) -> None:
    if n < 0 or c < 0 or c > n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if k < 1 or k > n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator ``1 - C(n - c, k) / C(n, k)`` (Chen et al., 2021).

    ``n`` attempts of which ``c`` passed; the probability that at least one of ``k``
    attempts drawn without replacement passed.  Uses the product form
    ``1 - prod_{i=n-c+1}^{n} (1 - k / i)`` evaluated as ``-expm1(sum log1p(-k / i))`` so it
    keeps relative accuracy at both ends.  Requires ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    _check_nck(n, c, k)
    if n - c < k:
        return 1.0
    return -math.expm1(math.fsum(math.log1p(-k / i) for i in range(n - c + 1, n + 1)))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: the probability that ``k`` attempts drawn without replacement all passed.

    ``C(c, k) / C(n, k)`` (0 when ``c < k``), computed as an exact integer ratio with one
    correctly rounded division.  Requires ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    _check_nck(n, c, k)
    if c < k:
        return 0.0
    return math.comb(c, k) / math.comb(n, k)
