"""The design effect of a met/missed fraction from the requests' continuous margins (toolkit.method.effective_n)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toolkit.method.effective_n import (
    MIN_REQUESTS,
    autocorrelations,
    average_ranks,
    design_effect,
    indicator_correlation,
    initial_positive_sum,
    normal_scores,
)


def ar1(phi: float, n: int, seed: int) -> np.ndarray:
    rng, z = np.random.default_rng(seed), np.empty(n)
    z[0] = rng.standard_normal()
    for i in range(1, n):
        z[i] = phi * z[i - 1] + math.sqrt(1 - phi * phi) * rng.standard_normal()
    return z


def test_normal_scores_rank_the_values_and_put_a_failed_request_last() -> None:
    scores = normal_scores([3.0, math.inf, 1.0, 2.0])
    assert list(np.argsort(scores)) == [2, 3, 0, 1]
    assert scores[1] == pytest.approx(-scores[2]) == pytest.approx(0.841621, abs=1e-6)  # ranks 4 and 1 of 5


def test_autocorrelations_start_at_one_and_a_constant_series_has_none() -> None:
    found = autocorrelations(np.array([1.0, -1.0, 1.0, -1.0]))
    assert found is not None and found[0] == pytest.approx(1.0) and found[1] == pytest.approx(-0.75)
    assert autocorrelations(np.full(10, 2.5)) is None


def test_indicator_correlation_at_the_median_is_the_arcsine_law() -> None:
    r = np.array([0.0, 0.3, 0.9, 1.0])
    assert indicator_correlation(r, 0.5) == pytest.approx(2 / math.pi * np.arcsin(r))


def test_indicator_correlation_is_weaker_in_the_tail_and_the_same_for_either_flag() -> None:
    tail = indicator_correlation(np.array([0.5]), 0.99)[0]
    assert 0 < tail < indicator_correlation(np.array([0.5]), 0.5)[0]
    assert indicator_correlation(np.array([0.5]), 0.01)[0] == pytest.approx(tail)


def test_initial_positive_sum_stops_at_the_first_pair_not_positive() -> None:
    # pairs (1 + 0.5), (0.25 + 0.1), (-0.2 - 0.3): -1 + 2 * (1.5 + 0.35)
    assert initial_positive_sum(np.array([1.0, 0.5, 0.25, 0.1, -0.2, -0.3, 0.9, 0.9])) == pytest.approx(2.7)
    assert initial_positive_sum(np.array([1.0, 0.0, 0.0, 0.0])) == pytest.approx(1.0)


def test_independent_requests_have_a_design_effect_near_one() -> None:
    for share in (0.5, 0.99):
        assert 1.0 <= design_effect(np.random.default_rng(1).standard_normal(2000), share) < 1.2


def test_correlated_requests_have_a_large_design_effect_larger_nearer_the_median() -> None:
    margins = ar1(0.95, 2000, seed=2)
    # the flags cut at the median of an AR(1) of 0.95: 1 + 2 * sum of (2 / pi) asin(0.95^h), about 25
    median, tail = design_effect(margins, 0.5), design_effect(margins, 0.99)
    assert 12 < median < 45
    assert 3 < tail < median


def test_a_constant_or_tiny_series_or_alternating_one_gives_the_floor() -> None:
    assert design_effect(np.full(100, 0.7), 1.0) == 1.0
    assert design_effect([0.2, 5.0], 0.5) == 1.0
    assert design_effect(np.tile([0.0, 1.0], 50), 0.5) == 1.0  # negatively correlated: not below 1


def test_a_trend_counts_as_correlation_from_min_requests_on() -> None:
    assert design_effect(np.arange(float(MIN_REQUESTS)), 0.5) > 5
    # fewer requests: their correlations cannot be told from chance; 6 of a step that trended by load are 6
    assert design_effect(np.arange(float(MIN_REQUESTS - 1)), 0.5) == 1.0
    assert design_effect([0.001, 0.002, 0.003, 0.004, 0.005, 0.006], 1 - 0.5 / 6) == 1.0


def test_average_ranks_are_scipys_with_ties_and_infinities() -> None:
    from scipy.stats import rankdata

    rng = np.random.default_rng(1)
    for _ in range(50):
        data = rng.integers(0, 20, size=int(rng.integers(1, 60))).astype(float)
        data[rng.random(len(data)) < 0.1] = np.inf
        assert np.array_equal(average_ranks(data), rankdata(data)), data
    assert average_ranks(np.array([3.0, 1.0, 3.0, np.inf])).tolist() == [2.5, 1.0, 2.5, 4.0]
