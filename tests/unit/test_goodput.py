"""Open-loop steps judged from per-request records: latencies, service level, goodput, the passing bracket."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from toolkit.method.goodput import (
    BOUND_COLUMNS,
    REQUIRED_RECORD_COLUMNS,
    ServiceLevel,
    highest_rate_meeting,
    inter_token_ms,
    judge_steps,
    request_latencies,
    summarize_step,
)


def record(step: int, i: int, *, sent: float, ttft: float, gap: float, tokens: int, error: str | None = None) -> dict:
    first = sent + ttft
    chunks = [first + k * gap for k in range(tokens)]
    failed = error is not None
    return {"step": step, "offered_rate": 2.0 * (step + 1), "request": i, "scheduled_s": sent - 0.001, "sent_s": sent,
            "first_token_s": math.nan if failed else first, "last_token_s": math.nan if failed else chunks[-1],
            "chunk_times_s": [] if failed else chunks, "input_tokens": 128, "output_tokens": 0 if failed else tokens,
            "error": error}  # fmt: skip


def sweep() -> pd.DataFrame:
    """Step 0: four fast requests; step 1: slow first tokens on two of four, one failed."""
    rows = [record(0, i, sent=0.5 * i, ttft=0.05, gap=0.01, tokens=11) for i in range(4)]
    rows += [record(1, 0, sent=0.0, ttft=0.05, gap=0.02, tokens=11), record(1, 1, sent=0.25, ttft=0.4, gap=0.02,
             tokens=11), record(1, 2, sent=0.5, ttft=0.9, gap=0.02, tokens=11),
             record(1, 3, sent=0.75, ttft=0.0, gap=0.0, tokens=1, error="HTTP 500")]  # fmt: skip
    frame = pd.DataFrame(rows)
    assert tuple(frame.columns) == REQUIRED_RECORD_COLUMNS
    return frame


def test_latencies_from_the_send() -> None:
    lat = request_latencies(sweep())
    assert lat["ttft_ms"].iloc[0] == pytest.approx(50)
    assert lat["tpot_ms"].iloc[0] == pytest.approx(10)  # 10 gaps of 10 ms over 10 decode tokens
    assert lat["e2e_ms"].iloc[0] == pytest.approx(150)
    assert lat["lag_ms"].iloc[0] == pytest.approx(1)
    assert not lat["ok"].iloc[-1] and math.isnan(lat["ttft_ms"].iloc[-1])


def test_summary_counts_throughput_and_goodput() -> None:
    records = sweep()
    step1 = records[records["step"] == 1]
    summary = summarize_step(step1, ServiceLevel(ttft_ms=500), trim=0.0)  # every request counts
    assert (summary.requests, summary.completed, summary.failed) == (4, 3, 1)
    duration = (0.5 + 0.9 + 0.2) - 0.0  # last token of request 2
    assert summary.duration_s == pytest.approx(duration)
    assert summary.goodput == pytest.approx(2 / duration)  # requests 0 and 1 meet 500 ms
    assert summary.slo_fraction == pytest.approx(0.5) and not summary.slo_met
    assert summary.output_tok_s == pytest.approx(33 / duration)
    assert summary.scheduled_rate == pytest.approx(3 / 0.75) and summary.achieved_rate == pytest.approx(3 / 0.75)
    assert summary.row()["ttft_p50_ms"] == pytest.approx(400)


def test_warm_up_and_cool_down_are_left_out_of_the_steady_figures_but_counted() -> None:
    """Step 1 is due 0 .. 0.75 s: its first and last 10 % of that (request 0 at 0 s, request 3 at 0.75 s) are the
    ramp and the drain. Counts, throughput and goodput keep every request; percentiles and the fraction the rest."""
    step1 = sweep()[sweep()["step"] == 1]
    summary = summarize_step(step1, ServiceLevel(ttft_ms=500))
    assert (summary.requests, summary.completed, summary.steady_requests) == (4, 3, 2)
    assert summary.slo_fraction == pytest.approx(0.5)  # request 1 meets 500 ms, request 2 (900 ms) does not
    assert summary.row()["ttft_p50_ms"] == pytest.approx(650)  # of 400 and 900, not of 50, 400, 900
    assert summary.goodput == pytest.approx(2 / 1.6)  # requests 0 and 1 met it, over the whole step


def test_rejudging_equals_direct_computation_for_two_levels() -> None:
    records = sweep()
    for level in (ServiceLevel(ttft_ms=100, target=0.75), ServiceLevel(ttft_ms=1000, tpot_ms=15, target=0.5)):
        judged = judge_steps(records, level).set_index("step")
        for step, group in records.groupby("step"):
            ok = group["error"].isna()
            ttft = (group["first_token_s"] - group["sent_s"]) * 1e3
            tpot = (group["last_token_s"] - group["first_token_s"]) / (group["output_tokens"] - 1) * 1e3
            met = ok & (ttft <= level.ttft_ms) & ((tpot <= level.tpot_ms) if level.tpot_ms else True)
            end = group.loc[ok, "last_token_s"].max()
            assert judged.loc[step, "goodput"] == pytest.approx(met.sum() / (end - group["sent_s"].min()))
            assert judged.loc[step, "slo_met"] == (met.sum() / len(group) >= level.target)
    assert list(judge_steps(records, ServiceLevel(ttft_ms=100, target=0.75))["slo_met"]) == [True, False]


def test_inter_token_gaps_skip_failed_requests() -> None:
    gaps = inter_token_ms(sweep()[lambda f: f["step"] == 0])
    assert len(gaps) == 40 and all(g == pytest.approx(10) for g in gaps)


def test_highest_rate_meeting_is_below_the_first_failure() -> None:
    assert highest_rate_meeting([(1, True), (2, True), (4, False), (8, True)]) == (2, 4)
    assert highest_rate_meeting([(1, True), (2, True)]) == (2, None)
    assert highest_rate_meeting([(1, False)]) == (None, 1)


@pytest.mark.parametrize("kwargs", [{"ttft_ms": 0}, {"tpot_ms": -1}, {"target": 0}, {"target": 1.5}])
def test_service_level_refuses_bad_limits(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ServiceLevel(**kwargs)


def test_more_percentiles_on_request_and_only_where_the_count_supports_them() -> None:
    def step(n: int) -> pd.DataFrame:
        return pd.DataFrame([record(0, i, sent=0.01 * i, ttft=0.001 * (i + 1), gap=0.01, tokens=3) for i in range(n)])

    few = summarize_step(step(200), ServiceLevel(), trim=0.0, percentiles=[95, 99.9]).row()
    assert few["ttft_p95_ms"] == pytest.approx(np.percentile(np.arange(1, 201), 95)) and few["ttft_p99.9_ms"] is None
    assert few["ttft_p50_ms"] is not None and few["ttft_p99_ms"] is not None  # the standard three stay
    many = summarize_step(step(1000), ServiceLevel(), trim=0.0, percentiles=[99.9]).row()
    assert many["ttft_p99.9_ms"] == pytest.approx(np.percentile(np.arange(1, 1001), 99.9))
    assert list(many).index("ttft_p99_ms") + 1 == list(many).index("ttft_p99.9_ms")


def test_percentile_bounds_follow_the_percentiles_in_the_row() -> None:
    """TTFTs of 1 .. n ms: each bound is the order statistic of its rank (toolkit.method.quantile_bounds); p90
    and p99 are unbounded below 36 and 368 requests; ITL's bounds come from the gaps (all 10 ms)."""
    from toolkit.method.quantile_bounds import order_ranks
    from toolkit.results.rate_runs import STEP_NUMBERS

    def step(n: int) -> pd.DataFrame:
        return pd.DataFrame([record(0, i, sent=0.01 * i, ttft=0.001 * (i + 1), gap=0.01, tokens=3) for i in range(n)])

    row = summarize_step(step(400), ServiceLevel(), trim=0.0).row()
    keys = list(row)
    assert keys[keys.index("lag_max_ms") + 1 : keys.index("lag_max_ms") + 1 + len(BOUND_COLUMNS)] == list(BOUND_COLUMNS)
    assert set(BOUND_COLUMNS) <= set(STEP_NUMBERS)  # a reader of an older sweep gets them as NaN
    for q in (50, 90, 99):
        low, high = order_ranks(400, q)
        assert (row[f"ttft_p{q}_low_ms"], row[f"ttft_p{q}_high_ms"]) == pytest.approx((low, high))
        assert row[f"ttft_p{q}_low_ms"] <= row[f"ttft_p{q}_ms"] <= row[f"ttft_p{q}_high_ms"]
        assert row[f"itl_p{q}_low_ms"] == pytest.approx(10) and row[f"itl_p{q}_high_ms"] == pytest.approx(10)
    assert (row["ttft_p99_low_ms"], row["ttft_p99_high_ms"]) == pytest.approx((392, 400))
    few = summarize_step(step(30), ServiceLevel(), trim=0.0).row()
    assert few["ttft_p90_high_ms"] is None and few["ttft_p90_low_ms"] == pytest.approx(order_ranks(30, 90)[0])
    assert few["e2e_sched_p99_high_ms"] is None and few["tpot_p50_high_ms"] is not None
    assert summarize_step(step(36), ServiceLevel(), trim=0.0).row()["ttft_p90_high_ms"] == pytest.approx(36)
    # ITL counts gaps: 30 requests of 3 tokens give 60, enough for a p90's high end (36), not a p99's (368)
    assert few["itl_p90_high_ms"] == pytest.approx(10) and few["itl_p99_high_ms"] is None


def test_percentiles_parameter() -> None:
    from toolkit.params import ParamsError
    from toolkit.rates.params import make_rate_params

    assert make_rate_params({"percentiles": "95,99.9"}).percentiles == [50, 90, 95, 99, 99.9]
    with pytest.raises(ParamsError, match=r"percentiles: '100' is not a percentile; allowed: numbers between 0 and"):
        make_rate_params({"percentiles": "95,100"})
