"""Tests for runner.evidence.stats against independent implementations (SciPy, statsmodels, brute force)."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import pytest
import statsmodels.api as sm
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from runner.evidence.passk import pass_at_k, pass_hat_k
from runner.evidence.power import mean_min_detectable_delta, paired_min_detectable_delta
from runner.evidence.stats import (
    Z95,
    MeanInterval,
    clustered_se,
    mcnemar_exact,
    newcombe_paired_interval,
    paired_bootstrap_interval,
    sign_test_greater,
    sign_test_min_pairs,
    student_t_ppf,
    student_t_sf,
    t_interval,
    wilson_interval,
)

# database=None: no .hypothesis/ directory is written into the repository.
PROPERTY = settings(max_examples=200, deadline=None, derandomize=True, database=None)

TOL = 1e-9


def close(actual: float, expected: float, rel: float = TOL, abs_: float = TOL) -> bool:
    return math.isclose(actual, expected, rel_tol=rel, abs_tol=abs_)


# ----------------------------------------------------------------------------- Z95


def test_z95_is_the_normal_0975_quantile() -> None:
    assert math.isclose(Z95, float(sps.norm.ppf(0.975)), rel_tol=1e-15, abs_tol=0.0)


# ----------------------------------------------------------------------------- Wilson


def _sm_wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    alpha = 2.0 * float(sps.norm.sf(z))
    low, high = proportion_confint(successes, n, alpha=alpha, method="wilson")
    return float(low), float(high)


@PROPERTY
@given(data=st.data(), n=st.integers(min_value=1, max_value=10_000))
def test_wilson_matches_statsmodels(data: st.DataObject, n: int) -> None:
    successes = data.draw(st.integers(min_value=0, max_value=n))
    low, high = wilson_interval(successes, n)
    exp_low, exp_high = _sm_wilson(successes, n)
    assert close(low, exp_low, rel=0.0)
    assert close(high, exp_high, rel=0.0)
    assert 0.0 <= low <= successes / n <= high <= 1.0


@PROPERTY
@given(
    data=st.data(),
    n=st.integers(min_value=1, max_value=500),
    z=st.floats(min_value=0.1, max_value=4.0),
)
def test_wilson_other_z_matches_statsmodels(data: st.DataObject, n: int, z: float) -> None:
    successes = data.draw(st.integers(min_value=0, max_value=n))
    low, high = wilson_interval(successes, n, z=z)
    exp_low, exp_high = _sm_wilson(successes, n, z)
    assert close(low, exp_low, rel=0.0)
    assert close(high, exp_high, rel=0.0)


def test_wilson_empty_is_uninformative() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("n", [1, 2, 7, 100, 10_000])
def test_wilson_all_pass_and_all_fail(n: int) -> None:
    low, high = wilson_interval(n, n)
    assert high == 1.0
    assert close(low, _sm_wilson(n, n)[0], rel=0.0)
    assert low < 1.0
    low, high = wilson_interval(0, n)
    assert low == 0.0
    assert close(high, _sm_wilson(0, n)[1], rel=0.0)
    assert high > 0.0


def test_wilson_large_counts() -> None:
    low, high = wilson_interval(5_123, 10_000)
    exp_low, exp_high = _sm_wilson(5_123, 10_000)
    assert close(low, exp_low, rel=0.0) and close(high, exp_high, rel=0.0)
    assert high - low == pytest.approx(2 * Z95 * math.sqrt(0.5123 * 0.4877 / 10_000), rel=1e-3)


def test_wilson_known_value() -> None:
    # 8/10 passes: textbook Wilson 95% interval (0.4902, 0.9433).
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4901624, abs=1e-6)
    assert high == pytest.approx(0.9433178, abs=1e-6)


@pytest.mark.parametrize(("successes", "n"), [(-1, 5), (6, 5), (1, -1), (0, -1)])
def test_wilson_rejects_invalid_counts(successes: int, n: int) -> None:
    with pytest.raises(ValueError):
        wilson_interval(successes, n)


# ----------------------------------------------------------------------------- Newcombe paired


def _tables(n: int) -> list[tuple[int, int, int, int]]:
    """Every paired 2x2 table (both, only_first, only_second, neither) with n pairs."""
    return [
        (a, b, c, n - a - b - c)
        for a in range(n + 1)
        for b in range(n + 1 - a)
        for c in range(n + 1 - a - b)
    ]


def _phi_is_zero(a: int, b: int, c: int, d: int) -> bool:
    """Newcombe's corrected phi vanishes: a zero margin, or 0 <= ad - bc <= n/2."""
    n = a + b + c + d
    if 0 in (a + b, c + d, a + c, b + d):
        return True
    return 0 <= 2 * (a * d - b * c) <= n


def _sm_newcombe_indep(a: int, b: int, c: int, d: int) -> tuple[float, float]:
    n = a + b + c + d
    low, high = confint_proportions_2indep(a + b, n, a + c, n, method="newcomb", compare="diff")
    return float(low), float(high)


def test_newcombe_paired_fagerland_worked_example() -> None:
    # Fagerland, Lydersen & Laake (2017), ch. 8: complete response before/after
    # consolidation (Cavo et al., 2012), table [[59, 6], [16, 80]].  Expected output of
    # the R package contingencytables (tests/testthat/test-ch8.R):
    # "estimate = -0.0621 (95% CI -0.1186 to -0.0046)".
    low, high = newcombe_paired_interval(59, 6, 16, 80)
    assert round((6 - 16) / 161, 4) == -0.0621
    assert round(low, 4) == -0.1186
    assert round(high, 4) == -0.0046


def test_newcombe_paired_equals_independent_hybrid_score_when_phi_is_zero() -> None:
    rng = random.Random(1998)
    grid = [t for n in range(1, 17) for t in _tables(n)]
    grid += [
        (rng.randint(0, 60), rng.randint(0, 60), rng.randint(0, 60), rng.randint(0, 60))
        for _ in range(4000)
    ]
    found = [t for t in grid if sum(t) > 0 and _phi_is_zero(*t)]
    # Both kinds of phi == 0 occur: a zero margin, and 0 <= ad - bc <= n/2 without one.
    interior = [t for t in found if 0 not in (t[0] + t[1], t[2] + t[3], t[0] + t[2], t[1] + t[3])]
    assert len(found) > 500
    assert len(interior) > 50
    assert any(t[0] * t[3] - t[1] * t[2] > 0 for t in interior)
    for table in found:
        low, high = newcombe_paired_interval(*table)
        exp_low, exp_high = _sm_newcombe_indep(*table)
        assert close(low, exp_low, rel=0.0), table
        assert close(high, exp_high, rel=0.0), table


def test_newcombe_paired_correlation_narrows_the_interval() -> None:
    # Positively correlated arms (B > n/2): narrower than the independent-samples interval.
    low, high = newcombe_paired_interval(59, 6, 16, 80)
    exp_low, exp_high = _sm_newcombe_indep(59, 6, 16, 80)
    assert exp_low < low < high < exp_high
    # Negatively correlated arms (B < 0): wider.
    low, high = newcombe_paired_interval(2, 20, 15, 3)
    exp_low, exp_high = _sm_newcombe_indep(2, 20, 15, 3)
    assert low < exp_low < exp_high < high


@pytest.mark.parametrize("n", range(1, 13))
def test_newcombe_paired_properties_every_small_table(n: int) -> None:
    for table in _tables(n):
        a, b, c, d = table
        est = (b - c) / n
        low, high = newcombe_paired_interval(*table)
        assert low >= -1.0 and high <= 1.0, table
        assert low < high, table  # never zero width
        assert low <= est <= high, table
        if abs(est) < 1.0:
            assert low < est < high, table
        assert newcombe_paired_interval(a, c, b, d) == (-high, -low), table


@PROPERTY
@given(cells=st.lists(st.integers(min_value=0, max_value=250_000), min_size=4, max_size=4))
def test_newcombe_paired_properties_large_tables(cells: list[int]) -> None:
    a, b, c, d = cells
    n = a + b + c + d
    if n == 0:
        return
    est = (b - c) / n
    low, high = newcombe_paired_interval(a, b, c, d)
    assert -1.0 <= low < high <= 1.0
    assert low <= est <= high
    if abs(est) < 1.0:
        assert low < est < high
    assert newcombe_paired_interval(a, c, b, d) == (-high, -low)
    if _phi_is_zero(a, b, c, d):
        exp_low, exp_high = _sm_newcombe_indep(a, b, c, d)
        assert close(low, exp_low, rel=0.0) and close(high, exp_high, rel=0.0)


def test_newcombe_paired_extreme_tables() -> None:
    assert newcombe_paired_interval(0, 0, 0, 0) == (-1.0, 1.0)
    low, high = newcombe_paired_interval(0, 0, 7, 0)  # D = -1
    assert low == -1.0 < high
    low, high = newcombe_paired_interval(0, 7, 0, 0)  # D = +1
    assert low < high == 1.0
    low, high = newcombe_paired_interval(5, 0, 0, 0)  # D = 0, all concordant
    assert low < 0.0 < high


def test_newcombe_paired_other_z() -> None:
    # phi == 0 here (B = 1*9 - 3*2 = 3 <= n/2), so the 99% interval is statsmodels' at
    # alpha = 0.01.
    z = float(sps.norm.ppf(0.995))
    low, high = newcombe_paired_interval(1, 3, 2, 9, z=z)
    exp = confint_proportions_2indep(4, 15, 3, 15, method="newcomb", compare="diff", alpha=0.01)
    assert close(low, float(exp[0]), rel=0.0) and close(high, float(exp[1]), rel=0.0)
    assert newcombe_paired_interval(3, 2, 1, 4, z=0.0) == (0.1, 0.1)


@pytest.mark.parametrize(
    ("cells", "z"),
    [
        ((-1, 0, 0, 1), Z95),
        ((1, -2, 0, 1), Z95),
        ((1, 0, 0, -1), Z95),
        ((1, 1, 1, 1), -1.0),
        ((1, 1, 1, 1), math.nan),
        ((0, 0, 0, 0), math.inf),
    ],
)
def test_newcombe_paired_rejects_bad_input(cells: tuple[int, int, int, int], z: float) -> None:
    with pytest.raises(ValueError):
        newcombe_paired_interval(*cells, z=z)


# ----------------------------------------------------------------------------- Student t


@PROPERTY
@given(
    p=st.floats(min_value=1e-6, max_value=1 - 1e-6, exclude_min=True, exclude_max=True),
    df=st.floats(min_value=1.0, max_value=10_000.0),
)
def test_t_ppf_matches_scipy(p: float, df: float) -> None:
    expected = float(sps.t.ppf(p, df))
    # The absolute part only matters within ~1e-2 of the median, where SciPy itself is less
    # accurate than this module (see the closed-form tests below).
    assert close(student_t_ppf(p, df), expected, rel=1e-10, abs_=1e-12)


@PROPERTY
@given(
    p=st.floats(min_value=1e-6, max_value=1 - 1e-6, exclude_min=True, exclude_max=True),
    df=st.integers(min_value=1, max_value=10_000),
)
def test_t_ppf_integer_df_matches_scipy(p: float, df: int) -> None:
    expected = float(sps.t.ppf(p, df))
    assert close(student_t_ppf(p, df), expected, rel=1e-10, abs_=1e-12)


def test_t_ppf_seeded_sweep_tails_and_dfs() -> None:
    rng = random.Random(20240611)
    worst = 0.0
    for _ in range(3000):
        df = rng.choice([1, 2, 3, 4, 5, 10, 29, 100, 1000, 9999, 10_000, 10 ** rng.uniform(0, 4)])
        tail = 10 ** rng.uniform(-6, math.log10(0.499))
        p = tail if rng.random() < 0.5 else 1.0 - tail
        expected = float(sps.t.ppf(p, df))
        worst = max(worst, abs(student_t_ppf(p, df) - expected) / abs(expected))
    assert worst < 1e-10


def _cauchy_ppf(p: float) -> float:
    """Closed-form df = 1 quantile, written in the well-conditioned form for each region."""
    if p < 0.25:
        return -1.0 / math.tan(math.pi * p)
    if p > 0.75:
        return 1.0 / math.tan(math.pi * (1.0 - p))
    return math.tan(math.pi * (p - 0.5))  # p - 0.5 is exact here


@pytest.mark.parametrize(
    "p", [1e-300, 1e-12, 1e-6, 0.001, 0.025, 0.2, 0.4999, 0.5001, 0.975, 1 - 1e-6]
)
def test_t_ppf_closed_forms(p: float) -> None:
    # df = 1 (Cauchy) and df = 2 have closed-form quantiles, valid arbitrarily close to 1/2
    # and far into the tails, where SciPy cannot serve as the reference.
    assert close(student_t_ppf(p, 1), _cauchy_ppf(p), rel=1e-12, abs_=0.0)
    df2 = (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    assert close(student_t_ppf(p, 2), df2, rel=1e-12, abs_=0.0)


@pytest.mark.parametrize("offset", [1e-16, 1e-15, 1e-12, 1e-9, 1e-6, 1e-3])
def test_t_ppf_near_median_keeps_relative_accuracy(offset: float) -> None:
    for p in (0.5 + offset, 0.5 - offset):
        assert close(student_t_ppf(p, 1), _cauchy_ppf(p), rel=1e-12, abs_=0.0)
        df2 = (2 * p - 1) / math.sqrt(2 * p * (1 - p))
        assert close(student_t_ppf(p, 2), df2, rel=1e-12, abs_=0.0)
        if p > 0.5:  # then 1 - p is exact and the quantiles mirror exactly
            assert student_t_ppf(1 - p, 7) == -student_t_ppf(p, 7)


def test_t_ppf_known_critical_values() -> None:
    # Printed critical values (t tables / R qt(0.975, df)).
    assert student_t_ppf(0.975, 1) == pytest.approx(12.70620473617, rel=1e-12)
    assert student_t_ppf(0.975, 3) == pytest.approx(3.182446305284, rel=1e-12)
    assert student_t_ppf(0.975, 10) == pytest.approx(2.228138851986, rel=1e-12)
    assert student_t_ppf(0.995, 30) == pytest.approx(2.749995653567, rel=1e-12)
    assert student_t_ppf(0.975, 1e9) == pytest.approx(Z95, rel=1e-8)
    assert student_t_ppf(0.5, 5) == 0.0
    assert student_t_ppf(0.0, 5) == -math.inf
    assert student_t_ppf(1.0, 5) == math.inf


@PROPERTY
@given(
    p=st.floats(min_value=1e-6, max_value=0.5, exclude_max=True),
    df=st.floats(min_value=1.0, max_value=10_000.0),
)
def test_t_ppf_symmetry_and_round_trip(p: float, df: float) -> None:
    t = student_t_ppf(p, df)
    assert t < 0.0
    q = 1.0 - p  # q >= 1/2, so 1 - q is exact and the quantiles must mirror exactly
    assert student_t_ppf(q, df) == -student_t_ppf(1.0 - q, df)
    assert close(student_t_sf(t, df), 1.0 - p, rel=1e-12, abs_=0.0)
    assert close(student_t_sf(-t, df), p, rel=1e-10, abs_=0.0)


@PROPERTY
@given(
    t=st.floats(min_value=-60.0, max_value=60.0),
    df=st.floats(min_value=1.0, max_value=10_000.0),
)
def test_t_sf_matches_scipy(t: float, df: float) -> None:
    expected = float(sps.t.sf(t, df))
    if abs(t) < 1e-6:
        # SciPy rounds sf(t) to exactly 0.5 for tiny t (off by up to ~3e-10 at t = 1e-9).
        # The first-order expansion sf(t) = 1/2 - t * pdf(0) is exact to O(t^3) here.
        expected = 0.5 - t * float(sps.t.pdf(0.0, df))
    if expected < 1e-300:  # subnormal range: SciPy flushes to 0, relative error is moot
        assert 0.0 <= student_t_sf(t, df) < 1e-290
    elif expected < 0.1:
        assert close(student_t_sf(t, df), expected, rel=1e-9, abs_=0.0)
    else:
        # Near t = 0 SciPy's own sf is only accurate to ~1e-13 absolute.
        assert close(student_t_sf(t, df), expected, rel=0.0, abs_=1e-12)


def test_t_sf_seeded_sweep_far_tail() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        df = 10 ** rng.uniform(0, 4)
        t = 10 ** rng.uniform(-1, 3)
        expected = float(sps.t.sf(t, df))
        if expected < 1e-280:
            continue
        assert close(student_t_sf(t, df), expected, rel=1e-9, abs_=0.0), (t, df)


def test_t_sf_large_df_keeps_twelve_digits() -> None:
    # Guards the cancellation-free continued fraction: the textbook form loses ~df/2 ulps.
    rng = random.Random(17)
    worst = 0.0
    for _ in range(1500):
        df = rng.uniform(1000.0, 10_000.0)
        t = rng.uniform(0.2, 8.0)
        expected = float(sps.t.sf(t, df))
        worst = max(worst, abs(student_t_sf(t, df) - expected) / expected)
    assert worst < 2e-13


@pytest.mark.parametrize("t", [1e-12, 1e-6, 0.3, 1.0, 12.0, 1e3, 1e8, 1e200])
def test_t_sf_cauchy_closed_form(t: float) -> None:
    assert close(student_t_sf(t, 1), math.atan(1.0 / t) / math.pi, rel=1e-13, abs_=0.0)
    assert close(student_t_sf(-t, 1), 1.0 - math.atan(1.0 / t) / math.pi, rel=1e-13, abs_=0.0)


def test_t_sf_special_values() -> None:
    assert student_t_sf(0.0, 3) == 0.5
    assert student_t_sf(math.inf, 3) == 0.0
    assert student_t_sf(-math.inf, 3) == 1.0


def test_t_two_sided_p_value_matches_scipy_ttest() -> None:
    rng = random.Random(11)
    for n in [2, 3, 5, 20, 200]:
        values = [rng.gauss(0.3, 1.0) for _ in range(n)]
        res = sps.ttest_1samp(values, 0.0)
        stat = float(res.statistic)
        assert close(2.0 * student_t_sf(abs(stat), n - 1), float(res.pvalue), rel=1e-9, abs_=0)


@pytest.mark.parametrize("df", [0.0, -1.0, math.inf, math.nan])
def test_t_rejects_bad_df(df: float) -> None:
    with pytest.raises(ValueError):
        student_t_ppf(0.3, df)
    with pytest.raises(ValueError):
        student_t_sf(0.3, df)


@pytest.mark.parametrize("p", [-0.1, 1.1, math.nan])
def test_t_ppf_rejects_bad_p(p: float) -> None:
    with pytest.raises(ValueError):
        student_t_ppf(p, 3)


def test_t_sf_rejects_nan() -> None:
    with pytest.raises(ValueError):
        student_t_sf(math.nan, 3)


# ----------------------------------------------------------------------------- t_interval


def _check_against_scipy(values: list[float], confidence: float) -> None:
    res = t_interval(values, confidence)
    arr = np.asarray(values, dtype=float)
    n = len(values)
    mean = float(np.mean(arr))
    sd = float(np.std(arr, ddof=1))
    se = float(sps.sem(arr))
    scale = max(1.0, float(np.max(np.abs(arr))))
    assert res.n == n
    assert res.defined
    assert close(res.mean, mean, rel=TOL, abs_=TOL * scale)
    assert close(res.sd, sd, rel=TOL, abs_=TOL * scale)
    assert close(res.se, se, rel=TOL, abs_=TOL * scale)
    if se > 0.0:
        low, high = sps.t.interval(confidence, n - 1, loc=mean, scale=se)
        ci = sps.ttest_1samp(arr, 0.0).confidence_interval(confidence)
        assert close(res.low, float(low), rel=TOL, abs_=TOL * scale)
        assert close(res.high, float(high), rel=TOL, abs_=TOL * scale)
        assert close(res.low, float(ci.low), rel=TOL, abs_=TOL * scale)
        assert close(res.high, float(ci.high), rel=TOL, abs_=TOL * scale)
    assert res.low <= res.mean <= res.high


@PROPERTY
@given(
    values=st.lists(
        st.floats(min_value=-1e3, max_value=1e3, allow_nan=False), min_size=2, max_size=60
    ),
    confidence=st.sampled_from([0.5, 0.8, 0.9, 0.95, 0.99, 0.999]),
)
def test_t_interval_matches_scipy(values: list[float], confidence: float) -> None:
    _check_against_scipy(values, confidence)


@PROPERTY
@given(values=st.lists(st.sampled_from([-1.0, 0.0, 1.0]), min_size=2, max_size=300))
def test_t_interval_on_paired_deltas_matches_scipy(values: list[float]) -> None:
    _check_against_scipy(values, 0.95)


def test_t_interval_large_sample() -> None:
    rng = random.Random(3)
    _check_against_scipy([rng.gauss(0.0, 2.0) for _ in range(10_000)], 0.95)


def test_t_interval_empty_raises() -> None:
    with pytest.raises(ValueError):
        t_interval([])


def test_t_interval_single_value_is_undefined() -> None:
    res = t_interval([0.75])
    assert res == MeanInterval(n=1, mean=0.75, sd=0.0, se=0.0, low=0.75, high=0.75, defined=False)


@pytest.mark.parametrize("value", [0.0, 1.0, -1.0, 0.1, 1e-300, 123456.789])
def test_t_interval_identical_values_collapse(value: float) -> None:
    res = t_interval([value] * 9)
    assert res == MeanInterval(n=9, mean=value, sd=0.0, se=0.0, low=value, high=value, defined=True)


def test_t_interval_known_value() -> None:
    res = t_interval([1.0, 2.0, 3.0, 4.0])
    assert res.mean == 2.5
    assert res.sd == pytest.approx(math.sqrt(5.0 / 3.0), rel=1e-15)
    half = 3.182446305283708 * math.sqrt(5.0 / 3.0) / 2.0
    assert res.low == pytest.approx(2.5 - half, rel=1e-12)
    assert res.high == pytest.approx(2.5 + half, rel=1e-12)


@pytest.mark.parametrize("bad", [[1.0, math.nan], [math.inf, 1.0]])
def test_t_interval_rejects_non_finite(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        t_interval(bad)


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.5, 1.5])
def test_t_interval_rejects_bad_confidence(confidence: float) -> None:
    with pytest.raises(ValueError):
        t_interval([1.0, 2.0], confidence)


# ----------------------------------------------------------------------------- sign test


@PROPERTY
@given(b=st.integers(min_value=0, max_value=400), c=st.integers(min_value=0, max_value=400))
def test_one_sided_sign_test_matches_scipy(b: int, c: int) -> None:
    if b + c == 0:
        assert sign_test_greater(0, 0) == 1.0
        return
    expected = float(sps.binomtest(b, b + c, 0.5, alternative="greater").pvalue)
    assert close(sign_test_greater(b, c), expected, rel=1e-9, abs_=1e-300)


def test_sign_test_worked_values() -> None:
    assert sign_test_greater(5, 0) == 1 / 32  # five pairs all one way
    assert sign_test_greater(3, 0) == 1 / 8
    assert sign_test_greater(0, 4) == 1.0
    with pytest.raises(ValueError):
        sign_test_greater(-1, 2)


@PROPERTY
@given(alpha=st.floats(min_value=1e-12, max_value=0.999, exclude_max=True))
def test_sign_test_min_pairs_matches_scipy(alpha: float) -> None:
    """The fewest pairs at which all of them one way is significant, by SciPy's test."""
    n = sign_test_min_pairs(alpha)

    def p(k: int) -> float:
        return float(sps.binomtest(k, k, 0.5, alternative="greater").pvalue)

    assert p(n) < alpha
    assert n == 1 or p(n - 1) >= alpha
    # Below n no split reaches alpha; at n the all-one-way split does.
    assert all(sign_test_greater(b, k - b) >= alpha for k in range(n) for b in range(k + 1))


def test_sign_test_min_pairs_worked_values() -> None:
    assert sign_test_min_pairs(0.05) == 5  # 1/32 < 0.05 <= 1/16
    assert sign_test_min_pairs(0.0625) == 5  # 1/16 is not below 1/16
    assert sign_test_min_pairs(0.01) == 7  # 1/128 < 0.01 <= 1/64
    assert sign_test_min_pairs(0.5) == 2
    for bad in (0.0, 1.0, -0.1, float("nan")):
        with pytest.raises(ValueError):
            sign_test_min_pairs(bad)


# ----------------------------------------------------------------------------- McNemar


def _sm_mcnemar(b: int, c: int) -> float:
    return float(mcnemar([[7, b], [c, 3]], exact=True).pvalue)


@PROPERTY
@given(b=st.integers(min_value=0, max_value=3000), c=st.integers(min_value=0, max_value=3000))
def test_mcnemar_matches_statsmodels(b: int, c: int) -> None:
    expected = _sm_mcnemar(b, c)
    assert close(mcnemar_exact(b, c), expected, rel=1e-9, abs_=1e-300)


@PROPERTY
@given(b=st.integers(min_value=0, max_value=60), c=st.integers(min_value=0, max_value=60))
def test_mcnemar_small_counts_match_statsmodels(b: int, c: int) -> None:
    assert close(mcnemar_exact(b, c), _sm_mcnemar(b, c), rel=1e-9, abs_=0.0)
    assert mcnemar_exact(b, c) == mcnemar_exact(c, b)


def test_mcnemar_no_discordant_pairs() -> None:
    assert mcnemar_exact(0, 0) == 1.0


@pytest.mark.parametrize(("b", "c"), [(1, 1), (5, 5), (5, 6), (100, 101)])
def test_mcnemar_balanced_is_one(b: int, c: int) -> None:
    assert mcnemar_exact(b, c) == 1.0
    assert _sm_mcnemar(b, c) == 1.0


@pytest.mark.parametrize(("b", "c"), [(5_200, 4_800), (4_950, 5_050), (9_000, 1_000), (0, 10_000)])
def test_mcnemar_large_counts(b: int, c: int) -> None:
    assert close(mcnemar_exact(b, c), _sm_mcnemar(b, c), rel=1e-9, abs_=1e-300)


def test_mcnemar_known_values() -> None:
    assert mcnemar_exact(0, 5) == 2.0 / 32.0
    assert mcnemar_exact(1, 9) == pytest.approx(2.0 * 11.0 / 1024.0, rel=1e-15)


def test_mcnemar_rejects_negative() -> None:
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


# ----------------------------------------------------------------------------- bootstrap


def test_bootstrap_same_seed_same_result() -> None:
    diffs = [1.0, 0.0, 0.0, -1.0, 1.0, 1.0, 0.0, 1.0, -1.0, 0.0, 1.0, 0.0]
    first = paired_bootstrap_interval(diffs, random.Random(42), resamples=3000)
    second = paired_bootstrap_interval(diffs, random.Random(42), resamples=3000)
    assert first == second


def test_bootstrap_other_seed_other_result() -> None:
    rng = random.Random(0)
    diffs = [rng.gauss(0.1, 1.0) for _ in range(40)]
    first = paired_bootstrap_interval(diffs, random.Random(1), resamples=2000)
    second = paired_bootstrap_interval(diffs, random.Random(2), resamples=2000)
    assert first != second


def test_bootstrap_matches_numpy_percentiles_of_documented_resampling() -> None:
    rng = random.Random(5)
    diffs = [rng.gauss(0.1, 1.0) for _ in range(37)]
    used = random.Random(99)
    low, high = paired_bootstrap_interval(diffs, used, resamples=4000, confidence=0.9)
    replay = random.Random(99)
    means = [float(np.mean(replay.choices(diffs, k=len(diffs)))) for _ in range(4000)]
    exp_low, exp_high = np.percentile(means, [5.0, 95.0], method="linear")
    assert close(low, float(exp_low), rel=1e-12, abs_=1e-12)
    assert close(high, float(exp_high), rel=1e-12, abs_=1e-12)
    # Exactly `resamples` replicates of len(diffs) draws were taken from the generator.
    assert used.random() == replay.random()


def test_bootstrap_interval_contains_mean_seeded_sweep() -> None:
    rng = random.Random(123)
    for case in range(40):
        n = rng.randint(3, 60)
        if case % 2:
            diffs = [float(rng.choice([-1, 0, 0, 1])) for _ in range(n)]
        else:
            diffs = [rng.gauss(0.0, 3.0) for _ in range(n)]
        low, high = paired_bootstrap_interval(diffs, random.Random(case), resamples=2000)
        mean = math.fsum(diffs) / n
        assert low <= mean <= high, (case, low, mean, high)
        assert min(diffs) <= low <= high <= max(diffs)


def test_bootstrap_width_close_to_normal_theory() -> None:
    rng = random.Random(8)
    diffs = [rng.gauss(0.2, 1.0) for _ in range(400)]
    low, high = paired_bootstrap_interval(diffs, random.Random(8), resamples=5000)
    se = float(np.std(diffs, ddof=1)) / math.sqrt(len(diffs))
    assert high - low == pytest.approx(2 * Z95 * se, rel=0.1)
    assert low < float(np.mean(diffs)) < high


@pytest.mark.parametrize("diffs", [[0.5], [1.0, 1.0, 1.0], [-1.0] * 10])
def test_bootstrap_degenerate_data(diffs: list[float]) -> None:
    assert paired_bootstrap_interval(diffs, random.Random(0), resamples=500) == (
        diffs[0],
        diffs[0],
    )


def test_bootstrap_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        paired_bootstrap_interval([], random.Random(0))
    with pytest.raises(ValueError):
        paired_bootstrap_interval([1.0], random.Random(0), resamples=0)
    with pytest.raises(ValueError):
        paired_bootstrap_interval([1.0], random.Random(0), confidence=1.0)
    with pytest.raises(ValueError):
        paired_bootstrap_interval([1.0, math.nan], random.Random(0))


# ----------------------------------------------------------------------------- clustered SE


def _sm_cluster_se(clusters: list[list[float]]) -> float:
    y = np.array([x for c in clusters for x in c], dtype=float)
    groups = np.array([g for g, c in enumerate(clusters) for _ in c])
    fit = sm.OLS(y, np.ones((len(y), 1))).fit(cov_type="cluster", cov_kwds={"groups": groups})
    return float(np.asarray(fit.bse)[0])


_cluster = st.lists(st.floats(min_value=-1e3, max_value=1e3), min_size=1, max_size=8)
_binary_cluster = st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=10)


@PROPERTY
@given(clusters=st.lists(_cluster, min_size=2, max_size=25))
def test_clustered_se_matches_statsmodels(clusters: list[list[float]]) -> None:
    expected = _sm_cluster_se(clusters)
    assert close(clustered_se(clusters), expected, rel=1e-9, abs_=1e-9)


@PROPERTY
@given(clusters=st.lists(_binary_cluster, min_size=2, max_size=40))
def test_clustered_se_binary_outcomes_match_statsmodels(clusters: list[list[float]]) -> None:
    expected = _sm_cluster_se(clusters)
    assert close(clustered_se(clusters), expected, rel=1e-9, abs_=1e-12)


def test_clustered_se_large_seeded() -> None:
    rng = random.Random(31)
    clusters = []
    for _ in range(300):
        p = rng.random()
        clusters.append([float(rng.random() < p) for _ in range(rng.randint(1, 10))])
    assert close(clustered_se(clusters), _sm_cluster_se(clusters), rel=1e-9, abs_=0.0)


def test_clustered_se_singleton_clusters_reduce_to_plain_se() -> None:
    values = [0.3, 1.7, -2.0, 4.5, 0.0, 1.1]
    expected = float(np.std(values, ddof=1)) / math.sqrt(len(values))
    assert close(clustered_se([[v] for v in values]), expected, rel=1e-12, abs_=0.0)


def test_clustered_se_ignores_empty_clusters() -> None:
    clusters = [[1.0, 0.0], [1.0, 1.0, 1.0], [0.0]]
    assert clustered_se([*clusters, []]) == clustered_se(clusters)


def test_clustered_se_identical_values_is_zero() -> None:
    assert clustered_se([[1.0, 1.0], [1.0], [1.0, 1.0, 1.0]]) == 0.0


def test_clustered_se_exceeds_naive_se_for_correlated_repeats() -> None:
    clusters = [[1.0] * 5, [0.0] * 5, [1.0] * 5, [0.0] * 5, [1.0] * 5, [0.0] * 5]
    flat = [x for c in clusters for x in c]
    naive = float(np.std(flat, ddof=1)) / math.sqrt(len(flat))
    assert clustered_se(clusters) > 2.0 * naive


@pytest.mark.parametrize("clusters", [[], [[1.0, 2.0]], [[1.0, 2.0], []], [[], []]])
def test_clustered_se_needs_two_clusters(clusters: list[list[float]]) -> None:
    with pytest.raises(ValueError):
        clustered_se(clusters)


# ----------------------------------------------------------------------------- detectable effects


def _connor_power(delta: float, n: int, psi: float, z: float = Z95) -> float:
    return float(
        sps.norm.cdf((delta * math.sqrt(n) - z * math.sqrt(psi)) / math.sqrt(psi - delta**2))
    )


def _connor_closed_form(n: int, psi: float, power: float = 0.80, z: float = Z95) -> float:
    """Root of Connor's equation solved as a quadratic in delta (valid for power > 1/2)."""
    zp = float(sps.norm.ppf(power))
    return math.sqrt(psi) * (z * math.sqrt(n) + zp * math.sqrt(n - z * z + zp * zp)) / (n + zp * zp)


@pytest.mark.parametrize(
    ("n", "discordant"),
    [(50, 10), (100, 20), (200, 15), (1000, 100), (30, 20), (10, 10), (12, 10), (5000, 9)],
)
def test_paired_mde_reaches_the_power(n: int, discordant: int) -> None:
    psi = discordant / n
    delta = paired_min_detectable_delta(n, discordant)
    assert delta is not None
    assert 0.0 < delta <= psi
    if delta < psi:
        assert close(_connor_power(delta, n, psi), 0.80, rel=0.0)
    assert close(delta, _connor_closed_form(n, psi), rel=1e-9, abs_=0.0)


@pytest.mark.parametrize("power", [0.6, 0.9, 0.95])
def test_paired_mde_other_power(power: float) -> None:
    delta = paired_min_detectable_delta(400, 60, power=power)
    assert delta is not None
    assert close(_connor_power(delta, 400, 0.15), power, rel=0.0)
    assert close(delta, _connor_closed_form(400, 0.15, power), rel=1e-9, abs_=0.0)


@PROPERTY
@given(data=st.data(), n=st.integers(min_value=1, max_value=3000))
def test_paired_mde_solves_connor_or_is_unattainable(data: st.DataObject, n: int) -> None:
    discordant = data.draw(st.integers(min_value=1, max_value=n))
    psi = discordant / n
    delta = paired_min_detectable_delta(n, discordant)
    if delta is None:
        grid = [psi * i / 1000 for i in range(1, 1000)]
        assert max(_connor_power(x, n, psi) for x in grid) < 0.80
    else:
        assert 0.0 < delta <= psi
        if delta < psi * (1 - 1e-9):
            assert close(_connor_power(delta, n, psi), 0.80, rel=0.0)
        assert close(delta, _connor_closed_form(n, psi), rel=1e-9, abs_=1e-12)


def test_paired_mde_shrinks_as_n_grows() -> None:
    deltas = []
    for n in (50, 100, 200, 500, 1000, 10_000):
        delta = paired_min_detectable_delta(n, n // 5)  # psi = 0.2 throughout
        assert delta is not None
        deltas.append(delta)
    assert all(a > b for a, b in itertools.pairwise(deltas))


@pytest.mark.parametrize(("n", "discordant"), [(0, 0), (10, 0), (500, 0), (3, 1), (20, 4), (3, 3)])
def test_paired_mde_none_when_nothing_detectable(n: int, discordant: int) -> None:
    assert paired_min_detectable_delta(n, discordant) is None


def test_paired_mde_tiny_n_takes_the_increasing_branch() -> None:
    # n = 3 < Z95^2: power(delta) peaks at delta* = sqrt(n*psi)/z and falls afterwards; the
    # result is the smallest delta reaching the (low) target, on the increasing side.
    delta = paired_min_detectable_delta(3, 3, power=0.1)
    assert delta is not None
    assert delta < math.sqrt(3) / Z95
    assert close(_connor_power(delta, 3, 1.0), 0.1, rel=0.0)


@pytest.mark.parametrize(
    ("n", "discordant", "power", "z"),
    [
        (-1, 0, 0.8, Z95),
        (5, 6, 0.8, Z95),
        (5, -1, 0.8, Z95),
        (5, 2, 0.0, Z95),
        (5, 2, 1.0, Z95),
        (5, 2, math.nan, Z95),
        (5, 2, 0.8, -1.0),
        (5, 2, 0.8, math.inf),
    ],
)
def test_paired_mde_rejects_bad_input(n: int, discordant: int, power: float, z: float) -> None:
    with pytest.raises(ValueError):
        paired_min_detectable_delta(n, discordant, power=power, z_alpha=z)


@pytest.mark.parametrize(("n", "sd"), [(2, 1.0), (10, 0.5), (37, 0.31), (1000, 2.5)])
def test_mean_mde_matches_scipy(n: int, sd: float) -> None:
    expected = (float(sps.norm.ppf(0.975)) + float(sps.norm.ppf(0.8))) * sd / math.sqrt(n)
    value = mean_min_detectable_delta(n, sd)
    assert value is not None
    assert close(value, expected, rel=1e-12, abs_=0.0)
    value = mean_min_detectable_delta(n, sd, power=0.9, z_alpha=float(sps.norm.ppf(0.995)))
    expected = (float(sps.norm.ppf(0.995)) + float(sps.norm.ppf(0.9))) * sd / math.sqrt(n)
    assert value is not None
    assert close(value, expected, rel=1e-12, abs_=0.0)


@pytest.mark.parametrize(("n", "sd"), [(0, 1.0), (1, 1.0), (10, 0.0)])
def test_mean_mde_none_when_undefined(n: int, sd: float) -> None:
    assert mean_min_detectable_delta(n, sd) is None


@pytest.mark.parametrize(
    ("n", "sd", "power"),
    [(-1, 1.0, 0.8), (10, -0.1, 0.8), (10, math.nan, 0.8), (10, math.inf, 0.8), (10, 1.0, 1.0)],
)
def test_mean_mde_rejects_bad_input(n: int, sd: float, power: float) -> None:
    with pytest.raises(ValueError):
        mean_min_detectable_delta(n, sd, power=power)


# ----------------------------------------------------------------------------- pass@k / pass^k


def _brute(n: int, c: int, k: int) -> tuple[Fraction, Fraction]:
    """Enumerate every k-subset of n attempts (the first c pass): (P[any pass], P[all pass])."""
    any_pass = all_pass = total = 0
    for subset in itertools.combinations(range(n), k):
        passes = sum(1 for i in subset if i < c)
        any_pass += passes > 0
        all_pass += passes == k
        total += 1
    return Fraction(any_pass, total), Fraction(all_pass, total)


@pytest.mark.parametrize("n", range(1, 11))
def test_pass_at_k_and_pass_hat_k_brute_force(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            any_pass, all_pass = _brute(n, c, k)
            assert close(pass_at_k(n, c, k), float(any_pass), rel=1e-12, abs_=1e-15)
            assert close(pass_hat_k(n, c, k), float(all_pass), rel=1e-12, abs_=1e-15)


@PROPERTY
@given(data=st.data(), n=st.integers(min_value=1, max_value=2000))
def test_pass_at_k_matches_exact_and_chen_numpy(data: st.DataObject, n: int) -> None:
    c = data.draw(st.integers(min_value=0, max_value=n))
    k = data.draw(st.integers(min_value=1, max_value=n))
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    # Reference implementation from Chen et al. (2021), written with NumPy.
    chen = 1.0 if n - c < k else 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))
    value = pass_at_k(n, c, k)
    assert close(value, float(exact), rel=1e-10, abs_=1e-300)
    assert close(value, chen, rel=1e-9, abs_=1e-12)
    # pass^k is the complementary event of pass@k on the failures.
    assert close(pass_hat_k(n, c, k), 1.0 - pass_at_k(n, n - c, k), rel=1e-9, abs_=1e-12)


@PROPERTY
@given(data=st.data(), n=st.integers(min_value=1, max_value=2000))
def test_pass_hat_k_matches_exact(data: st.DataObject, n: int) -> None:
    c = data.draw(st.integers(min_value=0, max_value=n))
    k = data.draw(st.integers(min_value=1, max_value=n))
    exact = Fraction(math.comb(c, k), math.comb(n, k))
    assert close(pass_hat_k(n, c, k), float(exact), rel=1e-12, abs_=0.0)


def test_pass_k_edge_cases() -> None:
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 10, 3) == 1.0
    assert pass_at_k(10, 8, 3) == 1.0  # fewer than k failures: some draw must pass
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3, rel=1e-15)
    assert pass_hat_k(10, 3, 1) == pytest.approx(0.3, rel=1e-15)
    assert pass_hat_k(10, 2, 3) == 0.0
    assert pass_hat_k(10, 10, 10) == 1.0
    assert pass_at_k(10_000, 1, 1) == pytest.approx(1e-4, rel=1e-12)
    assert pass_at_k(10_000, 5_000, 100) == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (3, 4, 1), (3, -1, 1), (3, 1, 0), (0, 0, 1)])
def test_pass_k_rejects_invalid(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError):
        pass_hat_k(n, c, k)
