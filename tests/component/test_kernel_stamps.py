"""`KernelStampClient` (arrival times from the kernel's receive timestamps) streams like the default client."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.kernel_stamps import AVAILABLE, KernelStampClient, _StampedConnection
from tests.faultserver import FaultServer
from toolkit.loadgen.client import StreamClient, StreamResult, build_request
from toolkit.matrix.runner import run_sync

pytestmark = pytest.mark.timeout(60)


async def _two_streams(client: StreamClient) -> list[StreamResult]:
    async with client:
        path, body = build_request("completions", "fault-model", "one two three", 6)
        results = [await client.stream(path, body)]
        # The stream returns at [DONE]; the reply's closing chunk may come a moment later, and only then is the
        # connection idle again. The second request then goes on the kept connection.
        for _ in range(100):
            if client._idle:
                break
            await asyncio.sleep(0.01)
        results.append(await client.stream(path, body))
        stamped = AVAILABLE and isinstance(client, KernelStampClient)
        assert all(isinstance(conn, _StampedConnection) == stamped for conn in client._open)
        assert len(client._open) == 1
    return results


@pytest.mark.parametrize("kind", [StreamClient, KernelStampClient])
def test_both_clients_measure_the_same_stream(kind: type[StreamClient]) -> None:
    with FaultServer() as server:
        results = run_sync(lambda: _two_streams(kind(server.base_url)))
    for r in results:
        assert r.error is None and r.done and r.completion_tokens == 6, r
        times = [t for t, _ in r.token_events]
        assert [n for _, n in r.token_events] == list(range(1, 7))
        assert r.ended is not None and r.started < times[0] and times == sorted(times) and times[-1] <= r.ended
