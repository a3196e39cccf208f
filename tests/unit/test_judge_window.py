"""A decode window's verdict (toolkit/matrix/verdict.py, the Measurement fields it fills) from synthetic token
events and server samples: the pure half of a decode cell (toolkit/matrix/decode.py streams and scrapes)."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit.base.schema import COLUMNS, Measurement
from toolkit.loadgen.client import StreamResult
from toolkit.matrix.prometheus import MetricsSnapshot
from toolkit.matrix.sampler import Samples
from toolkit.matrix.verdict import Speculation, WindowEdges, WindowVerdict, judge_window


def snapshot(generated: float, itl_sum: float = 0.0, itl_count: float = 0.0) -> MetricsSnapshot:
    return MetricsSnapshot({"vllm:generation_tokens_total": [({}, generated)],
                            "vllm:inter_token_latency_seconds_sum": [({}, itl_sum)],
                            "vllm:inter_token_latency_seconds_count": [({}, itl_count)]})  # fmt: skip


def stream(start: float, first: float, step: float, count: int, ended: float | None = None) -> StreamResult:
    """A request sent at `start` whose tokens arrive one by one every `step` s from `first`."""
    events = [(first + i * step, i + 1) for i in range(count)]
    return StreamResult(started=start, first_token_at=first, token_events=events, ended=ended,
                        done=ended is not None)  # fmt: skip


def edges(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> WindowEdges:
    """A 2 s window at 10..12 with 10 ms scrapes at both edges."""
    return WindowEdges(start=10.0, end=12.0, before_sent=10.0, before_received=10.01, after_sent=12.0,
                       after_received=12.01, before=before, after=after, cpu_pct=20.0)  # fmt: skip


def samples(running: int, waiting: int = 0) -> Samples:
    times = [10.0 + 0.25 * i for i in range(9)]
    lags = [9.9 + 0.05 * i for i in range(45)]
    return Samples(server=[(t, running, waiting) for t in times], times=times, lag_times=lags,
                   loop_lag_s=[0.001] * len(lags))  # fmt: skip


def verdict(results: list[StreamResult], window: WindowEdges, server: Samples, **kwargs: object) -> WindowVerdict:
    defaults = {"concurrency": len(results), "duration_s": 2.0, "readiness_queued": False, "use_metrics": True,
                "error": None}  # fmt: skip
    return judge_window(results, window, server, **(defaults | kwargs))


def judge(results: list[StreamResult], window: WindowEdges, server: Samples, **kwargs: object) -> dict[str, Any]:
    """The verdict as the Measurement fields it fills."""
    return verdict(results, window, server, **kwargs).measurement_fields()


def test_two_steady_streams() -> None:
    # Tokens every 10 ms from 9.0 s: 200 of each stream's tokens fall in (10, 12].
    results = [stream(8.9, 9.0, 0.01, 400), stream(8.9, 9.0, 0.01, 400)]
    fields = judge(results, edges(snapshot(1000, 0.0, 0.0), snapshot(1400, 4.0, 400.0)), samples(2))
    assert fields["status"] == "Valid" and fields["error"] is None and fields["disturbed"] is None
    assert fields["output_tokens"] == 400
    assert fields["measured_s"] == pytest.approx(2.0)
    assert fields["total_tok_s"] == pytest.approx(200.0)
    assert fields["per_request_tok_s"] == pytest.approx(100.0) and fields["tbt_ms"] == pytest.approx(10.0)
    assert fields["ttft_ms"] == pytest.approx(100.0)
    assert fields["server_output_tokens"] == 400 and fields["server_tbt_ms"] == pytest.approx(10.0)
    assert fields["client_tokens_min"] <= 400 <= fields["client_tokens_max"]
    assert fields["avg_active"] == 2 and fields["concurrency_held"] == 1.0 and fields["status_basis"] == "server"
    # Perfectly steady streams cut in 2 halves of 100 tokens each (3 parts gave 66 or 67): neither the total nor the
    # time between tokens spreads; 2 requests are too few for a TTFT interval.
    assert fields["sub_windows"] == 2 and fields["ttft_ms_ci"] is None
    assert fields["window_dof"] == pytest.approx(0.9)  # recorded, so a later dof still reads this record as made
    assert fields["total_tok_s_ci"] == pytest.approx(0.0, abs=1e-6) and fields["tbt_ms_ci"] == pytest.approx(
        0.0, abs=1e-6
    )


def test_requests_finished_before_the_window_are_left_out_but_counted_as_started() -> None:
    ramp = stream(5.0, 5.5, 0.01, 10, ended=5.6)  # its TTFT (500 ms) is from before the window
    live = stream(8.9, 9.0, 0.01, 400)
    fields = judge([ramp, live], edges(None, None), samples(1), concurrency=1)
    assert fields["requests_started"] == 2 and fields["ttft_ms"] == pytest.approx(100.0)


def test_waiting_held_is_queued_and_a_silence_disturbs() -> None:
    results = [stream(8.9, 9.0, 0.01, 100), stream(8.9, 11.5, 0.01, 10)]  # nothing from 10.0 to 11.5
    fields = judge(results, edges(snapshot(0), snapshot(20)), samples(1, waiting=1))
    assert fields["status"] == "Requests queued" and fields["max_waiting"] == 1
    assert fields["disturbed"] == "no token for 1.5 s" and fields["longest_silence_s"] == pytest.approx(1.5)
    assert fields["concurrency_held"] == 0.5


def test_an_empty_window_is_an_error_that_says_why() -> None:
    results = [stream(8.9, 9.0, 0.01, 10)]  # all tokens before the window
    fields = judge(results, edges(snapshot(0), snapshot(0)), samples(1))
    assert fields["status"] == "Error" and fields["total_tok_s"] is None
    assert fields["total_tok_s_ci"] is None and fields["sub_windows"] is None and fields["window_dof"] is None
    assert fields["error"] == "no token arrived in the 2 s window (no token for 2.0 s)"
    assert fields["disturbed"] == "no token for 2.0 s"  # so the runner measures it again first


def test_without_metrics_the_client_judges() -> None:
    results = [stream(8.9, 9.0, 0.01, 400)]
    fields = judge(results, edges(None, None), samples(1), use_metrics=False, readiness_queued=True)
    assert fields["status"] == "Requests queued" and fields["status_basis"] == "client"
    assert fields["server_output_tokens"] is None and fields["client_tokens_min"] is None


def test_speculative_decoding_counters_give_acceptance_and_mean_accepted_length() -> None:
    results = [stream(8.9, 9.0, 0.01, 400)]
    before, after = snapshot(1000), snapshot(1200)
    for snap, (drafts, drafted, accepted) in ((before, (10, 30, 15)), (after, (60, 180, 105))):
        snap.samples["vllm:spec_decode_num_drafts_total"] = [({}, drafts)]
        snap.samples["vllm:spec_decode_num_draft_tokens_total"] = [({}, drafted)]
        snap.samples["vllm:spec_decode_num_accepted_tokens_total"] = [({}, accepted)]
    fields = judge(results, edges(before, after), samples(1))
    assert (fields["spec_drafts"], fields["spec_draft_tokens"], fields["spec_accepted_tokens"]) == (50, 150, 90)
    assert fields["spec_acceptance_rate"] == pytest.approx(0.6)
    assert fields["spec_mean_accepted_len"] == pytest.approx(1 + 90 / 50)


def test_without_speculation_counters_the_fields_are_absent_not_zero() -> None:
    judged = verdict([stream(8.9, 9.0, 0.01, 400)], edges(snapshot(1000), snapshot(1200)), samples(1))
    assert judged.speculation == Speculation() and judged.speculation.spec_acceptance_rate is None


def test_the_verdict_fills_measurement_fields_by_name_and_type() -> None:
    results = [stream(9.0, 9.1, 0.01, 400), stream(9.0, 9.1, 0.01, 400)]
    judged = verdict(results, edges(snapshot(1000, 0.0, 0.0), snapshot(1400, 4.0, 400.0)), samples(2))
    assert judged.status == "Valid" and judged.counters.server_output_tokens == 400 and judged.disturbed is None
    fields = judged.measurement_fields()
    assert set(fields) <= set(COLUMNS) and "counters" not in fields and "speculation" not in fields
    m = Measurement(phase="decode", context_tokens=64, context="64", concurrency=2, **fields)
    assert m.total_tok_s == judged.total_tok_s and m.server_tbt_ms == judged.counters.server_tbt_ms


def test_the_median_ttft_keeps_its_intervals_own_ends() -> None:
    """Eight requests whose TTFTs skew right (100, 101, 102, 104, 108, 116, 132, 164 ms): the record keeps the
    median's order-statistic interval by its ends, farther above the median than below, beside its larger side as
    the half-width, which compare's ratio reads."""
    ttfts = (100, 101, 102, 104, 108, 116, 132, 164)
    results = [stream(9.0 - t / 1000, 9.0, 0.01, 400) for t in ttfts]
    fields = judge(results, edges(snapshot(1000), snapshot(2600)), samples(8))
    low, high = fields["ttft_ms_low"], fields["ttft_ms_high"]
    assert fields["ttft_ms"] == pytest.approx(106.0) and low is not None and high is not None
    assert 100.0 <= low < 106.0 < high <= 164.0 and high - 106.0 > 106.0 - low
    assert fields["ttft_ms_ci"] == pytest.approx(high - 106.0)
