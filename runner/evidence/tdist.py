"""Student's t distribution without SciPy: survival function and quantile; and its limit
at infinite degrees of freedom, the normal's upper tail. Pure.

Implemented from the regularized incomplete beta function (the DiDonato-Morris
continued fraction) and a bracketed Newton inversion in log-log coordinates.
Upper tails and the central mass P(0 < T < t) are each evaluated in the form
that does not cancel, so quantiles are accurate to about 1e-12 relative
(checked against SciPy in tests/test_stats.py)."""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable

# Continued-fraction / root-finding controls.
_CF_EPS = 3e-16


_CF_MAX_ITER = 100_000


_NEWTON_MAX_ITER = 200


_LOG_TOL = 4e-16


_U_LIMIT = math.log(sys.float_info.max)  # |log t| beyond this is not representable


def _check_df(df: float) -> None:
    if not (df > 0.0 and math.isfinite(df)):
        raise ValueError(f"degrees of freedom must be finite and > 0, got {df!r}")


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


def normal_sf(x: float) -> float:
    """``1 - Phi(x)`` without cancellation in the upper tail."""
    return 0.5 * math.erfc(x / math.sqrt(2.0))


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


@functools.lru_cache(maxsize=4096)
def student_t_ppf(p: float, df: float) -> float:
    """Inverse CDF (quantile function) of Student's t with ``df`` degrees of freedom.

    Kept per (p, df): a gate asks for the same few quantiles at every look (its
    boundaries, at the pair counts it reaches), and each costs a Newton solve.

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
