"""Servers that send bytes but no progress cannot hold a stream open for ever: the idle timeout counts only what
moves a reply on (its head, an event with data, its end), not SSE keep-alive comments."""

from __future__ import annotations

import asyncio

from tests.faultserver import FaultServer
from toolkit.loadgen.client import StreamClient, build_request
from toolkit.matrix.runner import run_sync


def test_keep_alive_comments_after_a_token_end_in_a_read_timeout() -> None:
    async def one_stream(base_url: str) -> tuple[str | None, int]:
        async with StreamClient(base_url, read_timeout_s=0.5) as client:
            # Bounded here so that a stream the comments keep alive fails the test instead of hanging it.
            async with asyncio.timeout(30):
                result = await client.stream(*build_request("completions", "fault-model", "one two", 8))
        return result.error, result.completion_tokens

    with FaultServer() as server:
        server.set_fault("keepalive")
        error, tokens = run_sync(lambda: one_stream(server.base_url))
        comments_sent = server.fault is not None and server.fault.hit == 1
    assert error == "read timeout: no data for 0.5 s", error
    assert tokens == 2 and comments_sent  # two tokens came, then only comments
