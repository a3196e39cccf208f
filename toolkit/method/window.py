"""Pure arithmetic of a measurement window over the streams' token events (docs/method/cells.md quantities)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from toolkit.loadgen.client import StreamResult
from toolkit.method.goodput import supported
from toolkit.method.quantile_bounds import quantile_bounds
from toolkit.method.spread import BATCHES, WINDOW_DOF, Interval, edges, median_interval, window_interval
from toolkit.method.stats import mean, median, percentile


@dataclass(frozen=True)
class WindowSummary:
    output_tokens: int
    measured_s: float | None
    total_tok_s: float | None
    per_request_tok_s: float | None
    per_request_tok_s_p10: float | None
    tbt_ms: float | None
    tbt_p90_ms: float | None  # over the window's gaps between tokens, every stream's (`token_gaps_ms`)
    tbt_p99_ms: float | None
    ttft_ms: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    completed: int
    requests_started: int
    client_avg_active: float | None
    tokens_per_chunk: float | None
    # 95 % distribution-free bounds of tbt_p90_ms and tbt_p99_ms (toolkit.method.quantile_bounds; None: no bound)
    tbt_p90_low_ms: float | None = None
    tbt_p90_high_ms: float | None = None
    tbt_p99_low_ms: float | None = None
    tbt_p99_high_ms: float | None = None
    # and of ttft_p90_ms and ttft_p99_ms, over the window's requests' TTFTs (the same rule: p90 bounded above from 36)
    ttft_p90_low_ms: float | None = None
    ttft_p90_high_ms: float | None = None
    ttft_p99_low_ms: float | None = None
    ttft_p99_high_ms: float | None = None


def tokens_between(result: StreamResult, start: float, end: float) -> int:
    """Tokens of one request that arrived in (start, end]; none when the interval is empty (end <= start)."""
    if end <= start:
        return 0
    before = after = 0
    for t, count in result.token_events:
        if t <= start:
            before = count
        if t <= end:
            after = count
        else:
            break
    return after - before


def progress_at(result: StreamResult, at: float) -> float:
    """One request's tokens by time `at`, counted continuously: each arrival's tokens accrue evenly over the gap
    before it (none before the first arrival, all of them from the last). Two parts of a window that received
    the same whole number of tokens then still differ by how far each stream was into its next gap."""
    events = result.token_events
    i = bisect_right(events, at, key=lambda event: event[0])
    if i == 0:
        return 0.0
    t0, c0 = events[i - 1]
    if i == len(events):
        return float(c0)
    t1, c1 = events[i]
    return c0 + (c1 - c0) * (at - t0) / (t1 - t0)


def tbt_in_window_s(result: StreamResult, start: float, end: float) -> float | None:
    """Time between tokens of one request inside the window, per token (multi-token chunks count fully)."""
    inside = [(t, c) for t, c in result.token_events if start < t <= end]
    if len(inside) < 2 or inside[-1][1] == inside[0][1]:
        return None
    return (inside[-1][0] - inside[0][0]) / (inside[-1][1] - inside[0][1])


def token_gaps_ms(results: Sequence[StreamResult], start: float, end: float) -> list[float]:
    """Every stream's gaps between tokens inside the window (start, end], in ms, one per token: a chunk of k
    tokens after a gap of d gives k gaps of d / k (as `tbt_in_window_s` counts them)."""
    gaps: list[float] = []
    for r in results:
        inside = [(t, c) for t, c in r.token_events if start < t <= end]
        for (t0, c0), (t1, c1) in pairwise(inside):
            if c1 > c0:
                gaps += [(t1 - t0) * 1000 / (c1 - c0)] * (c1 - c0)
    return gaps


def longest_silence_s(results: Sequence[StreamResult], start: float, end: float) -> float:
    """Longest stretch of the window (start, end] in which no stream received a token.

    The edges count: window start to the first token, the last token to the window end. A healthy server
    streams continuously, so a long silence means the server or the machine paused (see `status.disturbance`).
    """
    times = sorted(t for r in results for t, _ in r.token_events if start < t <= end)
    edges = [start, *times, end]
    return max(b - a for a, b in pairwise(edges))


def active_at(results: Sequence[StreamResult], t: float) -> int:
    """Streams decoding at time t: first token received, not yet ended."""
    n = 0
    for r in results:
        first = r.token_events[0][0] if r.token_events else None
        if first is not None and first <= t and (r.ended is None or r.ended > t):
            n += 1
    return n


def summarize_window(
    results: Sequence[StreamResult], start: float, end: float, sample_times: Sequence[float] = ()
) -> WindowSummary:
    """Every client-side quantity of a decode cell from its requests and the window bounds."""
    output = sum(tokens_between(r, start, end) for r in results)
    chunks = sum(1 for r in results for t, _ in r.token_events if start < t <= end)
    last = max((t for r in results for t, _ in r.token_events if start < t <= end), default=None)
    measured = None if last is None else last - start
    tbts = [x for r in results if (x := tbt_in_window_s(r, start, end))]
    rates = [1.0 / x for x in tbts]
    ttfts = [r.ttft_s * 1000 for r in results if r.ttft_s is not None]
    gaps = token_gaps_ms(results, start, end)
    p90, p99 = quantile_bounds(gaps, 90), quantile_bounds(gaps, 99)
    ttft90, ttft99 = quantile_bounds(ttfts, 90), quantile_bounds(ttfts, 99)
    to_ms = lambda x: None if x is None else x * 1000  # noqa: E731
    return WindowSummary(
        output_tokens=output,
        measured_s=measured,
        total_tok_s=output / measured if measured else None,
        per_request_tok_s=median(rates),
        per_request_tok_s_p10=percentile(rates, 10),
        tbt_ms=to_ms(median(tbts)),
        tbt_p90_ms=_supported_percentile(gaps, 90),
        tbt_p99_ms=_supported_percentile(gaps, 99),
        ttft_ms=median(ttfts),
        ttft_p90_ms=_supported_percentile(ttfts, 90),
        ttft_p99_ms=_supported_percentile(ttfts, 99),
        completed=sum(1 for r in results if r.done and r.ended is not None and start < r.ended <= end),
        requests_started=len(results),
        tokens_per_chunk=output / chunks if chunks else None,
        client_avg_active=mean([active_at(results, t) for t in sample_times if start <= t <= end]),
        tbt_p90_low_ms=p90.low,
        tbt_p90_high_ms=p90.high,
        tbt_p99_low_ms=p99.low,
        tbt_p99_high_ms=p99.high,
        ttft_p90_low_ms=ttft90.low,
        ttft_p90_high_ms=ttft90.high,
        ttft_p99_low_ms=ttft99.low,
        ttft_p99_high_ms=ttft99.high,
    )


def _supported_percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile, None where too few values can give it (toolkit.method.goodput.supported: p90 needs 10,
    p99 100; from fewer it is the maximum, not a p99)."""
    return percentile(values, q) if supported(q, len(values)) else None


@dataclass(frozen=True)
class WindowSpread:
    """95 % intervals of a window's total tok/s, per-request tok/s and TBT (ms), batch means over `sub_windows`
    equal parts (`toolkit.method.spread.window_interval`), and of its median TTFT (order statistics); None where
    the window is too short for one: a part without a measurable value, or fewer than 6 TTFTs."""

    sub_windows: int
    total_tok_s: Interval | None
    per_request_tok_s: Interval | None
    tbt_ms: Interval | None
    ttft_ms: Interval | None = None

    @property
    def dof(self) -> float | None:
        """The t degrees of freedom of its half-widths (`WINDOW_DOF`), which a result records; None without halves."""
        return WINDOW_DOF if self.sub_windows == BATCHES else None


def _sub_window_values(results: Sequence[StreamResult], start: float, end: float, k: int) -> list[list[float]]:
    """Per sub-window: total tok/s (tokens counted continuously, `progress_at`; 0 for a part no token arrived in),
    median per-request tok/s, median TBT in ms (the last two where measurable)."""
    total, per_request, tbt = [], [], []
    for a, b in edges(start, end, k):
        arrived = any(tokens_between(r, a, b) for r in results)
        total.append(sum(progress_at(r, b) - progress_at(r, a) for r in results) / (b - a) if arrived else 0.0)
        tbts = [x for r in results if (x := tbt_in_window_s(r, a, b))]
        if tbts:
            per_request.append(median([1.0 / x for x in tbts]) or 0.0)
            tbt.append((median(tbts) or 0.0) * 1000)
    return [total, per_request, tbt]


def _complete(values: list[float], k: int) -> Interval | None:
    """The window interval only when every one of the `k` parts measured a value (a silent part makes no honest
    interval)."""
    return window_interval(values) if len(values) == k and all(values) else None


def window_spread(results: Sequence[StreamResult], start: float, end: float) -> WindowSpread:
    """The window's intervals (docs/method/spread.md, Spread)."""
    ttft = median_interval([r.ttft_s * 1000 for r in results if r.ttft_s is not None])
    if end <= start:
        return WindowSpread(0, None, None, None, ttft)
    total, per_request, tbt = _sub_window_values(results, start, end, BATCHES)
    return WindowSpread(BATCHES, _complete(total, BATCHES), _complete(per_request, BATCHES), _complete(tbt, BATCHES),
                        ttft)  # fmt: skip
