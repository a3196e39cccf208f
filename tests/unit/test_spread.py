"""Batch-means intervals of a decode window, on synthetic token events with a known rate; ratio significance."""

from __future__ import annotations

import random

import pytest

from toolkit.loadgen.client import StreamResult
from toolkit.method.spread import (
    Interval,
    batch_means,
    lag1_autocorrelation,
    ratio_interval,
    significant,
    sub_window_count,
    t95,
)
from toolkit.method.window import window_spread

TRUE_TBT_S = 0.02  # 50 tok/s per stream
STREAMS = 4
WINDOW_S = 10.0


def stream(rng: random.Random, tbt_s: float, window_s: float) -> StreamResult:
    """One stream whose gaps between tokens are exponential around `tbt_s` (a Poisson token process)."""
    t, count, events = 0.0, 0, []
    while t < window_s:
        t += rng.expovariate(1 / tbt_s)
        count += 1
        events.append((t, count))
    return StreamResult(started=0.0, token_events=events)


def test_interval_covers_the_true_rate_in_about_95_percent_of_seeded_trials() -> None:
    true_total = STREAMS / TRUE_TBT_S
    covered = 0
    trials = 300
    for seed in range(trials):
        rng = random.Random(seed)
        results = [stream(rng, TRUE_TBT_S, WINDOW_S + 1) for _ in range(STREAMS)]
        spread = window_spread(results, 0.0, WINDOW_S)
        assert spread.total_tok_s is not None
        covered += abs(spread.total_tok_s.value - true_total) <= spread.total_tok_s.half_width
    assert 0.91 <= covered / trials <= 0.99, covered / trials


def test_noisier_machine_gives_a_wider_interval() -> None:
    rng = random.Random(7)
    steady = [stream(rng, TRUE_TBT_S, WINDOW_S + 1) for _ in range(STREAMS)]
    # Every other second the machine runs at half speed: sub-window rates alternate.
    jumpy = []
    for _ in range(STREAMS):
        t, count, events = 0.0, 0, []
        while t < WINDOW_S + 1:
            t += TRUE_TBT_S * (2 if int(t) % 2 else 1)
            count += 1
            events.append((t, count))
        jumpy.append(StreamResult(started=0.0, token_events=events))
    quiet, noisy = window_spread(steady, 0.0, WINDOW_S), window_spread(jumpy, 0.0, WINDOW_S)
    assert quiet.total_tok_s and noisy.total_tok_s
    assert noisy.total_tok_s.relative > 2 * quiet.total_tok_s.relative
    assert quiet.tbt_ms and quiet.per_request_tok_s
    assert quiet.tbt_ms.value == pytest.approx(TRUE_TBT_S * 1000, rel=0.15)


def test_autocorrelated_sub_windows_are_merged() -> None:
    drifting = lambda k: [float(i) for i in range(k)]  # noqa: E731 (a steady climb: lag-1 correlation near 1)
    assert lag1_autocorrelation(drifting(10)) > 0.5
    assert sub_window_count(drifting) == 5
    alternating = lambda k: [float(i % 2) for i in range(k)]  # noqa: E731
    assert sub_window_count(alternating) == 10


def test_batch_means_and_t_quantiles() -> None:
    interval = batch_means([10.0, 12.0, 11.0, 9.0])
    assert interval is not None
    assert interval.value == pytest.approx(10.5)
    assert interval.half_width == pytest.approx(3.182 * (1.6666666 / 4) ** 0.5, rel=1e-4)
    assert batch_means([1.0]) is None
    assert t95(1) == 12.706 and t95(100) == 1.96
    with pytest.raises(ValueError):
        t95(0)


def test_a_run_against_itself_is_not_significant() -> None:
    cell = Interval(341.0, 4.0, 10)
    assert not significant(ratio_interval(cell, cell))


def test_twenty_percent_apart_with_tight_intervals_is_significant() -> None:
    ratio = ratio_interval(Interval(300.0, 3.0, 10), Interval(360.0, 4.0, 10))
    assert ratio.value == pytest.approx(1.2)
    assert significant(ratio)
    assert not significant(ratio_interval(Interval(300.0, 40.0, 10), Interval(330.0, 45.0, 10)))
