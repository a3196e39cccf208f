"""A decode window judged: every Measurement field of the window from what the client saw and the server's
samples and counters (pure; docs/METHOD.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.loadgen.client import StreamResult
from toolkit.matrix.prometheus import (
    GENERATION_TOKENS,
    ITL_COUNT,
    ITL_SUM,
    SPEC_ACCEPTED_TOKENS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    MetricsSnapshot,
    delta,
    mean_delta,
)
from toolkit.matrix.sampler import Samples, loop_lag_ms, max_sample_gap_s
from toolkit.method.status import decode_status, decode_status_client_only, disturbance
from toolkit.method.window import active_at, longest_silence_s, summarize_window, tokens_between, window_spread

SATURATION_LAG_MS = 20.0  # event-loop lag p99 above this: the client, not the server, set the pace
SATURATION_CPU_PCT = 90.0


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


def speculation(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> dict[str, Any]:
    """Drafts, drafted and accepted tokens between two scrapes, the acceptance rate and mean accepted length;
    empty when the server exports no speculative-decoding counters (the fields stay None, not zero)."""
    drafts, drafted = delta(before, after, SPEC_DRAFTS), delta(before, after, SPEC_DRAFT_TOKENS)
    accepted = delta(before, after, SPEC_ACCEPTED_TOKENS)
    if drafts is None or drafted is None or accepted is None:
        return {}
    return {"spec_drafts": int(drafts), "spec_draft_tokens": int(drafted), "spec_accepted_tokens": int(accepted),
            "spec_acceptance_rate": accepted / drafted if drafted else None,
            "spec_mean_accepted_len": 1 + accepted / drafts if drafts else None}  # fmt: skip


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
) -> dict[str, Any]:
    """Every Measurement field of a decode window from what the client saw and the server's samples (pure)."""
    start, end = edges.start, edges.end
    requests_started = len(results)  # by the whole cell, ramp included
    results = [r for r in results if r.ended is None or r.ended > start]  # the requests alive in the window
    window = summarize_window(results, start, end, samples.times)
    # The server's counters were read somewhere inside each scrape; compare like with like.
    midpoint_tokens = sum(
        tokens_between(r, (edges.before_sent + edges.before_received) / 2,
                       (edges.after_sent + edges.after_received) / 2) for r in results
    )  # fmt: skip
    # When the server read its counter inside each scrape is unknown, so its interval lies between the inner
    # (received..sent) and the outer (sent..received) one: the client's tokens in those two bracket its count.
    outer = sum(tokens_between(r, edges.before_sent, edges.after_received) for r in results)
    inner = sum(tokens_between(r, edges.before_received, edges.after_sent) for r in results)
    lag = loop_lag_ms(samples, start, end, 99)
    # A block that outlasts the window shows in the first probe after it, up to when the "after" scrape returned.
    lag_max = loop_lag_ms(samples, start, edges.after_received, 100)
    silence = longest_silence_s(results, start, end)
    # /metrics answered at the edges but no sample landed inside: the whole window went unsampled.
    scrapes_ok = use_metrics and edges.before is not None and edges.after is not None
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
    extras.setdefault("client_avg_active", window.client_avg_active)
    gen = delta(edges.before, edges.after, GENERATION_TOKENS)
    itl = mean_delta(edges.before, edges.after, ITL_SUM, ITL_COUNT)
    ok = status != "Error"
    spread = window_spread(results, start, end) if ok else None
    spec = speculation(edges.before, edges.after)
    half = lambda x: None if x is None else x.half_width  # noqa: E731
    return {
        "status": status,
        "total_tok_s": window.total_tok_s if ok else None,
        "per_request_tok_s": window.per_request_tok_s if ok else None,
        "ttft_ms": window.ttft_ms if ok else None,
        "tbt_ms": window.tbt_ms if ok else None,
        "avg_active": extras.get("avg_active"),
        "completed": window.completed,
        "output_tokens": window.output_tokens,
        "measured_s": window.measured_s,
        "prompt_tokens": next((r.prompt_tokens for r in results if r.prompt_tokens), None),
        "ttft_p90_ms": window.ttft_p90_ms,
        "ttft_p99_ms": window.ttft_p99_ms,
        "tbt_p90_ms": window.tbt_p90_ms,
        "tbt_p99_ms": window.tbt_p99_ms,
        "per_request_tok_s_p10": window.per_request_tok_s_p10,
        "total_tok_s_ci": spread and half(spread.total_tok_s),
        "per_request_tok_s_ci": spread and half(spread.per_request_tok_s),
        "tbt_ms_ci": spread and half(spread.tbt_ms),
        "sub_windows": spread and spread.sub_windows,
        "client_avg_active": extras.get("client_avg_active"),
        "concurrency_held": extras.get("concurrency_held"),
        "tokens_per_chunk": window.tokens_per_chunk,
        "requests_started": requests_started,
        "server_output_tokens": None if gen is None else int(gen),
        "client_tokens_server_interval": midpoint_tokens if gen is not None else None,
        "client_tokens_min": inner if gen is not None else None,
        "client_tokens_max": outer if gen is not None else None,
        "server_tbt_ms": None if itl is None else itl * 1000,
        **spec,
        "max_waiting": extras.get("max_waiting"),
        "waiting_fraction": extras.get("waiting_fraction"),
        "status_basis": extras.get("status_basis"),
        "client_saturated": (lag is not None and lag > SATURATION_LAG_MS) or edges.cpu_pct > SATURATION_CPU_PCT,
        "loop_lag_p99_ms": lag,
        "loop_lag_max_ms": lag_max,
        "longest_silence_s": silence,
        "disturbed": disturbed if ok or empty else None,
        "max_sample_gap_s": sample_gap,
        "client_cpu_pct": edges.cpu_pct,
        "error": error,
    }
