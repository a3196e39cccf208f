"""Arrival schedules: rates, shapes (Poisson, gamma burstiness, constant), bounds, seeds, the split over clients."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from toolkit.loadgen.arrivals import schedule, split


def gaps(times: list[float]) -> np.ndarray:
    return np.diff(np.asarray(times))


def ks_exponential(sample: np.ndarray, mean: float) -> float:
    """Kolmogorov-Smirnov distance between the sample and the exponential law of that mean."""
    x = np.sort(sample)
    cdf = 1 - np.exp(-x / mean)
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n)))


def ks_critical(n: int) -> float:
    return 1.63 / math.sqrt(n)  # 1 % level


@pytest.mark.parametrize("arrival", ["poisson", "constant", "gamma"])
def test_the_rate_is_the_one_asked(arrival: str) -> None:
    times = schedule(50.0, arrival=arrival, burstiness=0.5 if arrival == "gamma" else 1.0, count=20_000, seed=3)  # type: ignore[arg-type]
    assert times[0] == 0.0 and np.all(gaps(times) >= 0)
    assert (len(times) - 1) / times[-1] == pytest.approx(50.0, rel=0.03)


def test_poisson_gaps_are_exponential_and_constant_gaps_even() -> None:
    poisson = gaps(schedule(10.0, count=5000, seed=1))
    assert ks_exponential(poisson, 0.1) < ks_critical(len(poisson))
    assert np.std(poisson) / np.mean(poisson) == pytest.approx(1.0, rel=0.05)
    assert np.allclose(gaps(schedule(10.0, arrival="constant", count=50)), 0.1)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_burstiness_sets_the_spread_as_vllm_bench_does(burstiness: float) -> None:
    """Shape = burstiness, scale = 1 / (rate × burstiness): mean gap 1/rate, coefficient of variation 1/√b."""
    g = gaps(schedule(20.0, arrival="gamma", burstiness=burstiness, count=20_000, seed=7))
    assert np.mean(g) == pytest.approx(0.05, rel=0.04)
    assert np.std(g) / np.mean(g) == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)
    skew = np.mean((g - np.mean(g)) ** 3) / np.std(g) ** 3
    assert skew == pytest.approx(2 / math.sqrt(burstiness), rel=0.2)  # the gamma law's skewness


def test_gamma_with_burstiness_one_is_the_poisson_schedule() -> None:
    poisson = gaps(schedule(5.0, count=4000, seed=2))
    gamma = gaps(schedule(5.0, arrival="gamma", burstiness=1.0, count=4000, seed=2))
    assert ks_exponential(poisson, 0.2) < ks_critical(len(poisson))
    assert ks_exponential(gamma, 0.2) < ks_critical(len(gamma))


def test_duration_bounds_the_arrivals_and_counts_follow_poisson() -> None:
    counts = [len(schedule(20.0, duration_s=5.0, seed=s)) for s in range(300)]
    assert all(max(schedule(20.0, duration_s=5.0, seed=s)) < 5.0 for s in range(20))
    assert np.mean(counts) == pytest.approx(100 + 1, rel=0.03)  # the first at 0, then a process of rate 20 on 5 s
    assert np.var(counts) == pytest.approx(100, rel=0.25)
    long = schedule(1000.0, duration_s=30.0, seed=1)  # more than one block of draws
    assert len(long) == pytest.approx(30_000, rel=0.03) and long[-1] < 30.0 and np.all(gaps(long) > 0)


def test_seeded_and_exact_count() -> None:
    assert schedule(3.0, count=10, seed=5) == schedule(3.0, count=10, seed=5)
    assert schedule(3.0, count=10, seed=5) != schedule(3.0, count=10, seed=6)
    assert schedule(3.0, count=10, seed=(5, 1)) != schedule(3.0, count=10, seed=(5, 2))
    assert len(schedule(3.0, count=1)) == 1 and schedule(3.0, count=0) == []


def test_inf_sends_all_at_once_and_needs_a_count() -> None:
    assert schedule(math.inf, count=4) == [0.0] * 4
    with pytest.raises(ValueError, match="needs a request count"):
        schedule(math.inf, duration_s=3)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rate": 0.0, "count": 3}, "rate"), ({"rate": -1.0, "count": 3}, "rate"), ({"rate": math.nan, "count": 3}, "rate"),
    ({"rate": 1.0}, "either"), ({"rate": 1.0, "count": 3, "duration_s": 2.0}, "either"),
    ({"rate": 1.0, "duration_s": 0.0}, "duration_s"), ({"rate": 1.0, "count": 3, "burstiness": 0.0}, "burstiness"),
    ({"rate": 1.0, "count": 3, "arrival": "uniform"}, "arrival"), ({"rate": 1e9, "duration_s": 100.0}, "over"),
])  # fmt: skip
def test_bad_arguments_say_which(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        schedule(**kwargs)


def test_split_gives_independent_poisson_streams_whose_union_is_the_schedule() -> None:
    times = schedule(40.0, count=40_000, seed=11)
    parts = split(times, 4, seed=1)
    assert sorted(i for part in parts for i in part) == list(range(len(times)))
    for part in parts:
        sub = [times[i] for i in part]
        assert (len(sub) - 1) / (sub[-1] - sub[0]) == pytest.approx(10.0, rel=0.04)
        g = gaps(sub)
        assert np.std(g) / np.mean(g) == pytest.approx(1.0, rel=0.05)  # still exponential gaps: Poisson
    edges = np.arange(0, times[-1], 10.0)
    counts = [np.histogram([times[i] for i in part], edges)[0] for part in parts[:2]]
    assert abs(np.corrcoef(counts[0], counts[1])[0, 1]) < 0.35  # the streams do not move together
    assert split(times[:5], 1) == [[0, 1, 2, 3, 4]]
    with pytest.raises(ValueError, match="clients"):
        split(times, 0)


def test_a_rescaled_schedule_holds_the_rate_asked_for_and_keeps_its_shape() -> None:
    """Drawn as it falls, 10 s at 2 req/s held 18 requests at 1.70 req/s for this seed; rescaled, 20 at 2.00."""
    kept = schedule(2.0, duration_s=10, seed=(0, 1))
    rescaled = schedule(2.0, duration_s=10, seed=(0, 1), rescale=True)
    assert len(kept) == 18 and (len(kept) - 1) / kept[-1] == pytest.approx(1.703, abs=1e-3)
    assert len(rescaled) == 20 and (len(rescaled) - 1) / rescaled[-1] == pytest.approx(2.0)
    counted = schedule(4.0, count=9, seed=3, rescale=True)
    assert len(counted) == 9 and counted[0] == 0.0 and counted[-1] == pytest.approx(2.0)
    gaps = [b - a for a, b in itertools.pairwise(counted)]
    assert max(gaps) > 2 * min(gaps)  # still Poisson-shaped gaps, not even ones
    assert schedule(4.0, count=3, arrival="constant", rescale=True) == schedule(4.0, count=3, arrival="constant")
