"""Background sampling during a cell: the server's running/waiting/KV gauges and the client's own health."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from itertools import pairwise

from toolkit.matrix.prometheus import KV_USAGE, RUNNING, WAITING
from toolkit.matrix.server_api import ServerAPI
from toolkit.method.stats import percentile


@dataclass
class Samples:
    """(time, running, waiting) from the server; times of scrape ticks; event-loop lag probes; KV peak."""

    server: list[tuple[float, int, int]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    lag_times: list[float] = field(default_factory=list)
    loop_lag_s: list[float] = field(default_factory=list)
    kv_usage: list[tuple[float, float]] = field(default_factory=list)  # (time, KV cache usage 0..1)
    kv_usage_peak: float | None = None
    failed_scrapes: int = 0

    def server_between(self, start: float, end: float) -> list[tuple[float, int, int]]:
        return [s for s in self.server if start <= s[0] <= end]

    def latest(self) -> tuple[float, int, int] | None:
        return self.server[-1] if self.server else None


class Sampler:
    """Scrape `/metrics` every `interval_s` (docs/method/cells.md: at least 2 Hz) and probe the event loop's lag.

    The lag probe is its own task on a short period, so a slow scrape cannot hide a blocked loop.
    """

    def __init__(
        self, api: ServerAPI, interval_s: float = 0.25, use_metrics: bool = True, probe_interval_s: float = 0.05
    ) -> None:
        self.api = api
        self.interval_s = interval_s
        self.probe_interval_s = probe_interval_s
        self.use_metrics = use_metrics
        self.samples = Samples()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Sampler:
        # The probe's clock starts now, not when its task first runs: a block before that is a lag too.
        first_probe_due = time.perf_counter() + self.probe_interval_s
        self._tasks = [asyncio.create_task(self._scrape_loop()), asyncio.create_task(self._probe_loop(first_probe_due))]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        outcomes = await asyncio.gather(*self._tasks, return_exceptions=True)
        died = [o for o in outcomes if isinstance(o, Exception)]
        if died and exc[0] is None:  # a sampler that died mid-cell is a bug to see, not a silent stale sample
            raise died[0]

    async def _probe_loop(self, expected: float) -> None:
        while True:
            await asyncio.sleep(max(0.0, expected - time.perf_counter()))
            now = time.perf_counter()
            self.samples.lag_times.append(now)
            self.samples.loop_lag_s.append(max(0.0, now - expected))
            expected = now + self.probe_interval_s

    async def _scrape_loop(self) -> None:
        expected = time.perf_counter()
        while True:
            self.samples.times.append(time.perf_counter())
            if self.use_metrics:
                await self._scrape()
            expected = max(expected + self.interval_s, time.perf_counter())
            await asyncio.sleep(max(0.0, expected - time.perf_counter()))

    async def _scrape(self) -> None:
        sent = time.perf_counter()
        snap = await self.api.metrics_or_none()
        if snap is None:
            self.samples.failed_scrapes += 1
            return
        at = (sent + time.perf_counter()) / 2
        self.samples.server.append((at, int(snap.value(RUNNING) or 0), int(snap.value(WAITING) or 0)))
        kv = snap.highest(KV_USAGE)  # of several engines or replicas: the fullest, not their sum
        if kv is not None:
            self.samples.kv_usage.append((at, kv))
            self.samples.kv_usage_peak = max(kv, self.samples.kv_usage_peak or 0.0)


def loop_lag_ms(samples: Samples, start: float, end: float, pct: float) -> float | None:
    """A percentile of the event loop's lag inside the window (pct=100: the longest block)."""
    lags = [lag for t, lag in zip(samples.lag_times, samples.loop_lag_s, strict=True) if start <= t <= end]
    value = percentile(lags, pct)
    return None if value is None else value * 1000


def max_sample_gap_s(samples: Samples, start: float, end: float) -> float | None:
    """Longest time without a server sample inside the window (docs/method/cells.md asks for at most 0.5 s)."""
    times = [start] + [t for t, _, _ in samples.server_between(start, end)] + [end]
    return max(b - a for a, b in pairwise(times)) if len(times) > 2 else None
