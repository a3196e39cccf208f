"""One sustained-decode cell: N re-issuing streams, readiness gate, fixed window, drain (docs/METHOD.md)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from toolkit.loadgen.client import Endpoint, StreamClient, StreamResult, build_request
from toolkit.matrix.prometheus import (
    GENERATION_TOKENS,
    ITL_COUNT,
    ITL_SUM,
    PREEMPTIONS,
    PREFIX_HITS,
    PROMPT_TOKENS,
    SPEC_ACCEPTED_TOKENS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    MetricsSnapshot,
    delta,
    mean_delta,
)
from toolkit.matrix.sampler import Sampler, Samples, loop_lag_ms, max_sample_gap_s
from toolkit.matrix.server_api import ServerAPI
from toolkit.matrix.traces import CellTrace
from toolkit.method.status import decode_status, decode_status_client_only, disturbance
from toolkit.method.window import active_at, longest_silence_s, summarize_window, tokens_between, window_spread
from toolkit.schema import Measurement

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


READINESS_PLATEAU_S = 3.0  # requests waiting and the running count not rising this long: the answer is known


@dataclass(frozen=True)
class Readiness:
    """How the readiness gate ended: every stream decoding with N running and none waiting, or not."""

    queued: bool  # requests waited and the running count stopped rising (or the timeout ran out)
    failed: bool = False
    reason: str = ""


class _Plateau:
    """When a count last rose: the gate ends once it has not risen for `READINESS_PLATEAU_S`."""

    def __init__(self) -> None:
        self.highest, self.since = -1, time.perf_counter()

    def held_s(self, count: int) -> float:
        now = time.perf_counter()
        if count > self.highest:
            self.highest, self.since = count, now
        return now - self.since


async def _wait_ready(
    streams: list[list[StreamResult]], sampler: Sampler, n: int, failed: asyncio.Event, timeout_s: float
) -> Readiness:
    """Wait until every stream has a token and the server runs >= N with none waiting.

    Ends early when the answer is known: the server has requests waiting and its running count has not risen
    for READINESS_PLATEAU_S (client side without /metrics: some streams have their first token and that count
    has not risen for as long). The timeout is the last resort and counts as queued.
    """
    deadline = time.perf_counter() + timeout_s
    server_plateau, client_plateau = _Plateau(), _Plateau()
    while time.perf_counter() < deadline:
        if failed.is_set():
            return Readiness(queued=False, failed=True)
        decoding = sum(1 for s in streams if any(r.token_events for r in s))
        client_held = client_plateau.held_s(decoding)
        latest = sampler.samples.latest()
        if not sampler.use_metrics or _metrics_down(sampler.samples):
            if decoding == n:
                return Readiness(queued=False)
            if decoding > 0 and client_held >= READINESS_PLATEAU_S:
                return Readiness(queued=True, reason=f"{n - decoding} of {n} streams without a token")
        elif latest is not None:
            _t, running, waiting = latest
            server_held = server_plateau.held_s(running)
            if decoding == n and running >= n and waiting == 0:
                return Readiness(queued=False)
            if waiting > 0 and server_held >= READINESS_PLATEAU_S:
                return Readiness(queued=True, reason=f"running {running}, waiting {waiting}")
        await asyncio.sleep(0.05)
    return Readiness(queued=True, reason=f"readiness timeout {timeout_s:g} s")


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


async def _measure_window(api: ServerAPI, duration_s: float, failed: asyncio.Event, use_metrics: bool) -> WindowEdges:
    """Open a window now, keep it for `duration_s` (or until a stream fails), scraping /metrics at both edges.

    The "before" scrape runs inside the window, so a slow /metrics cannot shift it.
    """
    cpu0 = time.process_time()
    start = before_sent = time.perf_counter()
    before_scrape = asyncio.create_task(_scrape_with_time(api, use_metrics))
    if not failed.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(duration_s):
                await failed.wait()
    after_sent = time.perf_counter()
    after = await api.metrics_or_none() if use_metrics else None
    after_received = time.perf_counter()
    before, before_received = await before_scrape
    cpu_pct = 100 * (time.process_time() - cpu0) / max(after_received - start, 1e-9)
    return WindowEdges(start, min(after_sent, start + duration_s), before_sent, before_received, after_sent,
                       after_received, before, after, cpu_pct)  # fmt: skip


@dataclass(frozen=True)
class CellTimes:
    """Where a cell's wall time went (seconds), for the run's overhead breakdown."""

    readiness_s: float
    windows_s: float  # every window, scrapes included
    retries_s: float  # the part of windows_s spent in disturbed windows measured again
    drain_s: float
    cell_wall_s: float


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


async def measure_decode_cell(
    client: StreamClient,
    api: ServerAPI,
    spec: CellSpec,
    *,
    context_tokens: int,
    context: str,
    use_metrics: bool = True,
    retries: int = 0,
    on_disturbed: Callable[[str, int], None] | None = None,
) -> tuple[Measurement, CellTrace]:
    """Run one cell and return its Measurement and raw trace; failures become status Error, never exceptions.

    A disturbed window is measured again on the streams that are still running, up to `retries` more
    windows (no new ramp); `on_disturbed(reason, attempt)` is told about each one.
    """
    n = len(spec.prompts)
    bodies = [build_request(spec.endpoint, spec.model, p, spec.max_output) for p in spec.prompts]
    streams: list[list[StreamResult]] = [[] for _ in range(n)]
    failed = asyncio.Event()
    wall0 = time.perf_counter()
    windows_s = retries_s = 0.0
    windows: list[tuple[float, float]] = []
    async with Sampler(api, use_metrics=use_metrics) as sampler:
        before_cell = await api.metrics_or_none() if use_metrics else None
        tasks = [
            asyncio.create_task(_stream_loop(client, path, body, streams[i], failed))
            for i, (path, body) in enumerate(bodies)
        ]
        gate = await _wait_ready(streams, sampler, n, failed, spec.readiness_timeout_s)
        readiness_s = time.perf_counter() - wall0
        for attempt in range(1, retries + 2):
            edges = await _measure_window(api, spec.duration_s, failed, use_metrics)
            windows.append((edges.start, edges.end))
            windows_s += edges.after_received - edges.start
            results = [r for s in streams for r in s]
            fields = judge_window(results, edges, sampler.samples, concurrency=n, duration_s=spec.duration_s,
                                  readiness_queued=gate.queued, use_metrics=use_metrics,
                                  error=next((r.error for r in results if r.error), None))  # fmt: skip
            if not fields["disturbed"] or attempt > retries or failed.is_set():
                break
            retries_s += edges.after_received - edges.start
            if on_disturbed is not None:
                on_disturbed(fields["disturbed"], attempt)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    drain_start = time.perf_counter()
    drained = await drain(api, spec.drain_timeout_s, use_metrics)
    drain_s = time.perf_counter() - drain_start
    after_cell = await api.metrics_or_none() if use_metrics else None
    if fields["error"] is None and not drained:
        undrained = f"server did not drain within {spec.drain_timeout_s:g} s after the cell"
        fields = judge_window(results, edges, sampler.samples, concurrency=n, duration_s=spec.duration_s,
                              readiness_queued=gate.queued, use_metrics=use_metrics, error=undrained)  # fmt: skip
    times = CellTimes(readiness_s, windows_s, retries_s, drain_s, time.perf_counter() - wall0)
    trace = CellTrace(streams, sampler.samples, windows)
    return Measurement(
        phase="decode", context_tokens=context_tokens, context=context, concurrency=n, **fields,
        cached_tokens=_int(delta(before_cell, after_cell, PREFIX_HITS)),
        preemptions=_int(delta(before_cell, after_cell, PREEMPTIONS)),
        server_prompt_tokens=_int(delta(before_cell, after_cell, PROMPT_TOKENS)),
        kv_usage_peak=sampler.samples.kv_usage_peak, readiness_queued=gate.queued or None,
        attempts=attempt, **asdict(times),
    ), trace  # fmt: skip


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
