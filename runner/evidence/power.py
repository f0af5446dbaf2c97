"""Minimum detectable effects: the smallest true difference a run of this size would detect
with the given power. Pure, deterministic.

``paired_min_detectable_delta`` / ``mean_min_detectable_delta``
    Minimum detectable effects: the smallest true difference a run of this
    size would detect with the given power.  For pass/fail outcomes it is
    Connor's (1987) normal approximation to the power of the two-sided McNemar
    test, driven by the observed share of discordant pairs (the only pairs
    that carry information about the difference); for per-task mean
    differences (repeats) it is the usual normal-approximation
    ``(z_alpha + z_power) * sd / sqrt(n)``.  The first is solved by
    bisection, the second is closed-form; both are deterministic.
"""

from __future__ import annotations

import math
import statistics

from runner.evidence.stats import Z95


def _check_power(power: float, z_alpha: float) -> None:
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    if not (z_alpha >= 0.0 and math.isfinite(z_alpha)):
        raise ValueError(f"z_alpha must be finite and >= 0, got {z_alpha!r}")


def paired_min_detectable_delta(
    n: int, discordant: int, power: float = 0.80, z_alpha: float = Z95
) -> float | None:
    """Smallest ``|p1 - p2|`` a two-sided McNemar test on ``n`` pairs detects with ``power``.

    Connor (1987), Biometrics 43:207-211: with ``psi = discordant / n`` the observed share
    of discordant pairs (tasks on which the two arms disagree), the normal approximation
    to the power of the two-sided McNemar test at level ``2 * (1 - Phi(z_alpha))`` (5 %
    for the default ``z_alpha = Z95``) against a true difference ``delta`` is::

        power(delta) = Phi((delta * sqrt(n) - z_alpha * sqrt(psi)) / sqrt(psi - delta^2))

    for ``0 < delta <= psi`` (a difference of paired proportions cannot exceed the
    discordant share).  The result is the ``delta`` solving ``power(delta) == power``,
    found by bisection in the z scale (``statistics.NormalDist().inv_cdf(power)``) to
    about machine precision (at most 200 halvings); the returned value reaches
    ``power`` (it is the upper end of the final bracket).  ``power(delta)`` increases
    on ``0 < delta <= min(psi, sqrt(n * psi) / z_alpha)``; beyond that point (only
    possible when ``n < z_alpha^2``, i.e. ``n <= 3`` at 5 %) it decreases again and
    never exceeds ``Phi(-sqrt(z_alpha^2 - n)) < 1/2``, so the search is confined to the
    increasing part and the result is the smallest ``delta`` with that power (``0.0``
    for ``power <= Phi(-z_alpha)``, the limit of ``power(delta)`` as ``delta -> 0``).

    Returns ``None`` when ``n == 0`` or ``discordant == 0`` (the arms never disagree, so
    the run carries no information about a difference) and when no ``delta <= psi``
    reaches ``power`` (too few pairs).  Raises ``ValueError`` unless
    ``0 <= discordant <= n``, ``0 < power < 1`` and ``z_alpha`` is finite and ``>= 0``.
    """
    if n < 0 or discordant < 0 or discordant > n:
        raise ValueError(f"need 0 <= discordant <= n, got discordant={discordant}, n={n}")
    _check_power(power, z_alpha)
    if n == 0 or discordant == 0:
        return None
    psi = discordant / n
    sqrt_n, sqrt_psi = math.sqrt(n), math.sqrt(psi)
    target = statistics.NormalDist().inv_cdf(power)

    def z_of(delta: float) -> float:
        """The argument of Phi in power(delta), with its limits where psi == delta^2."""
        num = delta * sqrt_n - z_alpha * sqrt_psi
        var = psi - delta * delta
        if var <= 0.0:
            return math.copysign(math.inf, num) if num != 0.0 else 0.0
        return num / math.sqrt(var)

    lo = 0.0
    if z_of(lo) >= target:
        return 0.0
    hi = psi if z_alpha == 0.0 else min(psi, math.sqrt(n * psi) / z_alpha)
    if z_of(hi) < target:
        return None
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if z_of(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def mean_min_detectable_delta(
    n: int, sd: float, power: float = 0.80, z_alpha: float = Z95
) -> float | None:
    """Smallest mean per-task difference detectable with ``power`` (normal approximation).

    ``(z_alpha + z_power) * sd / sqrt(n)`` with ``z_power = NormalDist().inv_cdf(power)``:
    the difference a two-sided test at level ``2 * (1 - Phi(z_alpha))`` (5 % by default)
    on ``n`` tasks detects with probability ``power`` when the per-task differences (each
    a task's mean over its repeats, candidate minus control) have standard deviation
    ``sd`` across tasks.  This is the normal approximation: it ignores the Student-t
    tails, so for a handful of tasks the true minimum detectable effect is larger.

    Returns ``None`` when ``n < 2`` or ``sd == 0`` (no spread to estimate the noise
    from).  Raises ``ValueError`` if ``n`` or ``sd`` is negative, ``sd`` is not finite,
    ``power`` is outside ``(0, 1)`` or ``z_alpha`` is not finite and ``>= 0``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not (sd >= 0.0 and math.isfinite(sd)):
        raise ValueError(f"sd must be finite and >= 0, got {sd!r}")
    _check_power(power, z_alpha)
    if n < 2 or sd == 0.0:
        return None
    z_power = statistics.NormalDist().inv_cdf(power)
    return (z_alpha + z_power) * sd / math.sqrt(n)
