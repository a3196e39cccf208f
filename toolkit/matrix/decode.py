"""One sustained-decode cell: N re-issuing streams, readiness gate, fixed window, drain (docs/method/cells.md)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

from toolkit.base.schema import Measurement
from toolkit.loadgen.client import Endpoint, StreamClient, StreamResult, build_request
from toolkit.loadgen.reply_checks import completed_shares
from toolkit.matrix.cell_timing import cell_breakdown, cell_speculation
from toolkit.matrix.prometheus import PREEMPTIONS, PROMPT_TOKENS, MetricsSnapshot, cached_prompt_tokens, delta
from toolkit.matrix.sampler import Sampler, Samples
from toolkit.matrix.server_api import ServerAPI
from toolkit.matrix.traces import CellTrace
from toolkit.matrix.verdict import WindowEdges, judge_window


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
    # what every request carries besides its prompt (toolkit.loadgen.structured, toolkit.loadgen.tools); None: none
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None

    def request(self, prompt: str, max_tokens: int) -> tuple[str, dict[str, Any]]:
        """The path and body of a request of this cell for `prompt`, with what every request carries."""
        return build_request(self.endpoint, self.model, prompt, max_tokens, response_format=self.response_format,
                             tools=self.tools, tool_choice=self.tool_choice)  # fmt: skip


async def _stream_loop(
    client: StreamClient, path: str, body: dict, results: list[StreamResult], failed: asyncio.Event
) -> None:
    """Send, read to [DONE], send again at once, until cancelled or a request fails. A reply is kept (its text, or
    its first tool call) when the body carries a response format (or tools): checked once the cell is over."""
    while not failed.is_set():
        result = StreamResult(text=[] if "response_format" in body else None,
                              tool_args=[] if "tools" in body else None)  # fmt: skip
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
    return WindowEdges(
        start,
        min(after_sent, start + duration_s),
        before_sent,
        before_received,
        after_sent,
        after_received,
        before,
        after,
        cpu_pct,
    )


@dataclass(frozen=True)
class CellTimes:
    """Where a cell's wall time went (seconds), for the run's overhead breakdown."""

    readiness_s: float
    windows_s: float  # every window, scrapes included
    retries_s: float  # the part of windows_s spent in disturbed windows measured again
    drain_s: float
    cell_wall_s: float


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
    bodies = [spec.request(p, spec.max_output) for p in spec.prompts]
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
        judge = partial(judge_window, samples=sampler.samples, concurrency=n, duration_s=spec.duration_s,
                        readiness_queued=gate.queued, use_metrics=use_metrics)  # fmt: skip
        for attempt in range(1, retries + 2):
            edges = await _measure_window(api, spec.duration_s, failed, use_metrics)
            windows.append((edges.start, edges.end))
            windows_s += edges.after_received - edges.start
            results = [r for s in streams for r in s]
            verdict = judge(results, edges, error=next((r.error for r in results if r.error), None))
            if not verdict.disturbed or attempt > retries or failed.is_set():
                break
            retries_s += edges.after_received - edges.start
            if on_disturbed is not None:
                on_disturbed(verdict.disturbed, attempt)
        await _cancel(tasks)
    drained, drain_s = await _timed_drain(api, spec.drain_timeout_s, use_metrics)
    after_cell = await api.metrics_or_none() if use_metrics else None
    if verdict.error is None and not drained:
        verdict = judge(results, edges, error=f"server did not drain within {spec.drain_timeout_s:g} s after the cell")
    times = CellTimes(readiness_s, windows_s, retries_s, drain_s, time.perf_counter() - wall0)
    trace = CellTrace(streams, sampler.samples, windows)
    return Measurement(
        phase="decode", context_tokens=context_tokens, context=context, concurrency=n, **verdict.measurement_fields(),
        cached_tokens=_int(cached_prompt_tokens(before_cell, after_cell)),  # GPU cache and external tier
        preemptions=_int(delta(before_cell, after_cell, PREEMPTIONS)),
        server_prompt_tokens=_int(delta(before_cell, after_cell, PROMPT_TOKENS)),
        kv_usage_peak=sampler.samples.kv_usage_peak, readiness_queued=gate.queued or None,
        attempts=attempt, **asdict(times), **cell_breakdown(results, edges.start, edges.end, edges.before, edges.after),
        **cell_speculation(results, edges.start, edges.end),
        **completed_shares(bodies[0][1], (r for s in streams for r in s)),  # every request of the cell
    ), trace  # fmt: skip


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _timed_drain(api: ServerAPI, timeout_s: float, use_metrics: bool) -> tuple[bool, float]:
    """Whether the server drained (toolkit.matrix.decode.drain), and the seconds it took."""
    started = time.perf_counter()
    drained = await drain(api, timeout_s, use_metrics)
    return drained, time.perf_counter() - started


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
