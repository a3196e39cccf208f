"""Background sampling during a cell: the server's running/waiting/KV gauges and the client's own health."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from toolkit.metrics import KV_USAGE, RUNNING, WAITING
from toolkit.server_api import ServerAPI
from toolkit.stats import percentile


@dataclass
class Samples:
    """(time, running, waiting) from the server; times of client samples; event-loop lag; KV peak."""

    server: list[tuple[float, int, int]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    loop_lag_s: list[float] = field(default_factory=list)
    kv_usage_peak: float | None = None
    failed_scrapes: int = 0

    def server_between(self, start: float, end: float) -> list[tuple[float, int, int]]:
        return [s for s in self.server if start <= s[0] <= end]

    def latest(self) -> tuple[float, int, int] | None:
        return self.server[-1] if self.server else None


class Sampler:
    """Scrape `/metrics` every `interval_s` (METHOD.md: at least 2 Hz) until stopped."""

    def __init__(self, api: ServerAPI, interval_s: float = 0.25, use_metrics: bool = True) -> None:
        self.api = api
        self.interval_s = interval_s
        self.use_metrics = use_metrics
        self.samples = Samples()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Sampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        expected = time.perf_counter()
        while True:
            now = time.perf_counter()
            self.samples.loop_lag_s.append(max(0.0, now - expected))
            self.samples.times.append(now)
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
        kv = snap.value(KV_USAGE)
        if kv is not None:
            self.samples.kv_usage_peak = max(kv, self.samples.kv_usage_peak or 0.0)


def loop_lag_p99_ms(samples: Samples, start: float, end: float) -> float | None:
    lags = [lag for t, lag in zip(samples.times, samples.loop_lag_s, strict=True) if start <= t <= end]
    p99 = percentile(lags, 99)
    return None if p99 is None else p99 * 1000
