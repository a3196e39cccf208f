"""The SLO fraction's interval at the effective count of correlated requests: per step and pooled by the search."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from toolkit.method.goodput import ServiceLevel, meeting_fraction, meets, slo_margins
from toolkit.method.slo_fraction import batch_fraction, fraction_bounds, fraction_interval
from toolkit.rates.search import rate_verdicts

LEVEL = ServiceLevel(ttft_ms=100.0, tpot_ms=20.0)


def latencies(ttft: list[float], tpot: list[float], ok: list[bool] | None = None) -> pd.DataFrame:
    flags = ok if ok is not None else [True] * len(ttft)
    return pd.DataFrame({"ok": flags, "ttft_sched_ms": ttft, "tpot_ms": tpot, "e2e_sched_ms": math.nan})


def test_without_an_effective_count_the_interval_is_todays() -> None:
    assert fraction_bounds(495, 500) == fraction_bounds(495, 500, (), None) == fraction_interval(495, 500)
    assert fraction_bounds(495, 500, (), 800.0) == fraction_interval(495, 500)  # never more than n


def test_the_effective_count_scales_k_alike() -> None:
    low, high = fraction_bounds(500, 500, (), 50.0)
    assert (low, high) == pytest.approx((0.025 ** (1 / 50), 1.0))  # all of 50 met
    assert fraction_bounds(450, 500, (), 50.0) == pytest.approx(fraction_interval(45, 50))


def test_the_batches_t_interval_still_widens_it() -> None:
    spread = [(0.05, 3.5)]
    low, high = fraction_bounds(450, 500, spread, 400.0)
    assert low < fraction_interval(360, 400)[0] and high == 1.0


def test_margins_are_the_largest_latency_over_its_limit_and_met_at_most_one() -> None:
    frame = latencies([50.0, 150.0, 100.0, math.nan], [30.0, 10.0, 20.0, math.nan], [True, True, True, False])
    margins = slo_margins(frame, LEVEL)
    assert margins is not None and list(margins) == [1.5, 1.5, 1.0, math.inf]
    assert list(margins <= 1) == list(meets(frame, LEVEL))
    assert slo_margins(frame, ServiceLevel()) is None


def test_a_level_without_latency_limits_keeps_todays_interval() -> None:
    frame = latencies([10.0] * 40, [1.0] * 40, [True] * 39 + [False])
    found = meeting_fraction(frame, ServiceLevel())
    batches = batch_fraction([True] * 39 + [False])
    assert found.deff is None and (found.met, found.counted) == (39, 40)
    assert (found.low, found.high) == fraction_bounds(39, 40, [batches] if batches else [])


def test_clustered_slow_requests_widen_the_interval_independent_ones_barely() -> None:
    rng = np.random.default_rng(3)
    calm = latencies(list(50 + 10 * rng.standard_normal(500)), [5.0] * 500)
    wave = latencies(list(60 + 30 * np.sin(np.arange(500) / 40)), [5.0] * 500)  # slow for long stretches, no miss
    quiet, busy = meeting_fraction(calm, LEVEL), meeting_fraction(wave, LEVEL)
    assert quiet.met == busy.met == 500
    assert quiet.deff is not None and quiet.deff < 1.2 and quiet.low == pytest.approx(0.025 ** (1 / 500), rel=1e-3)
    assert busy.deff is not None and busy.deff > 5 and busy.low < 0.99 < quiet.low


def step(deff: float | None) -> dict:
    row = {"offered_rate": 4.0, "steady_requests": 1000, "requests": 1200, "slo_fraction": 1.0,
           "slo_fraction_se": 0.0, "slo_fraction_dof": 3.5}  # fmt: skip
    return row if deff is None else {**row, "slo_fraction_deff": deff}


def test_the_search_pools_the_steps_effective_counts() -> None:
    assert rate_verdicts([step(None), step(None)], 0.99) == {4.0: ("meets", 2)}  # 2,000 requests, all met
    assert rate_verdicts([step(1.0), step(1.0)], 0.99) == {4.0: ("meets", 2)}
    assert rate_verdicts([step(50.0), step(50.0)], 0.99) == {4.0: ("undecided", 2)}  # worth 40 requests
