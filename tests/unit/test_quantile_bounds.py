"""Distribution-free percentile bounds: the ranks against the binomial, the unbounded thresholds, NaN, coverage."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from toolkit.method.quantile_bounds import QuantileBounds, min_bounded_n, order_ranks, quantile_bounds


def below(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k), summed term by term (no scipy): the chance x_(k+1) lies above the percentile."""
    return math.fsum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k + 1))


def brute_ranks(n: int, q: float) -> tuple[int | None, int | None]:
    """The rule of the module's doc, by a plain search: u the least rank whose upper miss is <= 2.5 %, l the largest
    whose lower miss is <= 5 % less u's."""
    p, slack = q / 100, 1 + 1e-9  # a miss equal to its limit meets it (1 value, p95: 5 %)
    pmf = [math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(n + 1)]
    cdf = [math.fsum(pmf[: k + 1]) for k in range(n + 1)]  # cdf[k] = P(B <= k)
    upper = next((u for u in range(1, n + 1) if math.fsum(pmf[u:]) <= 0.025 * slack), None)
    spare = 0.05 * slack - (math.fsum(pmf[upper:]) if upper else 0.0)
    lower = max((r for r in range(1, n + 1) if cdf[r - 1] <= spare), default=None)
    return lower, upper


def ranked(n: int) -> np.ndarray:
    """1 .. n shuffled: the r-th smallest value is r, so a bound is its rank."""
    return np.random.default_rng(n).permutation(np.arange(1, n + 1, dtype=float))


def test_p90_is_unbounded_from_35_values_and_bounded_from_36() -> None:
    assert 0.9**35 > 0.025 >= 0.9**36  # the maximum misses the p90 from below that often
    assert quantile_bounds(ranked(35), 90) == QuantileBounds(low=28.0, high=None, n=35, q=90.0)
    assert quantile_bounds(ranked(36), 90) == QuantileBounds(low=29.0, high=36.0, n=36, q=90.0)
    # rank 29: P(B <= 28) = 0.0235 fits under 5 % less the upper miss 0.9^36 = 0.0225; rank 30 would not
    assert below(28, 36, 0.9) <= 0.05 - 0.9**36 < below(29, 36, 0.9)


def test_p99_is_unbounded_from_367_values_and_bounded_from_368() -> None:
    assert 0.99**367 > 0.025 >= 0.99**368
    short, enough = quantile_bounds(ranked(367), 99), quantile_bounds(ranked(368), 99)
    assert short.high is None and short.low == 360.0
    assert (enough.low, enough.high, enough.n) == (360.0, 368.0, 368)
    assert below(359, 368, 0.99) <= 0.05 - 0.99**368 < below(360, 368, 0.99)


def test_p50_of_ten_values_is_the_tables_second_to_ninth() -> None:
    """Bin(10, 1/2): P(B <= 1) = 11/1024, P(B <= 2) = 56/1024; so x_(2) .. x_(9), coverage 1 - 22/1024."""
    assert order_ranks(10, 50) == (2, 9)
    assert quantile_bounds(ranked(10), 50) == QuantileBounds(low=2.0, high=9.0, n=10, q=50.0)
    assert below(1, 10, 0.5) == pytest.approx(11 / 1024) and below(2, 10, 0.5) > 0.05 - 11 / 1024


def test_the_low_end_takes_what_the_high_end_left_of_the_5_percent() -> None:
    """p99 of 1,000: x_(997) misses above 1.0 % of the time, so the low end may miss 4.0 %: x_(984), whose miss
    P(B <= 983) = 2.6 %, not the equal-tailed x_(983) (1.4 %, coverage 0.976 against 0.964)."""
    assert 1 - below(996, 1000, 0.99) == pytest.approx(0.0101, abs=1e-4)
    assert (below(982, 1000, 0.99), below(983, 1000, 0.99)) == pytest.approx((0.0138, 0.0264), abs=1e-4)
    assert order_ranks(1000, 99) == (984, 997)


@pytest.mark.parametrize("q", [50, 75, 90, 95, 99])
def test_ranks_follow_the_binomial_rule_at_every_small_n(q: float) -> None:
    assert [order_ranks(n, q) for n in range(0, 130)] == [(None, None)] + [brute_ranks(n, q) for n in range(1, 130)]


def test_the_window_of_a_large_n_finds_the_same_ranks_as_every_rank() -> None:
    from scipy.special import bdtr, bdtrc

    for n, q in ((2_000, 99), (5_000, 99.9), (20_000, 50), (1_000, 1)):
        k = np.arange(n + 1)
        above = bdtrc(k, n, q / 100)  # P(B >= k + 1)
        upper = int(k[(above <= 0.025) & (k < n)][0]) + 1
        lower = int(k[bdtr(k, n, q / 100) <= 0.05 - above[upper - 1]][-1]) + 1
        assert order_ranks(n, q) == (lower, upper)


def test_the_fewest_values_for_an_upper_bound() -> None:
    assert (min_bounded_n(50), min_bounded_n(90), min_bounded_n(99), min_bounded_n(99.9)) == (6, 36, 368, 3688)
    for q in (50, 80, 90, 95, 99, 99.9):
        n = min_bounded_n(q)
        assert order_ranks(n - 1, q)[1] is None and order_ranks(n, q)[1] == n


def test_too_few_values_give_no_bound() -> None:
    assert quantile_bounds([], 50) == QuantileBounds(low=None, high=None, n=0, q=50.0)
    assert quantile_bounds([3.0, 1.0, 2.0, 4.0], 50) == QuantileBounds(low=None, high=None, n=4, q=50.0)
    assert quantile_bounds([3.0, 1.0, 2.0, 5.0, 4.0], 50) == QuantileBounds(low=1.0, high=None, n=5, q=50.0)
    # the low end of a p10 is the p90's upper problem mirrored: 0.1 ** 1 > 5 %, so one value bounds nothing
    assert quantile_bounds([7.0], 10).low is None and quantile_bounds([7.0, 8.0], 10).low is None


def test_nan_is_left_out() -> None:
    values = ranked(40)
    holed = np.insert(values, [0, 7, 7, 40], math.nan)
    assert quantile_bounds(holed, 90) == quantile_bounds(values, 90) == QuantileBounds(32.0, 40.0, 40, 90.0)
    assert quantile_bounds(pd.Series(holed), 90).n == 40
    assert quantile_bounds([math.nan] * 50, 50) == QuantileBounds(None, None, 0, 50.0)


@pytest.mark.parametrize("q", [0, 100, -5, 120])
def test_a_percentile_outside_0_to_100_is_refused(q: float) -> None:
    with pytest.raises(ValueError, match="not a percentile"):
        quantile_bounds([1.0, 2.0], q)


def test_a_level_outside_0_to_1_is_refused() -> None:
    with pytest.raises(ValueError, match="not a fraction"):
        min_bounded_n(90, level=1.0)


def test_the_bounds_hold_the_point_percentile() -> None:
    rng = np.random.default_rng(7)
    for n in (6, 20, 36, 100, 368, 1000):
        values = rng.lognormal(5, 1, n)
        for q in (50, 90, 99):
            found, point = quantile_bounds(values, q), float(np.percentile(values, q))
            assert found.low is None or found.low <= point
            assert found.high is None or point <= found.high


@pytest.mark.parametrize(("n", "q", "exact"), [(100, 90, 0.9557), (400, 99, 0.9613), (60, 50, 0.9604)])
def test_seeded_coverage_is_near_the_exact_one(n: int, q: float, exact: float) -> None:
    """1,500 simulated steps of log-normal latencies: the share whose bounds hold the true percentile, exp(z_q),
    is the exact coverage the binomial gives the ranks, within sampling error (sd 0.0055), and inside 0.93-0.97."""
    from scipy.special import bdtr, bdtrc, ndtri

    lower, upper = order_ranks(n, q)
    assert lower is not None and upper is not None
    assert 1 - bdtr(lower - 1, n, q / 100) - bdtrc(upper - 1, n, q / 100) == pytest.approx(exact, abs=1e-4)
    truth = math.exp(float(ndtri(q / 100)))
    steps = np.random.default_rng([n, int(q)]).lognormal(0.0, 1.0, (1_500, n))
    found = [quantile_bounds(step, q) for step in steps]
    coverage = sum(b.low is not None and b.high is not None and b.low <= truth <= b.high for b in found) / len(found)
    assert abs(coverage - exact) < 0.02 and 0.93 <= coverage <= 0.97
