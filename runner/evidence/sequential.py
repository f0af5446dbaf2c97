"""Group-sequential looks at a paired delta: alpha spending, boundaries, repeated intervals. Pure.

Standard library only (``math``, ``statistics.NormalDist``); no I/O, no randomness.

The statistic.  At look ``k`` the suite has spent information fraction ``t_k`` (tasks
seen / tasks planned, ``0 < t_1 < ... < t_K <= 1``) and the paired delta (candidate minus
control, per task) has estimate ``d_k`` and standard error ``se_k``.  Against a
criterion threshold ``theta0`` the standardized statistic is ``Z_k = (d_k - theta0) / se_k``;
under ``delta = theta0`` the ``Z_k`` are jointly normal, mean 0, with
``Corr(Z_i, Z_j) = sqrt(t_i / t_j)`` (``i <= j``), the canonical joint distribution of
Jennison & Turnbull (2000), *Group Sequential Methods with Applications to Clinical
Trials*, ch. 3.  Under a true delta ``delta`` the mean of ``Z_k`` is ``drift * sqrt(t_k)``
with ``drift = (delta - theta0) / se_K`` (``se_K``: the standard error with the whole suite).

Alpha spending (Lan & DeMets 1983, Biometrika 70:659-663; J&T 2000 §7.2).  A spending
function ``alpha(t)`` rises from ``alpha(0) = 0`` to ``alpha(1) = alpha``;  look ``k`` may
spend ``alpha(t_k) - alpha(t_{k-1})``, so the looks need not be equally spaced nor planned
in number.  ``obrien_fleming``: ``2 - 2 Phi(z_{1-alpha/2} / sqrt(t))``; ``pocock``:
``alpha ln(1 + (e - 1) t)``; ``linear``: ``alpha t``.  In a one-sided design ``alpha`` is
the one-sided level, spent on the upper side alone; in a two-sided (symmetric) design
``alpha`` is the two-sided level and each side spends the function at ``alpha / 2``, the
convention of gsDesign (``test.type = 2``) and rpact (``sided = 2``).  (The form
``2 - 2 Phi(z_{1-alpha} / sqrt t)`` reaches ``2 alpha`` at ``t = 1``: it is not the
one-sided analogue.)

Boundaries.  ``c_k`` solves ``P_0(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k) =
alpha(t_k) - alpha(t_{k-1})`` with each side's ``alpha(t)`` (a two-sided design continues
on ``-c_j < Z_j < c_j``), by the recursive numerical integration of Armitage, McPherson &
Rowe (1969, JRSS A 132:235-244) in the form of J&T ch. 19: the density of ``Z_k`` on the
continuation region, carried look to look on J&T's grid (§19.2.1, ``6 m - 1`` points
before trimming, Simpson's rule; ``m = 18``, gsDesign's default ``r``), crossing masses
from the normal tail of each increment.  The last look: a look marked ``final`` (the suite
is spent, or the run ends early with ``t_K < 1``) spends the whole remaining
``alpha - alpha(t_{K-1})``, so the procedure's level is ``alpha`` however the looks fell;
at ``t_K = 1`` that is what the spending function gives anyway.  Information beyond the
plan (``t > 1``) is refused.

Decisions.  One-sided designs are what a gate uses (``alpha = 0.025``: the lower bound of a
95% interval).  At look ``k`` the repeated confidence interval (J&T 1989, JRSS B 51:305-361;
J&T 2000 ch. 9) is ``d_k -/+ c_k se_k``: PASS when its lower bound is above the threshold
(``Z_k >= c_k``), FAIL when its upper bound is below it (``Z_k <= -c_k``: the same boundary
in the other direction, so "decided either way" needs no futility design; the chance of a
wrong FAIL is at most ``alpha`` too), else CONTINUE, or UNDECIDED at the final look.  The
FAIL stops are non-binding: they only remove paths, so the PASS error stays at most
``alpha``.  Each one-sided bound holds at ``1 - alpha`` simultaneously over the looks, the
two-sided interval at ``1 - 2 alpha`` (``1 - alpha`` in a two-sided design), hence also at
whichever look the run stopped.

The standard error is the z approximation: the sample sd of the per-task differences over
``sqrt(n)``.  It ignores the error of the sd itself, which at small ``n`` makes ``Z_k``
heavier-tailed than normal and the looks anti-conservative (about ``t_{n-1}`` instead of
normal).  ``paired_repeated_interval`` corrects for it by default with the "significance
level approach" J&T (2000) describe for group-sequential t-tests: each look keeps the
nominal level ``1 - Phi(c_k)`` of its normal boundary and reads the critical value from
Student's t with ``n - 1`` degrees of freedom (wider at small ``n``; the normal boundary
as ``n`` grows).  A zero standard error (every difference equal, as when a candidate
fixes every task its control misses) has no spread to judge by; when every score is 0 or 1
(one run per task, or repeats that agree) the look then reads exact bounds on the counts
instead (``runner.evidence.repeated_interval.agreeing_repeated_interval``), so a suite
whose every task the candidate fixed can still stop; otherwise it never decides.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from statistics import NormalDist

from runner.evidence.repeated_interval import EXACT_AGREEING, RepeatedInterval, repeated_interval
from runner.evidence.tdist import normal_sf

__all__ = [
    "SPENDING_FUNCTIONS",
    "Decision",
    "Design",
    "Look",
    "Spending",
    "boundaries",
    "crossing_probabilities",
    "decide",
    "linear",
    "look",
    "obrien_fleming",
    "pocock",
    "power",
]

_NORMAL = NormalDist()
_GRID_M = 18  # J&T's m (gsDesign's r): 6m - 1 grid points before trimming
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _check_alpha(alpha: float) -> None:
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def _check_fraction(t: float) -> None:
    if not (0.0 <= t <= 1.0):
        raise ValueError(f"information fraction must be in [0, 1], got {t!r}")


def _check_fractions(fractions: Sequence[float]) -> tuple[float, ...]:
    ts = tuple(float(t) for t in fractions)
    if not ts:
        raise ValueError("need at least one information fraction")
    for t in ts:
        if not (0.0 < t <= 1.0):
            raise ValueError(f"information fractions must be in (0, 1], got {t!r}")
    for a, b in itertools.pairwise(ts):
        if not a < b:
            raise ValueError(
                f"information fractions must be strictly increasing, got {a!r} then {b!r}"
            )
    return ts


# --------------------------------------------------------------------------- spending


def obrien_fleming(alpha: float, t: float) -> float:
    """O'Brien-Fleming-type spending, ``2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))`` (Lan & DeMets 1983).

    ``alpha`` is the design's level (one-sided or two-sided, see the module docstring);
    ``obrien_fleming(alpha, 1) == alpha`` and ``obrien_fleming(alpha, 0) == 0``.
    """
    _check_alpha(alpha)
    _check_fraction(t)
    if t == 0.0:
        return 0.0
    z = -_NORMAL.inv_cdf(alpha / 2.0)
    return min(alpha, 2.0 * normal_sf(z / math.sqrt(t)))


def pocock(alpha: float, t: float) -> float:
    """Pocock-type spending, ``alpha ln(1 + (e - 1) t)`` (Lan & DeMets 1983; J&T 2000 §7.2.1)."""
    _check_alpha(alpha)
    _check_fraction(t)
    return min(alpha, alpha * math.log1p((math.e - 1.0) * t))


def linear(alpha: float, t: float) -> float:
    """Linear spending, ``alpha t`` (J&T §7.2.1's power family ``alpha t^rho``, ``rho = 1``)."""
    _check_alpha(alpha)
    _check_fraction(t)
    return alpha * t


class Spending(StrEnum):
    OBRIEN_FLEMING = "obrien-fleming"
    POCOCK = "pocock"
    LINEAR = "linear"


SPENDING_FUNCTIONS: dict[Spending, Callable[[float, float], float]] = {
    Spending.OBRIEN_FLEMING: obrien_fleming,
    Spending.POCOCK: pocock,
    Spending.LINEAR: linear,
}


@dataclass(frozen=True)
class Design:
    """A group-sequential design: its spending rule, level, sidedness and planned looks.

    ``looks`` are the planned information fractions (strictly increasing in ``(0, 1]``, the
    last 1.0); the boundaries are computed at the fractions actually reached, which may
    differ from the plan.  ``sides`` is 1 (what a gate uses) or 2 (symmetric).
    """

    spending: Spending
    alpha: float = 0.025
    sides: int = 1
    looks: tuple[float, ...] = (1.0,)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spending", Spending(self.spending))
        _check_alpha(self.alpha)
        if self.sides not in (1, 2):
            raise ValueError(f"sides must be 1 or 2, got {self.sides!r}")
        looks = _check_fractions(self.looks)
        if looks[-1] != 1.0:
            raise ValueError(f"the planned looks must end at fraction 1.0, got {looks[-1]!r}")
        object.__setattr__(self, "looks", looks)

    @classmethod
    def equally_spaced(
        cls, spending: Spending | str, looks: int, alpha: float = 0.025, sides: int = 1
    ) -> Design:
        """``looks`` planned looks at fractions ``1/looks, 2/looks, ..., 1``."""
        if looks < 1:
            raise ValueError(f"need at least one look, got {looks!r}")
        return cls(Spending(spending), alpha, sides, tuple(k / looks for k in range(1, looks + 1)))

    def spent(self, t: float) -> float:
        """The cumulative alpha the design may spend on each side by fraction ``t``:
        the spending function at ``alpha / sides``."""
        return SPENDING_FUNCTIONS[self.spending](self.alpha / self.sides, t)


# --------------------------------------------------------------------------- integration

# The density of Z at one look on its continuation region, as (points, weight * density).
_Grid = tuple[list[float], list[float]]


def _grid(mean: float, low: float, high: float, m: int) -> tuple[list[float], list[float]]:
    """J&T (2000) §19.2.1 points for ``N(mean, 1)`` trimmed to ``[low, high]``, with midpoints
    and Simpson weights: ``(z, w)``; empty when the interval misses the grid."""
    base = []
    for i in range(1, 6 * m):
        if i < m:
            x = -3.0 - 4.0 * math.log(m / i)
        elif i <= 5 * m:
            x = -3.0 + 3.0 * (i - m) / (2.0 * m)
        else:
            x = 3.0 + 4.0 * math.log(m / (6 * m - i))
        base.append(mean + x)
    lo, hi = max(low, base[0]), min(high, base[-1])
    if not lo < hi:
        return [], []
    ends = [lo, *(x for x in base if lo < x < hi), hi]
    z = [ends[0]]
    for a, b in itertools.pairwise(ends):
        z += [0.5 * (a + b), b]
    w = [0.0] * len(z)
    for j in range(0, len(z) - 2, 2):
        h = (z[j + 2] - z[j]) / 6.0
        w[j] += h
        w[j + 1] += 4.0 * h
        w[j + 2] += h
    return z, w


def _first_grid(t: float, drift: float, low: float, high: float, m: int) -> _Grid:
    mean = drift * math.sqrt(t)
    z, w = _grid(mean, low, high, m)
    return z, [
        wi * _INV_SQRT_2PI * math.exp(-0.5 * (zi - mean) ** 2) for zi, wi in zip(z, w, strict=True)
    ]


def _next_grid(
    prev: _Grid, t0: float, t1: float, drift: float, low: float, high: float, m: int
) -> _Grid:
    """The weighted density of ``Z`` at ``t1`` on ``[low, high]`` from ``prev`` at ``t0``: with
    ``u = t1 - t0``, ``h(z) = sum_i g_i phi((z sqrt(t1) - z_i sqrt(t0) - drift u) / sqrt(u))
    sqrt(t1 / u)`` (J&T 2000 §19.2)."""
    zs, gs = prev
    step = t1 - t0
    scale = math.sqrt(t1 / step)
    inv = 1.0 / math.sqrt(step)
    shifts = [zi * math.sqrt(t0) + drift * step for zi in zs]
    z, w = _grid(drift * math.sqrt(t1), low, high, m)
    root, exp = math.sqrt(t1), math.exp
    out = []
    for zk, wk in zip(z, w, strict=True):
        s = zk * root
        dens = sum(g * exp(-0.5 * ((s - b) * inv) ** 2) for g, b in zip(gs, shifts, strict=True))
        out.append(wk * dens * scale * _INV_SQRT_2PI)
    return z, out


def _mass_above(
    prev: _Grid, t0: float, t1: float, drift: float, c: float, *, below: bool = False
) -> tuple[float, float]:
    """``P(continued to t0, Z(t1) >= c)`` and its derivative in ``c`` (minus the density);
    with ``below``, ``P(continued to t0, Z(t1) <= c)`` (derivative not needed, returned as is)."""
    zs, gs = prev
    step = t1 - t0
    inv = 1.0 / math.sqrt(step)
    root0, root1 = math.sqrt(t0), math.sqrt(t1)
    mass = dens = 0.0
    for zi, g in zip(zs, gs, strict=True):
        x = (c * root1 - zi * root0 - drift * step) * inv
        mass += g * normal_sf(-x if below else x)
        dens += g * math.exp(-0.5 * x * x)
    return mass, -dens * _INV_SQRT_2PI * root1 * inv


def _solve(mass: Callable[[float], tuple[float, float]], target: float, start: float) -> float:
    """The ``c`` with ``mass(c) == target`` for a decreasing ``mass``: Newton inside a bracket."""
    lo, hi = -40.0, max(start, -39.0) + 1.0
    c = start
    for _ in range(200):
        value, slope = mass(c)
        if value > target:
            lo = c
        else:
            hi = c
        step_c = c - (value - target) / slope if slope < 0.0 else math.nan
        c_new = step_c if lo < step_c < hi else 0.5 * (lo + hi)
        if abs(c_new - c) < 1e-12 or hi - lo < 1e-12:
            return c_new
        c = c_new
    return c


# --------------------------------------------------------------------------- boundaries


def boundaries(
    design: Design, fractions: Sequence[float] | None = None, *, final: bool = False
) -> tuple[float, ...]:
    """The critical values ``c_1, ..., c_K`` of ``Z_k`` at ``fractions`` (default: the plan).

    Look ``k`` spends ``alpha(t_k) - alpha(t_{k-1})`` on the upper side (``Design.spent``);
    with ``final`` the last look spends all of the remaining alpha (module docstring).  A look
    with nothing to spend gets ``inf``.  Raises ``ValueError`` on fractions outside
    ``(0, 1]`` or not strictly increasing.
    """
    ts = _check_fractions(design.looks if fractions is None else fractions)
    spent = [design.spent(t) for t in ts]
    if final:
        spent[-1] = design.alpha / design.sides
    bounds: list[float] = []
    prev: _Grid = ([], [])
    for k, t in enumerate(ts):
        target = spent[k] - (spent[k - 1] if k else 0.0)
        c = -_NORMAL.inv_cdf(target) if target > 0.0 else math.inf
        if k and math.isfinite(c):
            c = _solve(functools.partial(_mass_above, prev, ts[k - 1], t, 0.0), target, c)
        bounds.append(c)
        low = -c if design.sides == 2 else -math.inf
        if k == 0:
            prev = _first_grid(t, 0.0, low, c, _GRID_M)
        else:
            prev = _next_grid(prev, ts[k - 1], t, 0.0, low, c, _GRID_M)
    return tuple(bounds)


def crossing_probabilities(
    bounds: Sequence[float],
    fractions: Sequence[float],
    *,
    drift: float = 0.0,
    two_sided: bool = False,
) -> tuple[tuple[float, float], ...]:
    """Per look, ``(P(first exit above c_k), P(first exit below -c_k))`` for ``Z_k`` with mean
    ``drift * sqrt(t_k)``.  With ``two_sided`` a path stops at ``-c_k`` too (the FAIL stop);
    without it the region below is open and the second number is 0."""
    ts = _check_fractions(fractions)
    if len(bounds) != len(ts):
        raise ValueError(f"need one bound per fraction, got {len(bounds)} and {len(ts)}")
    out: list[tuple[float, float]] = []
    prev: _Grid = ([], [])
    for k, (t, c) in enumerate(zip(ts, bounds, strict=True)):
        low = -c if two_sided else -math.inf
        if k == 0:
            up = normal_sf(c - drift * math.sqrt(t))
            down = normal_sf(c + drift * math.sqrt(t)) if two_sided else 0.0
            prev = _first_grid(t, drift, low, c, _GRID_M)
            out.append((up, down))
            continue
        up = _mass_above(prev, ts[k - 1], t, drift, c)[0] if math.isfinite(c) else 0.0
        down = 0.0
        if two_sided and math.isfinite(c):
            down = _mass_above(prev, ts[k - 1], t, drift, -c, below=True)[0]
        out.append((up, down))
        prev = _next_grid(prev, ts[k - 1], t, drift, low, c, _GRID_M)
    return tuple(out)


def power(design: Design, drift: float, fractions: Sequence[float] | None = None) -> float:
    """The chance the procedure decides PASS when ``Z_k`` has mean ``drift * sqrt(t_k)``, with
    the FAIL stops of :func:`decide` in place (both directions for ``sides == 1`` too)."""
    ts = design.looks if fractions is None else fractions
    bounds = boundaries(design, ts, final=True)
    return math.fsum(
        up for up, _ in crossing_probabilities(bounds, ts, drift=drift, two_sided=True)
    )


# --------------------------------------------------------------------------- decisions


class Decision(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    CONTINUE = "continue"
    UNDECIDED = "undecided"  # the final look, interval straddling the threshold


@dataclass(frozen=True)
class Look:
    """One look: its number (1-based), fraction, boundary, interval, threshold and decision."""

    number: int
    fraction: float
    bound: float
    interval: RepeatedInterval
    threshold: float
    decision: Decision


def decide(interval: RepeatedInterval, threshold: float, *, final: bool) -> Decision:
    """PASS when ``low > threshold``, FAIL when ``high < threshold``, else CONTINUE (UNDECIDED
    when ``final``).  A zero standard error never decides, but the exact interval of
    agreeing pairs (whose width never rests on it) does."""
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold!r}")
    if interval.se > 0.0 or interval.method == EXACT_AGREEING:
        if interval.low > threshold:
            return Decision.PASS
        if interval.high < threshold:
            return Decision.FAIL
    return Decision.UNDECIDED if final else Decision.CONTINUE


def look(
    design: Design,
    fractions: Sequence[float],
    estimate: float,
    se: float,
    threshold: float,
    *,
    final: bool = False,
    df: float | None = None,
) -> Look:
    """Decide at the last of ``fractions`` (the looks so far; their count is the look number).

    ``threshold``: ``margin`` for superiority (0 for plain superiority), ``-margin`` for
    non-inferiority.  ``final``: no look follows (the suite is spent or the run ends), so
    the remaining alpha is spent here and CONTINUE becomes UNDECIDED.  ``df``: see
    :func:`repeated_interval`.
    """
    bound = boundaries(design, fractions, final=final)[-1]
    interval = repeated_interval(estimate, se, bound, df=df)
    decision = decide(interval, threshold, final=final)
    return Look(len(fractions), float(fractions[-1]), bound, interval, threshold, decision)
