"""The gate's rate quantities (pure), by hand: a step's goodput error from its SLO fraction's interval, the
common rates' geometric mean, rates left out where a side met no request, the SLO search brackets, the lines."""

from __future__ import annotations

import math

import pytest

from toolkit.base.errors import ParamsError
from toolkit.method.gate import Verdict
from toolkit.reports.gate_rate_rounds import paired_goodput
from toolkit.reports.gate_rates import (
    Limits,
    bracket,
    goodput_ratio,
    judge_goodput,
    judge_slo_rate,
    rate_goodputs,
    slo_rate_interval,
    split_limits,
    step_log_se,
)
from toolkit.reports.gate_ratios import BetweenRuns
from toolkit.reports.gate_text import GateContext, gate_line

pytestmark = pytest.mark.unit

Z95 = 1.959964  # the normal's 97.5 % quantile
TEN = BetweenRuns({"goodput": 0.10, "slo_rate": 0.10})  # `--between-runs 10%`
APART = GateContext("apart", "base", "cand", 0, 0.95, interleave_command="vllm-speedtest interleave …")


def step(rate: float, goodput: float, fraction: float, low: float, high: float) -> dict[str, float]:
    return {"offered_rate": rate, "goodput": goodput, "slo_fraction": fraction, "slo_fraction_low": low,
            "slo_fraction_high": high}  # fmt: skip


BASE = [step(2, 1.90, 0.95, 0.94, 0.96), step(4, 3.80, 0.95, 0.94, 0.96)]
CAND = [step(2, 1.52, 0.76, 0.75, 0.77), step(4, 3.04, 0.76, 0.75, 0.77)]  # 20 % fewer requests meet the SLO


def test_a_steps_goodput_error_is_its_fractions_larger_side_on_the_log_scale() -> None:
    # ln(0.95 / 0.94) = 0.010582 > ln(0.96 / 0.95) = 0.010471; over 1.959964: 0.0053991
    assert step_log_se(0.95, 0.94, 0.96) == pytest.approx(0.0053991, abs=1e-7)
    assert step_log_se(1.0, 0.97, 1.0) == pytest.approx(-math.log(0.97) / Z95)  # all met: the low side only
    assert step_log_se(0.0, 0.0, 0.02) == math.inf  # none met: no log


def test_a_rates_steps_pool_as_the_mean_of_their_logs() -> None:
    steps = [step(2, 1.8, 0.9, 0.88, 0.92), step(2.0000000001, 2.0, 0.9, 0.88, 0.92), step(4, 0.0, 0.0, 0.0, 0.01)]
    found = rate_goodputs([*steps, {"offered_rate": 8, "goodput": None, "slo_fraction": None}])
    se = math.log(0.9 / 0.88) / Z95  # 0.011467 each; two steps: √2 se / 2
    assert found[2.0] == pytest.approx((math.log(math.sqrt(1.8 * 2.0)), math.sqrt(2) * se / 2), rel=1e-6)
    assert found[4.0] is None and 8.0 not in found  # none met at 4; 8 recorded no goodput


def test_a_20_percent_goodput_regression_over_two_rates_by_hand() -> None:
    # each rate: ln 0.8, se √(0.0053991² + 0.0067579²) = 0.0086498; two rates: se = √(2 · 0.0086498²) / 2 = 0.0061164
    found = goodput_ratio(rate_goodputs(BASE), rate_goodputs(CAND), 0.95)
    assert found.rates == (2.0, 4.0) and found.candidate_zero == found.baseline_zero == ()
    assert found.interval is not None and found.interval.rounds == 0  # measured apart
    assert found.interval.ratio == pytest.approx(0.8) and found.interval.se == pytest.approx(0.0061164, abs=1e-7)
    assert (found.interval.low, found.interval.high) == pytest.approx((0.790467, 0.809648), abs=1e-6)  # 0.8 e^∓0.011988
    with pytest.raises(ValueError, match="no offered rate in common"):
        goodput_ratio(rate_goodputs(BASE), rate_goodputs([step(3, 2.0, 0.95, 0.94, 0.96)]), 0.95)


def test_goodput_is_judged_as_runs_measured_apart() -> None:
    found = goodput_ratio(rate_goodputs(BASE), rate_goodputs(CAND), 0.95)
    failed = judge_goodput(found, 0.05, TEN)  # [0.790467 / 1.1, 0.809648 × 1.1] = [0.7186, 0.8906] < 0.95
    assert failed.verdict is Verdict.FAIL and failed.cells == 2
    assert gate_line(failed, APART) == ("FAIL goodput: 0.800× [0.719, 0.891] over 2 common rates, allowed −5 %; "
                                        "measured apart, widened by ±10 % between runs")  # fmt: skip
    assert judge_goodput(found, 0.30, TEN).verdict is Verdict.PASS  # 0.7186 ≥ 0.70
    unsure = judge_goodput(found, 0.05, None)
    assert unsure.verdict is Verdict.INCONCLUSIVE
    assert gate_line(unsure, APART) == (
        "INCONCLUSIVE goodput: 0.800× [0.790, 0.810] over 2 common rates, allowed −5 %; measured apart: the "
        "machine's change between the sweeps is in no interval; to settle it, allow one: --between-runs 10%"
    )  # no interleave command: it measures no sweep
    stored = judge_goodput(found, 0.05, BetweenRuns({"total_tok_s": 0.1}, "aa.json", 4))
    assert stored.reason == "measured apart: aa.json holds no between-run allowance for goodput"


def test_a_rate_where_a_side_met_no_request_is_left_out_and_bars_a_verdict() -> None:
    none_met = step(8, 0.0, 0.0, 0.0, 0.01)
    same = goodput_ratio(rate_goodputs([*BASE, none_met]), rate_goodputs([*BASE, none_met]), 0.95)
    assert same.rates == (2.0, 4.0) and same.candidate_zero == same.baseline_zero == ()  # none on both: no ratio
    worse = goodput_ratio(rate_goodputs([*BASE, step(8, 1.0, 0.125, 0.1, 0.15)]), rate_goodputs([*BASE, none_met]),
                          0.95)  # fmt: skip
    assert worse.candidate_zero == (8.0,)
    judged = judge_goodput(worse, 0.30, TEN)  # [1.0 e^∓0.0075 / 1.1, … × 1.1] alone would pass at 30 %
    assert judged.verdict is Verdict.INCONCLUSIVE
    assert judged.reason == "the candidate's goodput may be 0 at 8 req/s: it cannot pass"
    assert judged.basis == "over 2 common rates (left out: 8 req/s, where a side met no request)"
    better = goodput_ratio(rate_goodputs([*BASE, none_met]), rate_goodputs([*CAND, step(8, 1.0, 0.1, 0.05, 0.2)]),
                           0.95)  # fmt: skip
    assert judge_goodput(better, 0.05, TEN).reason == "the baseline's goodput may be 0 at 8 req/s: it cannot fail"
    nothing = goodput_ratio(rate_goodputs([none_met]), rate_goodputs([step(8, 1.0, 0.1, 0.05, 0.2)]), 0.95)
    assert judge_goodput(nothing, 0.05, TEN).verdict is Verdict.INCONCLUSIVE and nothing.interval is None


def test_the_highest_rate_meeting_the_slo_from_the_two_brackets() -> None:
    assert bracket({"highest_rate": 4, "bracket": [4, 5]}) == (4.0, 5.0)
    assert bracket({"bracket": [None, 2]}) == "bracket open below: no rate shown to meet the SLO"
    assert bracket({"bracket": [2, None]}) == bracket({"bracket": [2, "inf"]})
    assert bracket({"bracket": [2, "inf"]}) == "bracket open above: no finite rate shown to fail the SLO"
    assert bracket(False) == bracket(None) == "no SLO search"
    found = slo_rate_interval((4.0, 5.0), (3.2, 4.0))  # [3.2 / 5, 4 / 4]; √(3.2 · 4 / (4 · 5)) = 0.8
    assert (found.ratio, found.low, found.high) == pytest.approx((0.8, 0.64, 1.0))
    judged = judge_slo_rate((4.0, 5.0), (3.2, 4.0), 0.30, TEN)  # widened [0.5818, 1.1] straddles 0.70
    assert judged.verdict is Verdict.INCONCLUSIVE
    failed = judge_slo_rate((4.0, 5.0), (2.0, 3.0), 0.05, TEN)  # [0.4, 0.75] widened [0.3636, 0.825] < 0.95
    assert gate_line(failed, APART) == (
        "FAIL highest rate meeting the SLO: 0.548× [0.364, 0.825] from the brackets [4, 5] and [2, 3] req/s, "
        "allowed −5 %; measured apart, widened by ±10 % between runs"
    )  # √(2 · 3 / 20) = 0.5477
    open_one = judge_slo_rate((4.0, 5.0), "no SLO search", 0.05, TEN)
    assert gate_line(open_one, APART) == ("INCONCLUSIVE highest rate meeting the SLO: — (candidate: no SLO search), "
                                          "allowed −5 %")  # fmt: skip


def test_limits_name_the_rate_quantities_apart() -> None:
    assert split_limits("3%,goodput=5%") == Limits({"total_tok_s": 0.03, "per_request_tok_s": 0.03},
                                                   {"goodput": 0.05}, 0.03, False)  # fmt: skip
    assert split_limits("slo_rate=10%,ttft_ms=10%") == Limits({"ttft_ms": 0.10}, {"slo_rate": 0.10}, None, True)
    assert split_limits("goodput=5%") == Limits({}, {"goodput": 0.05}, None, False)
    with pytest.raises(ParamsError, match=r"unknown quantity 'speed'; allowed: total_tok_s, .*, goodput, slo_rate$"):
        split_limits("speed=3%")
    with pytest.raises(ParamsError, match="goodput given twice"):
        split_limits("goodput=5%,goodput=4%")
    with pytest.raises(ParamsError, match="max-regression: goodput: 'five' is not a percentage"):
        split_limits("goodput=five")


def test_interleaved_goodput_pairs_the_rounds_over_the_rates_every_round_ran() -> None:
    def g(value: float) -> tuple[float, float]:
        return (math.log(value), 0.01)

    rounds = [({2.0: g(1.0), 4.0: g(2.0), 8.0: g(4.0), 16.0: g(8.0)}, {2.0: g(0.8), 4.0: g(1.6), 8.0: None}),
              ({2.0: g(1.1), 4.0: g(2.0), 8.0: g(4.0)}, {2.0: g(0.88), 4.0: g(1.5), 8.0: g(3.0)})]  # fmt: skip
    found = paired_goodput(rounds, 0.95)
    # 16 ran in one round only; at 8 the candidate's may be 0 in round 1: left out, it cannot pass.
    # Over 2 and 4: round 1 √(0.8 · 1.6 / 2) = 0.8, round 2 √(0.88 · 1.5 / 2.2) = 0.774597; log mean −0.239278,
    # se |ln 0.8 − ln 0.774597| / 2 = 0.016135, t(1, 97.5 %) = 12.706: e^∓0.20501 around 0.78720
    assert found.rates == (2.0, 4.0) and found.candidate_zero == (8.0,) and found.baseline_zero == ()
    assert found.interval is not None and found.interval.rounds == 2
    assert (found.interval.ratio, found.interval.low, found.interval.high) == pytest.approx(
        (0.78720, 0.64128, 0.96631), abs=2e-5)  # fmt: skip
    judged = judge_goodput(found, 0.5, None)
    assert judged.verdict is Verdict.INCONCLUSIVE and "may be 0 at 8 req/s: it cannot pass" in (judged.reason or "")
    with pytest.raises(ValueError):
        paired_goodput([({2.0: g(1.0)}, {4.0: g(1.0)})], 0.95)
