"""A decode window judged: its status and numbers from what the client saw and the server's samples and counters
(pure; docs/method/cells.md), as a typed WindowVerdict whose fields are the Measurement's."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from toolkit.base.schema import Status
from toolkit.loadgen.client import StreamResult
from toolkit.matrix.prometheus import (
    GENERATION_TOKENS,
    ITL_COUNT,
    ITL_SUM,
    SPEC_ACCEPTED_TOKENS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    MetricsSnapshot,
    counter_growth,
    delta,
    mean_delta,
)
from toolkit.matrix.sampler import Samples, loop_lag_ms, max_sample_gap_s
from toolkit.method.spread import Interval
from toolkit.method.status import decode_status, decode_status_client_only, disturbance
from toolkit.method.window import active_at, longest_silence_s, summarize_window, tokens_between, window_spread

SATURATION_LAG_MS = 20.0  # event-loop lag p99 above this: the client, not the server, set the pace
SATURATION_CPU_PCT = 90.0
# No stream decodes faster than this (the fastest single streams served today do a few thousand tokens a second,
# speculative decoding included): N streams add at most N times as much to the server's generation counter a second.
MAX_STREAM_TOKENS_PER_S = 10_000.0


@dataclass(frozen=True)
class WindowEdges:
    """One measurement window on the client's clock and the /metrics scrapes at its edges."""

    start: float
    end: float  # the planned end (a late wake-up of the loop does not stretch the window)
    before_sent: float
    before_received: float
    after_sent: float
    after_received: float
    before: MetricsSnapshot | None
    after: MetricsSnapshot | None
    cpu_pct: float


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding between the window's scrapes; every field None when the server exports no counters."""

    spec_drafts: int | None = None
    spec_draft_tokens: int | None = None
    spec_accepted_tokens: int | None = None
    spec_acceptance_rate: float | None = None  # accepted / drafted tokens
    spec_mean_accepted_len: float | None = None  # tokens per draft step: 1 + accepted / drafts


def speculation(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> Speculation:
    """Drafts, drafted and accepted tokens between two scrapes, the acceptance rate and mean accepted length;
    all None when the server exports no speculative-decoding counters (not zero)."""
    drafts, drafted = delta(before, after, SPEC_DRAFTS), delta(before, after, SPEC_DRAFT_TOKENS)
    accepted = delta(before, after, SPEC_ACCEPTED_TOKENS)
    if drafts is None or drafted is None or accepted is None:
        return Speculation()
    return Speculation(
        int(drafts),
        int(drafted),
        int(accepted),
        accepted / drafted if drafted else None,
        1 + accepted / drafts if drafts else None,
    )


@dataclass(frozen=True)
class ServerCounters:
    """The server's own counts between the window's scrapes, and the client's tokens that bracket them."""

    server_output_tokens: int | None = None  # vllm:generation_tokens_total delta
    client_tokens_server_interval: int | None = None  # the client's tokens between the scrapes' midpoints
    client_tokens_min: int | None = None  # ... between their inner edges
    client_tokens_max: int | None = None  # ... between their outer edges
    server_tbt_ms: float | None = None  # mean inter-token latency on the engine's clock


def window_generation(edges: WindowEdges, concurrency: int) -> tuple[float | None, str | None]:
    """The server's generation counter's growth between the edge scrapes, or (None, why) when it went back or grew
    by more than `concurrency` streams can decode between the scrapes' outer edges (`MAX_STREAM_TOKENS_PER_S`)."""
    span_s = edges.after_received - edges.before_sent
    most = MAX_STREAM_TOKENS_PER_S * concurrency * span_s
    growth, why = counter_growth(edges.before, edges.after, GENERATION_TOKENS, most)
    if why is None:
        return growth, None
    why += " between the window's scrapes"
    if "grew" in why:
        why += (f", more than the {most:,.0f} that {concurrency} stream(s) at {MAX_STREAM_TOKENS_PER_S:,.0f} tok/s "
                f"decode in {span_s:.2f} s")  # fmt: skip
    return None, why


def server_counters(results: list[StreamResult], edges: WindowEdges, gen: float | None) -> ServerCounters:
    """What the server counted between the edge scrapes (`gen`: its generated tokens, None when unknown or refused),
    beside the client's tokens over the same interval."""
    itl = mean_delta(edges.before, edges.after, ITL_SUM, ITL_COUNT)
    server_tbt_ms = None if itl is None else itl * 1000
    if gen is None:
        return ServerCounters(server_tbt_ms=server_tbt_ms)
    # The server's counters were read somewhere inside each scrape; compare like with like.
    before, after = (edges.before_sent + edges.before_received) / 2, (edges.after_sent + edges.after_received) / 2
    midpoint = sum(tokens_between(r, before, after) for r in results)
    # When the server read its counter inside each scrape is unknown, so its interval lies between the inner
    # (received..sent) and the outer (sent..received) one: the client's tokens in those two bracket its count.
    inner = sum(tokens_between(r, edges.before_received, edges.after_sent) for r in results)
    outer = sum(tokens_between(r, edges.before_sent, edges.after_received) for r in results)
    return ServerCounters(int(gen), midpoint, inner, outer, server_tbt_ms)


@dataclass(frozen=True)
class WindowVerdict:
    """A judged decode window: its status and every Measurement field the window fills (same names)."""

    status: Status
    error: str | None
    disturbed: str | None  # why the window cannot be trusted (a pause)
    total_tok_s: float | None
    per_request_tok_s: float | None
    ttft_ms: float | None
    tbt_ms: float | None
    completed: int | None
    output_tokens: int | None
    measured_s: float | None
    prompt_tokens: int | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    tbt_p90_ms: float | None
    tbt_p99_ms: float | None
    tbt_p90_low_ms: float | None
    tbt_p90_high_ms: float | None
    tbt_p99_low_ms: float | None
    tbt_p99_high_ms: float | None
    ttft_p90_low_ms: float | None
    ttft_p90_high_ms: float | None
    ttft_p99_low_ms: float | None
    ttft_p99_high_ms: float | None
    per_request_tok_s_p10: float | None
    total_tok_s_ci: float | None
    per_request_tok_s_ci: float | None
    tbt_ms_ci: float | None
    sub_windows: int | None
    window_dof: float | None
    ttft_ms_ci: float | None
    ttft_ms_low: float | None  # the median TTFT's interval's own ends (order statistics, not symmetric)
    ttft_ms_high: float | None
    avg_active: float | None
    client_avg_active: float | None
    concurrency_held: float | None
    max_waiting: int | None
    waiting_fraction: float | None
    status_basis: str | None
    metrics_problem: str | None  # why the server's figures were refused (a counter that went back or jumped)
    tokens_per_chunk: float | None
    requests_started: int
    client_saturated: bool
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    longest_silence_s: float | None
    max_sample_gap_s: float | None
    client_cpu_pct: float
    counters: ServerCounters
    speculation: Speculation

    def measurement_fields(self) -> dict[str, Any]:
        """The verdict as Measurement keyword arguments (the counters and speculation flattened)."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("counters", "speculation")}
        return own | asdict(self.counters) | asdict(self.speculation)


def _half(interval: Interval | None) -> float | None:
    return None if interval is None else interval.half_width


def judge_window(
    results: list[StreamResult],
    edges: WindowEdges,
    samples: Samples,
    *,
    concurrency: int,
    duration_s: float,
    readiness_queued: bool,
    use_metrics: bool,
    error: str | None,
) -> WindowVerdict:
    """The verdict on a decode window from what the client saw and the server's samples (pure)."""
    start, end = edges.start, edges.end
    requests_started = len(results)  # by the whole cell, ramp included
    results = [r for r in results if r.ended is None or r.ended > start]  # the requests alive in the window
    window = summarize_window(results, start, end, samples.times)
    lag = loop_lag_ms(samples, start, end, 99)
    # A block that outlasts the window shows in the first probe after it, up to when the "after" scrape returned.
    lag_max = loop_lag_ms(samples, start, edges.after_received, 100)
    silence = longest_silence_s(results, start, end)
    # A generation counter that went back or jumped between the edge scrapes is no count of this window: the
    # server's figures are not used, and the status is judged client-side, as without /metrics.
    generated, metrics_problem = window_generation(edges, concurrency) if use_metrics else (None, None)
    # /metrics answered at the edges but no sample landed inside: the whole window went unsampled.
    scrapes_ok = use_metrics and edges.before is not None and edges.after is not None and metrics_problem is None
    sample_gap = (max_sample_gap_s(samples, start, end) or end - start) if scrapes_ok else None
    disturbed = disturbance(silence_s=silence, tbt_ms=window.tbt_ms, loop_lag_max_ms=lag_max,
                            max_sample_gap_s=sample_gap)  # fmt: skip
    # A window without a single token measured nothing (a pause as long as the window): not Valid, an Error
    # that is measured again while disturbed and that --resume redoes.
    empty = error is None and window.output_tokens == 0
    if empty:
        error = f"no token arrived in the {duration_s:g} s window" + (f" ({disturbed})" if disturbed else "")
    server_samples = samples.server_between(start, end)
    if scrapes_ok and server_samples:
        status, extras = decode_status(concurrency=concurrency, error=error, readiness_queued=readiness_queued,
                                       samples=server_samples)  # fmt: skip
    else:
        active = [active_at(results, t) for t in samples.times if start <= t <= end]
        status, extras = decode_status_client_only(concurrency, error, readiness_queued, active)
    ok = status != "Error"
    spread = window_spread(results, start, end) if ok else None
    total_ci, per_request_ci, tbt_ci, ttft_ci = (_half(spread.total_tok_s), _half(spread.per_request_tok_s),
                                                 _half(spread.tbt_ms), _half(spread.ttft_ms)) if spread else (
                                                 None, None, None, None)  # fmt: skip
    ttft_ends = spread.ttft_ms.bounds if spread and spread.ttft_ms else (None, None)
    return WindowVerdict(
        status=status, error=error, disturbed=disturbed if ok or empty else None,
        total_tok_s=window.total_tok_s if ok else None, per_request_tok_s=window.per_request_tok_s if ok else None,
        ttft_ms=window.ttft_ms if ok else None, tbt_ms=window.tbt_ms if ok else None,
        completed=window.completed, output_tokens=window.output_tokens, measured_s=window.measured_s,
        prompt_tokens=next((r.prompt_tokens for r in results if r.prompt_tokens), None),
        ttft_p90_ms=window.ttft_p90_ms, ttft_p99_ms=window.ttft_p99_ms, tbt_p90_ms=window.tbt_p90_ms,
        tbt_p99_ms=window.tbt_p99_ms, tbt_p90_low_ms=window.tbt_p90_low_ms, tbt_p90_high_ms=window.tbt_p90_high_ms,
        tbt_p99_low_ms=window.tbt_p99_low_ms, tbt_p99_high_ms=window.tbt_p99_high_ms,
        ttft_p90_low_ms=window.ttft_p90_low_ms, ttft_p90_high_ms=window.ttft_p90_high_ms,
        ttft_p99_low_ms=window.ttft_p99_low_ms, ttft_p99_high_ms=window.ttft_p99_high_ms,
        per_request_tok_s_p10=window.per_request_tok_s_p10,
        total_tok_s_ci=total_ci, per_request_tok_s_ci=per_request_ci, tbt_ms_ci=tbt_ci,
        sub_windows=spread.sub_windows if spread else None, window_dof=spread.dof if spread else None,
        ttft_ms_ci=ttft_ci, avg_active=extras.get("avg_active"),
        ttft_ms_low=ttft_ends[0], ttft_ms_high=ttft_ends[1],
        client_avg_active=extras.get("client_avg_active", window.client_avg_active),
        concurrency_held=extras.get("concurrency_held"), max_waiting=extras.get("max_waiting"),
        waiting_fraction=extras.get("waiting_fraction"), status_basis=extras.get("status_basis"),
        metrics_problem=metrics_problem,
        tokens_per_chunk=window.tokens_per_chunk, requests_started=requests_started,
        client_saturated=(lag is not None and lag > SATURATION_LAG_MS) or edges.cpu_pct > SATURATION_CPU_PCT,
        loop_lag_p99_ms=lag, loop_lag_max_ms=lag_max, longest_silence_s=silence, max_sample_gap_s=sample_gap,
        client_cpu_pct=edges.cpu_pct,
        counters=ServerCounters() if metrics_problem else server_counters(results, edges, generated),
        speculation=Speculation() if metrics_problem else speculation(edges.before, edges.after),
    )  # fmt: skip
