"""`toolkit.method.window`: tokens inside the window, time between tokens per token, completed requests."""

import pytest

from toolkit.loadgen.client import StreamResult
from toolkit.method.window import (
    active_at,
    longest_silence_s,
    progress_at,
    summarize_window,
    tbt_in_window_s,
    tokens_between,
)


def result(events: list[tuple[float, int]], *, started: float = 0.0, first: float | None = None,
           done: bool = False, ended: float | None = None) -> StreamResult:  # fmt: skip
    r = StreamResult(started=started, token_events=list(events), done=done, ended=ended)
    r.first_token_at = first if first is not None else (events[0][0] if events else None)
    r.completion_tokens = events[-1][1] if events else 0
    return r


def test_tokens_between_counts_arrivals_in_the_half_open_window() -> None:
    r = result([(1.0, 1), (2.0, 3), (3.0, 4), (4.0, 8)])
    assert tokens_between(r, 0.0, 10.0) == 8
    assert tokens_between(r, 1.0, 3.0) == 3  # (1, 3]: the chunk at 1.0 is before, the one at 3.0 inside
    assert tokens_between(r, 1.5, 3.5) == 3
    assert tokens_between(r, 3.5, 10.0) == 4  # a 4-token chunk counts 4, not 1
    assert tokens_between(r, 5.0, 6.0) == 0
    assert tokens_between(result([]), 0.0, 1.0) == 0


def test_tbt_with_multi_token_chunks_is_per_token() -> None:
    # Chunks of 4 tokens every second (as with speculative decoding): 0.25 s per token, not 1 s per chunk.
    r = result([(0.0, 4), (1.0, 8), (2.0, 12), (3.0, 16)])
    assert tbt_in_window_s(r, -1.0, 10.0) == pytest.approx(3.0 / 12)
    assert tbt_in_window_s(r, 0.5, 10.0) == pytest.approx(2.0 / 8)


def test_tbt_needs_two_token_events_in_the_window() -> None:
    r = result([(0.0, 1), (1.0, 2), (2.0, 3)])
    assert tbt_in_window_s(r, 1.5, 10.0) is None  # only one event inside
    assert tbt_in_window_s(result([]), 0.0, 1.0) is None
    assert tbt_in_window_s(r, -1.0, 10.0) == pytest.approx(1.0)


def test_completed_counts_requests_done_inside_the_window() -> None:
    results = [
        result([(0.5, 1), (0.9, 4)], done=True, ended=1.0),  # done before the window
        result([(1.5, 1), (2.0, 4)], done=True, ended=2.1),  # done inside
        result([(2.5, 1), (3.0, 4)], done=True, ended=3.0),  # done at the window's end: inside
        result([(3.5, 1)], done=False, ended=3.6),  # failed/cut inside: not completed
        result([(3.8, 1), (4.5, 4)], done=True, ended=4.6),  # done after the window
        result([(3.9, 1)], done=False, ended=None),  # still running (cancelled at the end)
    ]
    summary = summarize_window(results, 1.0, 4.0)
    assert summary.completed == 2
    assert summary.requests_started == 6


def test_summarize_window_totals() -> None:
    a = result([(0.5, 1), (1.5, 3), (2.5, 5), (3.5, 7)], started=0.4)
    b = result([(1.2, 2), (2.2, 4), (3.0, 6)], started=1.0, first=1.2)
    s = summarize_window([a, b], 1.0, 4.0, sample_times=[1.0, 2.0, 3.0, 4.0])
    assert s.output_tokens == (7 - 1) + 6
    assert s.measured_s == pytest.approx(3.5 - 1.0)  # window start to the last token inside it
    assert s.total_tok_s == pytest.approx(12 / 2.5)
    # per request: a inside (1.5..3.5, 3..7) = 0.5 s/token; b (1.2..3.0, 2..6) = 0.45 s/token
    assert s.tbt_ms == pytest.approx((500 + 450) / 2)
    assert s.per_request_tok_s == pytest.approx((2.0 + 1 / 0.45) / 2)
    assert s.ttft_ms == pytest.approx((100 + 200) / 2)
    assert s.client_avg_active == pytest.approx((1 + 2 + 2 + 2) / 4)


def test_empty_window() -> None:
    s = summarize_window([result([(0.5, 3)], done=True, ended=0.6)], 1.0, 2.0)
    assert s.output_tokens == 0 and s.measured_s is None and s.total_tok_s is None and s.tbt_ms is None
    assert s.completed == 0


def test_active_at_counts_streams_between_first_token_and_end() -> None:
    results = [result([(1.0, 1)], ended=3.0), result([(2.0, 1)], ended=None), result([], ended=None)]
    assert [active_at(results, t) for t in (0.5, 1.0, 2.5, 3.0, 5.0)] == [0, 1, 2, 1, 1]


def test_longest_silence_merges_streams_and_counts_the_window_edges() -> None:
    a = result([(0.1, 1), (0.3, 2), (3.0, 3)])
    b = result([(0.2, 1), (0.4, 2), (1.4, 3)])
    # Arrivals 0.1 0.2 0.3 0.4 1.4 3.0 in (0, 4]: the longest stretch without any token is 1.4 -> 3.0.
    assert longest_silence_s([a, b], 0.0, 4.0) == pytest.approx(1.6)
    # The stall seen on a paused machine: four tokens at the start of a 4 s window, then nothing.
    stalled = result([(0.01, 1), (0.02, 2), (0.027, 4)])
    assert longest_silence_s([stalled], 0.0, 4.0) == pytest.approx(3.973)
    assert longest_silence_s([result([])], 0.0, 4.0) == pytest.approx(4.0)
    assert longest_silence_s([a], 0.5, 2.5) == pytest.approx(2.0)  # events outside the window do not count


def test_tokens_between_an_empty_interval_is_zero() -> None:
    """The inner scrape bracket is empty when the 'before' scrape returned after the 'after' one was sent."""
    from toolkit.loadgen.client import StreamResult
    from toolkit.method.window import tokens_between

    result = StreamResult(started=0.0, token_events=[(1.0, 1), (2.0, 2), (3.0, 3)])
    assert tokens_between(result, 2.5, 1.5) == 0
    assert tokens_between(result, 1.5, 2.5) == 1


def test_tbt_percentiles_are_over_the_gaps_and_ttft_percentiles_need_enough_requests() -> None:
    """TBT p90 and p99 over every gap of every stream (not over the streams' mean gaps), with their 95 % bounds;
    TTFT's p90 from 10 requests and p99 from 100 (from fewer it would be the maximum)."""
    from toolkit.method.window import token_gaps_ms

    steady = [result([(0.01 * i + 0.001 * s, i) for i in range(1, 201)]) for s in range(3)]  # 10 ms a token
    slow = result([(0.1 * i, 2 * i) for i in range(1, 21)])  # a 2-token chunk every 100 ms: 50 ms a token
    gaps = token_gaps_ms([*steady, slow], 0.0, 5.0)
    assert len(gaps) == 3 * 199 + 2 * 19 and gaps.count(pytest.approx(50.0)) == 38
    window = summarize_window([*steady, slow], 0.0, 5.0)
    assert window.tbt_p90_ms == pytest.approx(10.0) and window.tbt_p99_ms == pytest.approx(50.0)
    assert window.tbt_p99_low_ms is not None and window.tbt_p99_high_ms == pytest.approx(50.0)
    assert window.tbt_p99_low_ms <= window.tbt_p99_ms <= window.tbt_p99_high_ms
    # The streams' mean gaps would say 10, 10, 10, 50: a p99 of 49, from 4 values
    assert window.ttft_p90_ms is None and window.ttft_p99_ms is None  # 4 requests
    many = summarize_window([result([(0.001 * s + 0.01, 1), (0.02 + 0.001 * s, 2)]) for s in range(10)], 0.0, 1.0)
    assert many.ttft_p90_ms is not None and many.ttft_p99_ms is None


def test_ttft_percentiles_carry_their_bounds_by_the_rule_of_every_percentile() -> None:
    """A window's TTFT p90 and p99 with 95 % order-statistic bounds: both ends from 36 requests at p90, the upper
    end left empty below it (and at p99 below 368), each end one of the requests' own TTFTs."""
    forty = summarize_window([result([(0.001 * (i + 1), 1)]) for i in range(40)], 0.0, 1.0)  # TTFTs 1 … 40 ms
    ttfts = [float(i + 1) for i in range(40)]
    assert forty.ttft_p90_ms is not None and forty.ttft_p90_low_ms is not None and forty.ttft_p90_high_ms is not None
    assert forty.ttft_p90_low_ms < forty.ttft_p90_ms < forty.ttft_p90_high_ms
    assert forty.ttft_p90_low_ms == pytest.approx(min(ttfts, key=lambda t: abs(t - forty.ttft_p90_low_ms)))
    assert forty.ttft_p90_high_ms == pytest.approx(min(ttfts, key=lambda t: abs(t - forty.ttft_p90_high_ms)))
    assert forty.ttft_p99_ms is None and forty.ttft_p99_high_ms is None  # 40 requests: no p99
    twelve = summarize_window([result([(0.001 * (i + 1), 1)]) for i in range(12)], 0.0, 1.0)
    assert twelve.ttft_p90_ms is not None and twelve.ttft_p90_low_ms is not None
    assert twelve.ttft_p90_high_ms is None  # unbounded above: 0.9^12 = 28 % that all 12 fall below the true p90


def test_progress_accrues_each_arrivals_tokens_over_the_gap_before_it() -> None:
    r = result([(1.0, 1), (2.0, 2), (3.0, 5)])
    assert progress_at(r, 0.5) == 0.0  # before the first token: nothing (its prefill is no progress)
    assert progress_at(r, 1.0) == 1.0
    assert progress_at(r, 1.5) == pytest.approx(1.5)
    assert progress_at(r, 2.5) == pytest.approx(3.5)  # a 3-token chunk at 3.0: half of it by halfway
    assert progress_at(r, 3.0) == progress_at(r, 10.0) == 5.0  # all of it from the last arrival on
    assert progress_at(result([]), 1.0) == 0.0
