"""Cancelling streams at any moment, connecting included, ends them at once and leaves no connection open.

A decode cell cancels its streams when the window closes; some are then between requests, opening a new
connection. On Python 3.11 `asyncio.wait_for` could swallow that cancellation (the stream ran on and the cell
never ended) or drop the connection it had just made (uvloop then refused to close the loop: EBUSY).
"""

from __future__ import annotations

import asyncio
import time

from tests.faultserver import FaultServer
from toolkit.loadgen.client import StreamClient, build_request
from toolkit.matrix.runner import run_sync

STREAMS = 16


async def _cancel_after(base_url: str, delay_s: float) -> tuple[float, int]:
    """Start STREAMS re-issuing streams, cancel them after delay_s; seconds they took to end, connections left."""
    async with StreamClient(base_url) as client:
        path, body = build_request("completions", "fault-model", "one two three", 4)

        async def reissue() -> None:
            while True:
                result = await client.stream(path, body)
                assert result.error is None, result.error

        tasks = [asyncio.create_task(reissue()) for _ in range(STREAMS)]
        await asyncio.sleep(delay_s)
        cancelled_at = time.perf_counter()
        for task in tasks:
            task.cancel()
        done, pending = await asyncio.wait(tasks, timeout=5.0)
        took = time.perf_counter() - cancelled_at
        for task in pending:
            task.cancel()
        assert all(t.cancelled() for t in done), [t.exception() for t in done if not t.cancelled()]
    return took, len(client._open)


def test_streams_cancelled_while_connecting_end_at_once_and_close_their_connections() -> None:
    with FaultServer() as server:
        for step in range(24):  # 0 to 6 ms: before, during and after the connections are made
            took, left_open = run_sync(lambda: _cancel_after(server.base_url, step * 0.25e-3))  # noqa: B023
            assert took < 2.0, f"cancelled at {step * 0.25} ms, the streams ran on for {took:.1f} s"
            assert left_open == 0
