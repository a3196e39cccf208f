"""One sustained-decode cell: N re-issuing streams, readiness gate, fixed window, drain (METHOD.md)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from toolkit.client import Endpoint, StreamClient, StreamResult, build_request
from toolkit.metrics import (
    GENERATION_TOKENS,
    ITL_COUNT,
    ITL_SUM,
    PREEMPTIONS,
    PREFIX_HITS,
    PROMPT_TOKENS,
    MetricsSnapshot,
    delta,
    mean_delta,
)
from toolkit.sampler import Sampler, Samples, loop_lag_ms, max_sample_gap_s
from toolkit.schema import Measurement
from toolkit.server_api import ServerAPI
from toolkit.status import decode_status, decode_status_client_only, disturbance
from toolkit.window import active_at, longest_silence_s, summarize_window, tokens_between

SATURATION_LAG_MS = 20.0  # event-loop lag p99 above this: the client, not the server, set the pace
SATURATION_CPU_PCT = 90.0


@dataclass(frozen=True)
class CellSpec:
    """What to send in a decode cell."""

    model: str
    endpoint: Endpoint
    prompts: tuple[str, ...]  # one per stream (the same text N times for the reference method)
    max_output: int
    duration_s: float
    readiness_timeout_s: float = 120.0
    drain_timeout_s: float = 120.0


async def _stream_loop(
    client: StreamClient, path: str, body: dict, results: list[StreamResult], failed: asyncio.Event
) -> None:
    """Send, read to [DONE], send again at once, until cancelled or a request fails."""
    while not failed.is_set():
        result = StreamResult()
        results.append(result)
        await client.stream(path, body, result)
        if result.error:
            failed.set()
            return


async def _wait_ready(
    streams: list[list[StreamResult]], sampler: Sampler, n: int, failed: asyncio.Event, timeout_s: float
) -> bool:
    """True when every stream has a token and the server runs >= N with none waiting (or timeout)."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline and not failed.is_set():
        every_stream_decoding = all(any(r.token_events for r in s) for s in streams)
        latest = sampler.samples.latest()
        server_ok = (not sampler.use_metrics) or _metrics_down(sampler.samples) or (
            latest is not None and latest[1] >= n and latest[2] == 0
        )
        if every_stream_decoding and server_ok:
            return True
        await asyncio.sleep(0.05)
    return failed.is_set()


def _metrics_down(samples: Samples) -> bool:
    """The last finished scrape failed (`/metrics` went away mid-run): readiness goes by the client side.

    Without this, a stale sample from before the outage would hold the gate shut until the timeout.
    """
    if not samples.failed_scrapes:
        return False
    latest = samples.latest()
    return latest is None or (len(samples.times) >= 2 and latest[0] < samples.times[-2])


async def _scrape_with_time(api: ServerAPI, use_metrics: bool) -> tuple[MetricsSnapshot | None, float]:
    snapshot = await api.metrics_or_none() if use_metrics else None
    return snapshot, time.perf_counter()


async def drain(api: ServerAPI, timeout_s: float, use_metrics: bool = True) -> bool:
    """Wait until the server runs and queues nothing (bounded); False if it did not drain."""
    if not use_metrics:
        await asyncio.sleep(0.5)
        return True
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        state = await api.running_waiting()
        if state is None or state == (0, 0):
            return True
        await asyncio.sleep(0.1)
    return False


async def measure_decode_cell(
    client: StreamClient,
    api: ServerAPI,
    spec: CellSpec,
    *,
    context_tokens: int,
    context: str,
    use_metrics: bool = True,
) -> Measurement:
    """Run one cell and return its Measurement; failures become status Error, never exceptions."""
    n = len(spec.prompts)
    bodies = [build_request(spec.endpoint, spec.model, p, spec.max_output) for p in spec.prompts]
    streams: list[list[StreamResult]] = [[] for _ in range(n)]
    failed = asyncio.Event()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    async with Sampler(api, use_metrics=use_metrics) as sampler:
        before_cell = await api.metrics_or_none() if use_metrics else None
        tasks = [
            asyncio.create_task(_stream_loop(client, path, body, streams[i], failed))
            for i, (path, body) in enumerate(bodies)
        ]
        ready = await _wait_ready(streams, sampler, n, failed, spec.readiness_timeout_s)
        # The window runs on the client's clock; the server counters are read at its edges.
        # The window opens now; the "before" scrape runs inside it, so a slow /metrics cannot shift it.
        start = before_sent = time.perf_counter()
        before_scrape = asyncio.create_task(_scrape_with_time(api, use_metrics))
        if not failed.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(spec.duration_s):
                    await failed.wait()
        # Tokens count up to the planned end; a late wake-up of this loop must not stretch the window.
        after_sent = time.perf_counter()
        end = min(after_sent, start + spec.duration_s)
        after = await api.metrics_or_none() if use_metrics else None
        after_received = time.perf_counter()
        before, before_received = await before_scrape
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    cpu_pct = 100 * (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
    drained = await drain(api, spec.drain_timeout_s, use_metrics)
    after_cell = await api.metrics_or_none() if use_metrics else None

    results = [r for s in streams for r in s]
    error = next((r.error for r in results if r.error), None)
    if error is None and not drained:
        error = f"server did not drain within {spec.drain_timeout_s:g} s after the cell"
    window = summarize_window(results, start, end, sampler.samples.times)
    # The server's counters were read somewhere inside each scrape; compare like with like.
    scrape_interval_tokens = sum(
        tokens_between(r, (before_sent + before_received) / 2, (after_sent + after_received) / 2) for r in results
    )
    # When the server read its counter inside each scrape is unknown, so its interval lies between the inner
    # (received..sent) and the outer (sent..received) one: the client's tokens in those two bracket its count.
    outer = sum(tokens_between(r, before_sent, after_received) for r in results)
    inner = sum(tokens_between(r, before_received, after_sent) for r in results)
    lag = loop_lag_ms(sampler.samples, start, end, 99)
    # A block that outlasts the window shows in the first probe after it, up to when the "after" scrape returned.
    lag_max = loop_lag_ms(sampler.samples, start, after_received, 100)
    silence = longest_silence_s(results, start, end)
    # /metrics answered at the edges but no sample landed inside: the whole window went unsampled.
    scrapes_ok = use_metrics and before is not None and after is not None
    sample_gap = (max_sample_gap_s(sampler.samples, start, end) or end - start) if scrapes_ok else None
    disturbed = disturbance(silence_s=silence, tbt_ms=window.tbt_ms, loop_lag_max_ms=lag_max,
                            max_sample_gap_s=sample_gap)  # fmt: skip
    # A window without a single token measured nothing (a pause as long as the window): not Valid, an Error
    # that the runner retries while disturbed and that --resume redoes.
    empty = error is None and window.output_tokens == 0
    if empty:
        error = f"no token arrived in the {spec.duration_s:g} s window" + (f" ({disturbed})" if disturbed else "")
    server_samples = sampler.samples.server_between(start, end)
    metrics_ok = use_metrics and bool(server_samples) and before is not None and after is not None
    if metrics_ok:
        status, extras = decode_status(
            concurrency=n, error=error, readiness_timed_out=not ready, samples=server_samples
        )
    else:
        active = [active_at(results, t) for t in sampler.samples.times if start <= t <= end]
        status, extras = decode_status_client_only(n, error, not ready, active)
    extras.setdefault("client_avg_active", window.client_avg_active)
    gen = delta(before, after, GENERATION_TOKENS)
    ok = status != "Error"
    return Measurement(
        phase="decode",
        context_tokens=context_tokens,
        context=context,
        concurrency=n,
        status=status,
        total_tok_s=window.total_tok_s if ok else None,
        per_request_tok_s=window.per_request_tok_s if ok else None,
        ttft_ms=window.ttft_ms if ok else None,
        tbt_ms=window.tbt_ms if ok else None,
        avg_active=extras.get("avg_active"),
        completed=window.completed,
        output_tokens=window.output_tokens,
        measured_s=window.measured_s,
        prompt_tokens=next((r.prompt_tokens for r in results if r.prompt_tokens), None),
        ttft_p90_ms=window.ttft_p90_ms,
        ttft_p99_ms=window.ttft_p99_ms,
        tbt_p90_ms=window.tbt_p90_ms,
        tbt_p99_ms=window.tbt_p99_ms,
        per_request_tok_s_p10=window.per_request_tok_s_p10,
        client_avg_active=extras.get("client_avg_active"),
        tokens_per_chunk=window.tokens_per_chunk,
        requests_started=window.requests_started,
        server_output_tokens=None if gen is None else int(gen),
        client_tokens_server_interval=scrape_interval_tokens if gen is not None else None,
        client_tokens_min=inner if gen is not None else None,
        client_tokens_max=outer if gen is not None else None,
        server_tbt_ms=None if (itl := mean_delta(before, after, ITL_SUM, ITL_COUNT)) is None else itl * 1000,
        cached_tokens=_int(delta(before_cell, after_cell, PREFIX_HITS)),
        max_waiting=extras.get("max_waiting"),
        waiting_fraction=extras.get("waiting_fraction"),
        preemptions=_int(delta(before_cell, after_cell, PREEMPTIONS)),
        kv_usage_peak=sampler.samples.kv_usage_peak,
        status_basis=extras.get("status_basis"),
        client_saturated=(lag is not None and lag > SATURATION_LAG_MS) or cpu_pct > SATURATION_CPU_PCT,
        loop_lag_p99_ms=lag,
        loop_lag_max_ms=lag_max,
        longest_silence_s=silence,
        disturbed=disturbed if ok or empty else None,
        max_sample_gap_s=sample_gap,
        client_cpu_pct=cpu_pct,
        error=error,
        server_prompt_tokens=_int(delta(before_cell, after_cell, PROMPT_TOKENS)),
    )


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
