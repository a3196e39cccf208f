"""`toolkit.matrix.sampler.Sampler`: a scrape that raises is not swallowed with its task."""

from __future__ import annotations

import asyncio

import pytest

from toolkit.matrix.prometheus import MetricsSnapshot
from toolkit.matrix.sampler import Sampler


class BrokenAPI:
    """`/metrics` answers once, then the scrape raises what a bug would."""

    def __init__(self) -> None:
        self.calls = 0

    async def metrics_or_none(self) -> MetricsSnapshot | None:
        self.calls += 1
        if self.calls > 1:
            raise ValueError("cannot convert float NaN to integer")
        return MetricsSnapshot({"vllm:num_requests_running": [({}, 1.0)]})


def test_a_scrape_loop_that_died_is_raised_when_the_cell_ends() -> None:
    async def cell() -> Sampler:
        async with Sampler(BrokenAPI(), interval_s=0.01) as sampler:  # type: ignore[arg-type]
            await asyncio.sleep(0.1)
        return sampler

    with pytest.raises(ValueError, match="cannot convert float NaN to integer"):
        asyncio.run(cell())


def test_a_healthy_sampler_ends_quietly_with_its_samples() -> None:
    async def cell() -> Sampler:
        api = BrokenAPI()
        api.calls = -1000  # never breaks here
        async with Sampler(api, interval_s=0.01) as sampler:  # type: ignore[arg-type]
            await asyncio.sleep(0.1)
        return sampler

    sampler = asyncio.run(cell())
    assert len(sampler.samples.server) >= 3 and sampler.samples.server[0][1:] == (1, 0)
