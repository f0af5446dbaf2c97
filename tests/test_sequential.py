"""Tests for runner.evidence.sequential against an independent computation (SciPy's
multivariate normal), published boundaries and simulated paired suites."""

from __future__ import annotations

import functools
import math
import random
import time

import numpy as np
import pytest
from scipy import stats as sps

from runner.evidence.repeated_interval import (
    RepeatedInterval,
    agreeing_repeated_interval,
    paired_repeated_interval,
    repeated_interval,
)
from runner.evidence.sequential import (
    Decision,
    Design,
    Spending,
    boundaries,
    crossing_probabilities,
    decide,
    linear,
    look,
    obrien_fleming,
    pocock,
    power,
)

SPENDINGS = list(Spending)
SPACINGS = [tuple(k / n for k in range(1, n + 1)) for n in range(2, 6)] + [(0.2, 0.45, 0.8, 1.0)]


def _cov(fractions: tuple[float, ...]) -> np.ndarray:
    """``Corr(Z_i, Z_j) = sqrt(t_i / t_j)`` for ``i <= j``: the canonical joint distribution."""
    t = np.asarray(fractions)
    return np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))


def _box(
    fractions: tuple[float, ...], lows: list[float], highs: list[float], drift: float = 0.0
) -> float:
    """``P(lows < Z < highs)`` under the canonical joint normal, by SciPy (Genz's algorithm)."""
    t = np.asarray(fractions)
    mean = drift * np.sqrt(t)
    if len(t) == 1:
        return float(sps.norm.cdf(highs[0] - mean[0]) - sps.norm.cdf(lows[0] - mean[0]))
    return float(
        sps.multivariate_normal.cdf(
            np.asarray(highs),
            mean=mean,
            cov=_cov(fractions),
            lower_limit=np.asarray(lows),
            maxpts=200_000 * len(t),
            abseps=1e-7,
            releps=1e-7,
            rng=np.random.default_rng(7),
        )
    )


def _first_exits_above(
    fractions: tuple[float, ...], bounds: tuple[float, ...], drift: float, two_sided: bool
) -> list[float]:
    """``P(continue at looks < k, Z_k >= c_k)`` per look, each an independent SciPy box."""
    out = []
    for k in range(1, len(fractions) + 1):
        lows = [(-c if two_sided else -np.inf) for c in bounds[: k - 1]] + [bounds[k - 1]]
        highs = [*bounds[: k - 1], np.inf]
        out.append(_box(fractions[:k], lows, highs, drift))
    return out


# ----------------------------------------------------------------------------- spending


@pytest.mark.parametrize("t", [0.0, 0.01, 0.2, 0.5, 0.77, 1.0])
@pytest.mark.parametrize("alpha", [0.025, 0.05, 0.1])
def test_spending_functions_match_their_formulas(alpha: float, t: float) -> None:
    z = sps.norm.isf(alpha / 2)
    expected_obf = 0.0 if t == 0 else 2 * sps.norm.sf(z / math.sqrt(t))
    assert math.isclose(obrien_fleming(alpha, t), expected_obf, rel_tol=1e-12, abs_tol=1e-300)
    assert math.isclose(pocock(alpha, t), alpha * math.log(1 + (math.e - 1) * t), rel_tol=1e-12)
    assert math.isclose(linear(alpha, t), alpha * t, rel_tol=1e-15)
    for f in (obrien_fleming, pocock, linear):
        assert math.isclose(f(alpha, 1.0), alpha, rel_tol=1e-12)


# ----------------------------------------------------------------------------- boundaries

# Lan-DeMets boundaries, one-sided alpha = 0.025, equally spaced looks.
# K = 3, O'Brien-Fleming type: 3.710, 2.511, 1.993 with cumulative alpha 0.0001, 0.0060,
# 0.0250, the "Efficacy boundary (z-value scale)" row of rpact's design summary in RPACT's
# ROeS 2025 slides (https://roes2025.rpact.com).
# K = 5: the values gsDesign prints for ``gsDesign(k = 5, test.type = 1, alpha = 0.025,
# sfu = sfLDOF)`` and ``sfu = sfLDPocock`` (rpact's "asOF" / "asP" agree); the O'Brien-
# Fleming-type row is also the familiar two-sided alpha = 0.05 Lan-DeMets row (each side
# at 0.025).  Quoted from those packages' output, not from a page stored here; the SciPy
# crossing probabilities below pin every c_k independently (to about 1e-5).
PUBLISHED = [
    (Spending.OBRIEN_FLEMING, 3, (3.710, 2.511, 1.993), 5e-4),
    (Spending.OBRIEN_FLEMING, 5, (4.8769, 3.3569, 2.6803, 2.2898, 2.0310), 2e-4),
    (Spending.POCOCK, 5, (2.4380, 2.4268, 2.4102, 2.3966, 2.3860), 2e-4),
]


@pytest.mark.parametrize(("spending", "looks", "expected", "tol"), PUBLISHED)
def test_published_lan_demets_boundaries(
    spending: Spending, looks: int, expected: tuple[float, ...], tol: float
) -> None:
    design = Design.equally_spaced(spending, looks)
    assert boundaries(design) == pytest.approx(expected, abs=tol)
    if looks == 3:
        spent = [design.spent(t) for t in design.looks]
        assert spent == pytest.approx((0.0001, 0.0060, 0.0250), abs=6e-5)


@pytest.mark.parametrize("fractions", SPACINGS)
@pytest.mark.parametrize("spending", SPENDINGS)
def test_one_sided_crossings_spend_alpha_by_scipy(
    spending: Spending, fractions: tuple[float, ...]
) -> None:
    design = Design(spending, 0.025, 1, fractions)
    bounds = boundaries(design)
    cumulative = np.cumsum(_first_exits_above(fractions, bounds, 0.0, False))
    expected = [design.spent(t) for t in fractions]
    assert cumulative == pytest.approx(expected, abs=1e-5)
    own = np.cumsum([up for up, _ in crossing_probabilities(bounds, fractions)])
    assert own == pytest.approx(expected, abs=1e-7)


@pytest.mark.parametrize("fractions", [SPACINGS[1], SPACINGS[-1]])
@pytest.mark.parametrize("spending", SPENDINGS)
def test_two_sided_crossings_spend_half_each_side_by_scipy(
    spending: Spending, fractions: tuple[float, ...]
) -> None:
    design = Design(spending, 0.05, 2, fractions)
    bounds = boundaries(design)
    upper = np.cumsum(_first_exits_above(fractions, bounds, 0.0, True))
    per_side = [_spent_at(spending, 0.025, t) for t in fractions]
    assert upper == pytest.approx(per_side, abs=1e-5)
    own = crossing_probabilities(bounds, fractions, two_sided=True)
    assert [up for up, _ in own] == pytest.approx([down for _, down in own], abs=1e-9)
    assert np.cumsum([up + down for up, down in own]) == pytest.approx(
        [2 * p for p in per_side], abs=1e-7
    )


def _spent_at(spending: Spending, alpha: float, t: float) -> float:
    return {"obrien-fleming": obrien_fleming, "pocock": pocock, "linear": linear}[spending](
        alpha, t
    )


@pytest.mark.parametrize("alpha", [0.01, 0.025, 0.05])
def test_a_single_look_is_the_fixed_sample_test(alpha: float) -> None:
    for spending in SPENDINGS:
        (one,) = boundaries(Design(spending, alpha))
        assert math.isclose(one, sps.norm.isf(alpha), rel_tol=1e-12)
        (two,) = boundaries(Design(spending, alpha, 2))
        assert math.isclose(two, sps.norm.isf(alpha / 2), rel_tol=1e-12)
        # A run that ends early with one look: the final look spends everything.
        (early,) = boundaries(Design(spending, alpha), [0.4], final=True)
        assert math.isclose(early, sps.norm.isf(alpha), rel_tol=1e-12)


def test_a_final_look_before_the_suite_is_spent_spends_the_rest() -> None:
    fractions = (0.25, 0.5, 0.7)
    design = Design.equally_spaced(Spending.OBRIEN_FLEMING, 4)
    bounds = boundaries(design, fractions, final=True)
    assert bounds[:2] == boundaries(design, fractions[:2])
    total = sum(_first_exits_above(fractions, bounds, 0.0, False))
    assert total == pytest.approx(0.025, abs=1e-5)
    assert bounds[2] < boundaries(design, fractions)[2]


def test_twenty_looks_are_fast() -> None:
    design = Design.equally_spaced(Spending.OBRIEN_FLEMING, 20)
    start = time.perf_counter()
    bounds = boundaries(design)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, elapsed  # about 0.2 s on one core
    assert all(math.isfinite(c) for c in bounds)
    total = math.fsum(up for up, _ in crossing_probabilities(bounds, design.looks))
    assert total == pytest.approx(0.025, abs=1e-6)


@pytest.mark.parametrize("spending", SPENDINGS)
@pytest.mark.parametrize("drift", [1.5, 2.8, 3.6])
def test_power_matches_scipy(spending: Spending, drift: float) -> None:
    fractions = (0.2, 0.45, 0.8, 1.0)
    design = Design(spending, 0.025, 1, fractions)
    bounds = boundaries(design)
    expected = sum(_first_exits_above(fractions, bounds, drift, True))
    assert power(design, drift) == pytest.approx(expected, abs=1e-5)
    open_below = sum(_first_exits_above(fractions, bounds, drift, False))
    own = crossing_probabilities(bounds, fractions, drift=drift)
    assert math.fsum(up for up, _ in own) == pytest.approx(open_below, abs=1e-5)


# ----------------------------------------------------------------------------- invalid input


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0.0}, "alpha must be in"),
        ({"alpha": 1.0}, "alpha must be in"),
        ({"alpha": -0.1}, "alpha must be in"),
        ({"alpha": math.nan}, "alpha must be in"),
        ({"sides": 3}, "sides must be 1 or 2"),
        ({"looks": (0.5, 0.5, 1.0)}, "strictly increasing"),
        ({"looks": (0.6, 0.3, 1.0)}, "strictly increasing"),
        ({"looks": (0.5, 1.2)}, r"in \(0, 1\]"),
        ({"looks": (0.0, 1.0)}, r"in \(0, 1\]"),
        ({"looks": ()}, "at least one"),
        ({"looks": (0.5, 0.9)}, "must end at fraction 1.0"),
    ],
)
def test_invalid_designs_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Design(Spending.POCOCK, **kwargs)  # type: ignore[arg-type]


def test_invalid_inputs_are_refused() -> None:
    design = Design.equally_spaced("pocock", 3)
    with pytest.raises(ValueError, match="strictly increasing"):
        boundaries(design, [0.3, 0.3])
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        boundaries(design, [0.5, 1.01])
    with pytest.raises(ValueError, match="alpha must be in"):
        obrien_fleming(1.5, 0.5)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        pocock(0.025, 1.5)
    with pytest.raises(ValueError):
        Design("haybittle", 0.025)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one look"):
        Design.equally_spaced("linear", 0)
    with pytest.raises(ValueError, match="one bound per fraction"):
        crossing_probabilities([2.0], [0.5, 1.0])
    with pytest.raises(ValueError, match="at least one paired difference"):
        paired_repeated_interval([], 2.0)
    with pytest.raises(ValueError, match="se >= 0"):
        repeated_interval(0.1, -1.0, 2.0)


# ----------------------------------------------------------------------------- intervals and looks


def test_repeated_interval_and_its_t_correction() -> None:
    z = repeated_interval(0.1, 0.05, 2.5)
    assert (z.low, z.high, z.crit) == pytest.approx((0.1 - 0.125, 0.1 + 0.125, 2.5))
    t = repeated_interval(0.1, 0.05, 2.5, df=19)
    assert t.crit == pytest.approx(sps.t.isf(sps.norm.sf(2.5), 19), rel=1e-10)
    assert t.n == 20
    diffs = [1.0, 0.0, 0.0, -1.0, 1.0, 1.0, 0.0, 1.0]
    got = paired_repeated_interval(diffs, 2.2)
    se = float(np.std(diffs, ddof=1) / math.sqrt(len(diffs)))
    crit = float(sps.t.isf(sps.norm.sf(2.2), len(diffs) - 1))
    assert (got.estimate, got.se, got.crit) == pytest.approx((np.mean(diffs), se, crit))
    plain = paired_repeated_interval(diffs, 2.2, t_correction=False)
    assert plain.low == pytest.approx(np.mean(diffs) - 2.2 * se)
    assert paired_repeated_interval([0.5], 2.2).se == 0.0


def test_look_decides_pass_fail_continue_and_undecided() -> None:
    design = Design.equally_spaced(Spending.OBRIEN_FLEMING, 5)
    c1 = boundaries(design)[0]
    first = look(design, [0.2], estimate=0.3, se=0.05, threshold=-0.1)
    assert first.bound == pytest.approx(c1) and first.number == 1
    assert first.decision is Decision.PASS  # 0.3 - 4.877 * 0.05 = 0.056 > -0.1
    assert look(design, [0.2], 0.1, 0.05, -0.1).decision is Decision.CONTINUE
    assert look(design, [0.2], -0.5, 0.05, -0.1).decision is Decision.FAIL
    last = look(design, [0.2, 0.4, 0.6, 0.8, 1.0], 0.0, 0.06, -0.1, final=True)
    assert last.decision is Decision.UNDECIDED
    assert last.interval.low < -0.1 < last.interval.high
    flat = RepeatedInterval(10, 0.0, 0.0, 2.0, 0.0, 0.0)
    assert decide(flat, -0.1, final=False) is Decision.CONTINUE  # a zero se never decides


# ----------------------------------------------------------------------------- simulation

SUITES = 4000
TASKS = 200
LOOKS = 5
MARGIN = 0.1  # non-inferiority: PASS when the lower bound is above -MARGIN


@functools.cache
def _simulate(
    spending: Spending, p_plus: float, p_minus: float, t_correction: bool, seed: int
) -> tuple[tuple[Decision, int, float, float], ...]:
    """Run the sequential non-inferiority gate on ``SUITES`` simulated paired suites of
    ``TASKS`` tasks with ``LOOKS`` equally spaced looks.  Each task's paired difference is
    +1 (only the candidate passed) with probability ``p_plus``, -1 with ``p_minus``, else 0.
    Returns (decision, looks taken, low, high) at the stop of each suite."""
    design = Design.equally_spaced(spending, LOOKS)
    bounds = boundaries(design)
    rng = random.Random(seed)
    out = []
    for _ in range(SUITES):
        weights = (p_plus, p_minus, 1.0 - p_plus - p_minus)
        diffs = rng.choices((1.0, -1.0, 0.0), weights, k=TASKS)
        for k in range(1, LOOKS + 1):
            seen = diffs[: k * TASKS // LOOKS]
            ri = paired_repeated_interval(seen, bounds[k - 1], t_correction=t_correction)
            decision = decide(ri, -MARGIN, final=k == LOOKS)
            if decision is not Decision.CONTINUE:
                break
        out.append((decision, k, ri.low, ri.high))
    return tuple(out)


def _mc_se(p: float) -> float:
    return math.sqrt(p * (1 - p) / SUITES)


@pytest.mark.parametrize(
    ("spending", "t_correction"),
    [
        (Spending.OBRIEN_FLEMING, True),
        (Spending.OBRIEN_FLEMING, False),
        (Spending.POCOCK, True),
    ],
)
def test_type_one_error_at_the_margin_stays_at_most_alpha(
    spending: Spending, t_correction: bool
) -> None:
    # True delta = -MARGIN exactly: 10% of tasks only the candidate passes, 20% only the control.
    runs = _simulate(spending, 0.1, 0.2, t_correction, 40)
    rate = sum(d is Decision.PASS for d, *_ in runs) / SUITES
    assert rate <= 0.025 + 3 * _mc_se(0.025), rate
    # A FAIL at the margin is the same boundary the other way: at most alpha too.
    fails = sum(d is Decision.FAIL for d, *_ in runs) / SUITES
    assert fails <= 0.025 + 3 * _mc_se(0.025), fails


def test_power_at_the_design_alternative_matches_scipy() -> None:
    # True delta 0 with 30% discordant tasks: Z drifts by (0 + MARGIN) / (sd / sqrt(TASKS)).
    p = 0.15
    drift = MARGIN / (math.sqrt(2 * p) / math.sqrt(TASKS))
    design = Design.equally_spaced(Spending.OBRIEN_FLEMING, LOOKS)
    bounds = boundaries(design)
    expected = sum(_first_exits_above(design.looks, bounds, drift, True))
    assert power(design, drift) == pytest.approx(expected, abs=1e-5)
    runs = _simulate(Spending.OBRIEN_FLEMING, p, p, False, 42)
    simulated = sum(d is Decision.PASS for d, *_ in runs) / SUITES
    assert abs(simulated - expected) <= 3 * _mc_se(expected), (simulated, expected)
    # It stops early when it passes: expected looks below the full five.
    assert np.mean([k for _, k, *_ in runs]) < LOOKS - 0.5


def test_repeated_interval_at_the_stop_covers_the_true_delta() -> None:
    # At the margin (the sharp case: delta = -MARGIN) and at the alternative (delta = 0), the
    # interval at whichever look the run stopped covers the truth: each one-sided bound at
    # 1 - alpha, the two-sided interval at 1 - 2 alpha (alpha = 0.025).
    for runs, delta in [
        (_simulate(Spending.OBRIEN_FLEMING, 0.1, 0.2, True, 40), -MARGIN),
        (_simulate(Spending.POCOCK, 0.1, 0.2, True, 40), -MARGIN),
        (_simulate(Spending.OBRIEN_FLEMING, 0.15, 0.15, False, 42), 0.0),
    ]:
        lower_ok = sum(low <= delta for _, _, low, _ in runs) / SUITES
        upper_ok = sum(delta <= high for _, _, _, high in runs) / SUITES
        both_ok = sum(low <= delta <= high for _, _, low, high in runs) / SUITES
        assert min(lower_ok, upper_ok) >= 0.975 - 3 * _mc_se(0.975), (lower_ok, upper_ok)
        assert both_ok >= 0.95 - 3 * _mc_se(0.95), both_ok


# ------------------------------------------------------------------------ agreeing pairs


@pytest.mark.parametrize("n", [1, 4, 8, 30])
@pytest.mark.parametrize("bound", [1.96, 2.5, 3.7])
def test_agreeing_pairs_read_exact_bounds_by_scipy(n: int, bound: float) -> None:
    # Each share's Clopper-Pearson bound at half the look's one-sided level, by scipy.
    half = float(sps.norm.sf(bound)) / 2.0

    def cp(k: int) -> tuple[float, float]:
        ci = sps.binomtest(k, n).proportion_ci(confidence_level=1.0 - 2.0 * half)
        return float(ci.low), float(ci.high)

    for table, cand, ctrl in [([0, n, 0, 0], n, 0), ([0, 0, n, 0], 0, n), ([n, 0, 0, 0], 0, 0)]:
        got = agreeing_repeated_interval(table, bound)
        (cand_low, cand_high), (ctrl_low, ctrl_high) = cp(cand), cp(ctrl)
        assert (got.low, got.high) == pytest.approx(
            (cand_low - ctrl_high, cand_high - ctrl_low), abs=1e-9
        )
        assert (got.n, got.se, got.crit, got.method) == (n, 0.0, bound, "exact-agreeing")
        assert got.estimate == (cand - ctrl) / n
    with pytest.raises(ValueError, match="do not all agree"):
        agreeing_repeated_interval([1, 2, 0, 1], bound)


def test_a_suite_every_task_of_which_is_helped_decides() -> None:
    design = Design.equally_spaced(Spending.OBRIEN_FLEMING, 3)
    last = boundaries(design)[-1]
    helped = agreeing_repeated_interval([0, 8, 0, 0], last)
    assert decide(helped, 0.0, final=True) is Decision.PASS
    assert decide(agreeing_repeated_interval([0, 0, 8, 0], last), -0.1, final=True) is (
        Decision.FAIL
    )
    assert decide(agreeing_repeated_interval([0, 4, 0, 0], last), 0.0, final=True) is (
        Decision.UNDECIDED
    )  # four heads in a row: 1 in 16 under a coin, not evidence at 2.5%
    # 60 tasks nobody's outcome changed on: not worse by more than 10 points
    same = agreeing_repeated_interval([30, 0, 0, 30], last)
    assert decide(same, -0.1, final=True) is Decision.PASS
    assert decide(same, 0.0, final=True) is Decision.UNDECIDED


@pytest.mark.parametrize("n", [4, 6, 8, 12, 20])
def test_the_exact_type_one_error_of_a_look_on_binary_pairs(n: int) -> None:
    # Brute force over every paired table of n binary tasks under the null of no difference
    # (each task helped or hurt with probability q, else unchanged), each decided by the
    # look itself (``look_at``): the chance that it passes superiority through the agreeing
    # pairs' exact interval, the only way a zero standard error can pass, stays below
    # alpha/2 however q is chosen.
    from runner.evidence.stopping import Target, look_at

    design = Design.equally_spaced(Spending.OBRIEN_FLEMING, 1)
    sup = Target("cand", "superiority", 0.0)
    for q in [i / 20 for i in range(1, 11)]:
        through_agreeing = 0.0
        for up in range(n + 1):
            for down in range(n + 1 - up):
                same = n - up - down
                diffs = [1.0] * up + [-1.0] * down + [0.0] * same
                taken = look_at(design, [n], n, [sup], {sup: diffs}, {sup: [0, up, down, same]})
                target = taken.targets[0]
                assert target.interval is not None
                if target.decision is Decision.PASS and target.interval.se == 0.0:
                    assert target.interval.method == "exact-agreeing"
                    p = math.comb(n, up) * math.comb(n - up, down) * q**up * q**down
                    through_agreeing += p * (1.0 - 2.0 * q) ** same
        assert through_agreeing <= 0.025 / 2, (n, q, through_agreeing)
