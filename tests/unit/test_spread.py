"""A window's intervals on synthetic token streams whose truth is known (benchmarks/token_truth.py); ratios, their
p-values, the median's order-statistic interval, and the family correction of compare."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from scipy.special import stdtr

from benchmarks.token_truth import Cell, Noise, window_streams
from toolkit.loadgen.client import StreamResult
from toolkit.method.multiplicity import adjusted_p_values, marked, overall_ratio
from toolkit.method.spread import (
    BATCHES,
    Interval,
    batch_means,
    median_interval,
    ratio_dof,
    ratio_interval,
    ratio_test,
    significant,
    t_quantile,
    welch_dof,
    window_dof,
    window_interval,
)
from toolkit.method.window import summarize_window, tokens_between, window_spread

CELL = Cell(streams=4, window_s=10.0)


def _coverage(kind: str, trials: int) -> float:
    """Share of windows whose total tok/s interval holds the mean over as many other windows."""
    rng = random.Random(11)
    noise = Noise(kind)
    truth = statistics.fmean(
        summarize_window(window_streams(noise, CELL, rng), 0.0, CELL.window_s).total_tok_s or 0.0 for _ in range(trials)
    )
    held = 0
    for _ in range(trials):
        results = window_streams(noise, CELL, rng)
        value = summarize_window(results, 0.0, CELL.window_s).total_tok_s
        spread = window_spread(results, 0.0, CELL.window_s).total_tok_s
        assert value is not None and spread is not None
        held += abs(value - truth) <= spread.half_width
    return held / trials


@pytest.mark.parametrize("kind", ["independent", "ar1"])
def test_interval_covers_the_truth_in_about_95_percent_of_seeded_windows(kind: str) -> None:
    # Under the AR(1) speed, ten sub-windows merged on a lag-1 test covered about 0.80 (the old method).
    assert 0.91 <= _coverage(kind, 200) <= 0.99


def test_noisier_machine_gives_a_wider_interval() -> None:
    rng = random.Random(7)

    def spreads(kind: str) -> list:
        return [window_spread(window_streams(Noise(kind), CELL, rng), 0.0, CELL.window_s) for _ in range(15)]

    quiet, noisy = spreads("lockstep"), spreads("ar1")
    width = lambda spread: statistics.median(s.total_tok_s.relative for s in spread if s.total_tok_s)  # noqa: E731
    assert width(noisy) > 2 * width(quiet)
    assert all(s.sub_windows == BATCHES and s.tbt_ms and s.per_request_tok_s for s in quiet)
    assert quiet[0].tbt_ms.value == pytest.approx(CELL.step_s * 1000, rel=0.2)


def test_a_window_with_a_silent_part_has_no_interval() -> None:
    rng = random.Random(3)
    results = window_streams(Noise("lockstep"), CELL, rng)
    for r in results:  # nothing arrives in the second half of the window
        r.token_events = [(t, c) for t, c in r.token_events if t <= 4.0]
    spread = window_spread(results, 0.0, CELL.window_s)
    assert spread.total_tok_s is None and spread.tbt_ms is None and spread.per_request_tok_s is None


def test_halves_that_received_the_same_whole_tokens_still_get_an_interval() -> None:
    """Lockstep streams whose halves each received 24 tokens: counted continuously (`progress_at`), the halves
    still differ by how far each stream was into its next gap, so the interval is not ± 0."""
    times = [-0.1, *(0.2 * i for i in range(1, 25)), *(5.3 + 0.2 * j for j in range(24)), 10.1]
    streams = [StreamResult(started=-0.5, first_token_at=-0.1, token_events=[(t, c) for c, t in enumerate(times, 1)],
                            completion_tokens=len(times)) for _ in range(2)]  # fmt: skip
    assert [sum(tokens_between(r, a, b) for r in streams) for a, b in ((0.0, 5.0), (5.0, 10.0))] == [48, 48]
    spread = window_spread(streams, 0.0, 10.0).total_tok_s
    assert spread is not None and spread.half_width > 0
    first, second = 2 * (25.4 - (1 + 0.1 / 0.3)) / 5, 2 * (49.5 - 25.4) / 5  # each stream's progress at 0, 5, 10
    assert spread.value == pytest.approx((first + second) / 2)
    expected = window_interval([first, second])
    assert expected is not None and spread.half_width == pytest.approx(expected.half_width)


def test_ttft_interval_needs_six_requests() -> None:
    rng = random.Random(5)
    eight = window_spread(window_streams(Noise("lockstep"), Cell(streams=8), rng), 0.0, 10.0)
    five = window_spread(window_streams(Noise("lockstep"), Cell(streams=5), rng), 0.0, 10.0)
    assert eight.ttft_ms is not None and eight.ttft_ms.half_width > 0
    assert five.ttft_ms is None


def test_median_interval_is_interpolated_between_order_statistics_and_covers() -> None:
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None
    six = median_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert six is not None and six.value == 3.5
    # n = 6: [x1, x6] holds the median with 0.969, [x2, x5] with 0.781; interpolated, the weight on the inner
    # pair is 5 * 0.1 / (1 + 4 * 0.1) (share 0.1 = (0.969 - 0.95) / (0.969 - 0.781)): bounds 1.357 and 5.643.
    assert six.half_width == pytest.approx(3.5 - (1 + 0.5 / 1.4), rel=1e-6)
    assert six.ends == six.bounds == (pytest.approx(1 + 0.5 / 1.4), pytest.approx(6 - 0.5 / 1.4))
    rng, held, within, trials = random.Random(2), 0, 0, 2000
    for _ in range(trials):
        sample = [rng.lognormvariate(0.0, 0.5) for _ in range(9)]
        interval = median_interval(sample)
        assert interval is not None
        held += abs(interval.value - 1.0) <= interval.half_width  # the true median of LogNormal(0, .5) is 1
        low, high = interval.bounds
        within += low <= 1.0 <= high
    assert 0.93 <= held / trials <= 0.99
    # its own ends, not ± the larger side: the interpolation's 95 % (the symmetric display held it more often)
    assert 0.93 <= within / trials <= 0.97 and within < held


def test_batch_means_and_t_quantiles() -> None:
    interval = batch_means([10.0, 12.0, 11.0, 9.0])
    assert interval is not None
    assert interval.value == pytest.approx(10.5)
    assert interval.dof == pytest.approx(2.5)  # 3 less the half degree the calibration takes off
    assert interval.half_width == pytest.approx(t_quantile(2.5) * (1.6666666 / 4) ** 0.5, rel=1e-4)
    assert batch_means([1.0]) is None
    assert t_quantile(1) == pytest.approx(12.706, abs=1e-3) and t_quantile(math.inf) == pytest.approx(1.95996, 1e-4)
    with pytest.raises(ValueError):
        t_quantile(0)


def test_window_interval_is_two_halves_at_0_9_degrees_of_freedom() -> None:
    # halves 10 and 12: mean 11, sd sqrt(((10-11)^2 + (12-11)^2) / 1) = sqrt(2), standard error sqrt(2)/sqrt(2) = 1
    interval = window_interval([10.0, 12.0])
    assert interval is not None and interval.value == pytest.approx(11.0) and interval.dof == pytest.approx(0.9)
    assert interval.half_width == pytest.approx(t_quantile(0.9))
    # 400 and 380 tok/s: mean 390, sd sqrt(200), standard error 10
    assert window_interval([400.0, 380.0]).half_width == pytest.approx(10 * t_quantile(0.9))  # type: ignore[union-attr]
    assert window_interval([400.0, 400.0]).half_width == 0.0  # type: ignore[union-attr]
    assert window_interval([10.0, 12.0, 11.0]) is None and window_interval([10.0]) is None


def test_t_quantile_at_095_degrees_of_freedom_against_the_density() -> None:
    from scipy.integrate import quad
    from scipy.special import gamma

    # t with 1 degree of freedom is Cauchy: its 0.975 quantile is tan(0.475 pi) = 12.7062; fewer degrees, wider
    assert t_quantile(1.0) == pytest.approx(math.tan(0.475 * math.pi), rel=1e-9)
    nu, q = 0.95, t_quantile(0.95)
    scale = gamma((nu + 1) / 2) / (math.sqrt(nu * math.pi) * gamma(nu / 2))

    def density(x: float) -> float:
        return float(scale * (1 + x * x / nu) ** (-(nu + 1) / 2))

    assert q > 12.71 and 0.5 + quad(density, 0, q)[0] == pytest.approx(0.975, abs=1e-6)


def test_window_dof_reads_each_record_as_it_was_built() -> None:
    assert window_dof(2, recorded=0.9) == 0.9 and window_dof(2, 0.5, 0.9) == 0.9  # as the record says
    assert window_dof(2) == pytest.approx(0.95)  # halves recorded before the dof was, whatever the legacy discount
    assert window_dof(2, 0.5) == pytest.approx(0.95) and window_dof(2, recorded=math.nan) == pytest.approx(0.95)
    assert window_dof(2, recorded=1e-9) == pytest.approx(0.95)  # no dof the toolkit writes (a damaged run.json)
    assert window_dof(3) == 2.0 and window_dof(3, 0.5) == 1.5  # 3 parts, as compare and the control line read them
    assert window_dof(5.0) == 4.0


def test_a_ratio_reads_windows_recorded_at_either_halves_dof_alike() -> None:
    # one window's standard error 10 on 400 tok/s, its half-width recorded at 0.9 (now) or 0.95 (before)
    now, before = Interval(400.0, 10 * t_quantile(0.9), 0.9), Interval(400.0, 10 * t_quantile(0.95), 0.95)
    assert now.relative_se == pytest.approx(before.relative_se) == pytest.approx(10 / 400)
    assert ratio_dof(now, before) == ratio_dof(before, before) == ratio_dof(now, now) == pytest.approx(1.65)
    assert ratio_test(before, now).interval.half_width == pytest.approx(ratio_test(before, before).interval.half_width)
    assert ratio_dof(now, Interval(400.0, 10 * t_quantile(1.5), 1.5)) != pytest.approx(1.65)  # 3 parts: Welch


def test_a_run_against_itself_is_not_significant() -> None:
    cell = Interval(341.0, 4.0, 2)
    test = ratio_test(cell, cell)
    assert not significant(test.interval) and test.p_value == pytest.approx(1.0)


def test_twenty_percent_apart_with_tight_intervals_is_significant() -> None:
    test = ratio_test(Interval(300.0, 3.0, 9), Interval(360.0, 4.0, 9))
    assert test.interval.value == pytest.approx(1.2)
    assert significant(test.interval) and test.p_value < 0.001
    assert 9 < test.interval.dof < 18  # Welch–Satterthwaite between the two cells' 9
    assert not significant(ratio_interval(Interval(300.0, 40.0, 2), Interval(330.0, 45.0, 2)))


def test_two_windows_ratio_reads_the_pooled_dof_less_its_discount_not_welch() -> None:
    # one window's half-width ten times the other's: Welch–Satterthwaite from the two estimates would give
    # 0.95 x (1 + 100)^2 / (1 + 100^2) = 0.969 degrees of freedom, so t = 13.2; pooled, 0.95 + 0.95 - 0.25
    base, other = Interval(400.0, 4.0, 0.95), Interval(380.0, 38.0, 0.95)
    test = ratio_test(base, other)
    assert test.interval.dof == pytest.approx(1.65)
    se = math.hypot(0.01, 0.1) / t_quantile(0.95)
    spread = t_quantile(1.65) * se  # 5.3 standard errors, not 13
    assert test.interval.half_width == pytest.approx(0.95 * math.expm1(spread))
    assert test.p_value == pytest.approx(2 * stdtr(1.65, -abs(math.log(0.95)) / se))
    # any other pair keeps Welch–Satterthwaite: a window beside a repeated cell's rounds (2 dof)
    mixed = ratio_test(base, Interval(380.0, 38.0, 2.0))
    a, b = (0.01 / t_quantile(0.95)) ** 2, (0.1 / t_quantile(2.0)) ** 2
    assert mixed.interval.dof == pytest.approx((a + b) ** 2 / (a * a / 0.95 + b * b / 2.0))


def test_family_correction_and_overall_ratio() -> None:
    # One true difference among 36 tests at p = 0.001 stays marked; a lone p = 0.03 does not survive 36 tests.
    p_values = [0.001, 0.03, *([0.5] * 34), None]
    adjusted = adjusted_p_values(p_values)
    assert marked(adjusted[0]) is True and marked(adjusted[1]) is False and adjusted[-1] is None
    assert adjusted[1] == pytest.approx(0.5)  # step-up: no larger than the largest p times 36 / 36
    overall = overall_ratio([Interval(1.1, 0.05, 2), Interval(1.1, 0.05, 2), Interval(1.1, 0.05, 2)])
    assert overall is not None and overall.value == pytest.approx(1.1)
    assert overall.half_width < 0.05  # three cells agree: narrower than one
    assert overall_ratio([]) is None


def test_an_overall_ratio_past_any_float_bound_is_unbounded_not_an_overflow() -> None:
    """A cell with an enormous interval and almost no degrees of freedom (a Ray batch's compare under load raised
    OverflowError in the compare notebook): the overall ratio keeps its value and has no bound."""
    wild = [Interval(1.0, 0.001, 0.05), Interval(2.0, 1e6, 0.2), Interval(1.0, 0.01, 3)]
    overall = overall_ratio(wild)
    assert overall is not None and overall.value == pytest.approx(2 ** (1 / 3)) and overall.half_width == math.inf
    tame = overall_ratio([Interval(1.0, 0.02, 3), Interval(1.0, 0.02, 3)])
    assert tame is not None and 0 < tame.half_width < 0.02  # a bound below the overflow is kept


def test_two_means_over_as_many_rounds_pool_their_degrees_of_freedom() -> None:
    """3 rounds a side: the pooled t's 2 + 2 = 4, whatever the two spreads; Welch–Satterthwaite for the same
    numbers without the rounds' mark (at most 4), and for rounds of different counts."""
    a, b = Interval(100.0, 5.0, 2.0, rounds=True), Interval(100.0, 9.0, 2.0, rounds=True)
    assert ratio_dof(a, b) == 4.0
    plain = ratio_dof(Interval(100.0, 5.0, 2.0), Interval(100.0, 9.0, 2.0))
    assert plain == welch_dof([(a.relative_se**2, 2.0), (b.relative_se**2, 2.0)]) and plain < 4.0
    assert ratio_dof(a, Interval(100.0, 9.0, 3.0, rounds=True)) < 5.0


def test_a_log_scale_interval_reads_its_upper_side_as_a_factor() -> None:
    """A ratio's interval (and a median's, in a ratio) is symmetric on the log scale with its upper side as the
    half-width: its bounds are the value divided and multiplied by 1 + relative, its standard error log1p's.
    Two 8-request TTFT medians at ±50 %: read as linear (0.5 / 1.96 a side) the ratio's interval ran to ±140 %
    and held the truth 0.990-0.996 of the time (benchmarks/calibration.py, `ratio_ttft`)."""
    assert Interval(2.0, 1.0, log_scale=True).bounds == pytest.approx((2.0 / 1.5, 3.0))
    assert Interval(2.0, 1.0).bounds == (1.0, 3.0)
    ttft = Interval(80.0, 40.0, log_scale=True)  # as compare reads a TTFT window's median interval
    assert ttft.relative_se == pytest.approx(math.log(1.5) / 1.96, rel=1e-4)
    ratio = ratio_test(ttft, ttft).interval
    spread = math.sqrt(2) * math.log(1.5)  # 1.96 × both standard errors in quadrature (normal: inf dof)
    assert ratio.log_scale and ratio.half_width == pytest.approx(math.expm1(spread))  # 0.77 (linear: 1.03)
    low, high = ratio.bounds
    assert low == pytest.approx(math.exp(-spread)) and high == pytest.approx(math.exp(spread))
    assert median_interval([70.0, 75.0, 78.0, 80.0, 82.0, 90.0, 120.0, 160.0]).log_scale  # type: ignore[union-attr]
    # The overall ratio of one cell is that cell's interval, not a wider one.
    one = overall_ratio([Interval(1.55, 0.44, 4.0, log_scale=True)])
    assert one is not None and one.half_width == pytest.approx(0.44) and one.log_scale
