"""Servers that send bytes but no progress cannot hold a call open for ever: a stream's idle timeout counts only what
moves its reply on (its head, an event with data, its end), not SSE keep-alive comments, and its deadline ends one
that trickles events without tokens; a server call (`/metrics`, `/v1/models`, `/tokenize`) is read whole within its
timeout, uncompressed and capped in size."""

from __future__ import annotations

import asyncio
import re
import time

import psutil
import pytest

from tests.faultserver import FaultServer
from toolkit.base.errors import ServerAPIError
from toolkit.loadgen.client import StreamClient, build_request, reply_deadline_s
from toolkit.matrix.runner import run_sync
from toolkit.matrix.server_api import ServerAPI


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


@pytest.mark.parametrize(("kind", "said"), [("trickle", "^deadline: the reply went on past 2.5 s "),
                                           ("absurd-usage", "usage.completion_tokens is 9223372036854775807, more "
                                                            "than the 1 asked for")])  # fmt: skip
def test_events_without_tokens_end_at_the_deadline_and_an_absurd_count_is_refused(kind: str, said: str) -> None:
    async def one_stream(base_url: str) -> tuple[str | None, float]:
        async with StreamClient(base_url, read_timeout_s=0.5) as client, asyncio.timeout(30):
            started = time.monotonic()
            result = await client.stream(*build_request("completions", "fault-model", "one two", 1))
        return result.error, time.monotonic() - started

    with FaultServer() as server:
        server.set_fault(kind)
        error, took = run_sync(lambda: one_stream(server.base_url))
    assert error is not None and re.search(said, error), error
    deadline = reply_deadline_s(0.5, 1)
    assert took < deadline + 5 and (kind != "trickle" or took >= deadline), took  # the trickle runs for an hour


@pytest.mark.parametrize(
    ("kind", "said"),
    [("trickle", "/metrics did not answer in full within 1 s"),
     ("gzip", "/metrics answered 'gzip'-encoded though asked for an uncompressed reply")],
)  # fmt: skip
def test_a_trickling_or_compressed_metrics_reply_is_refused_within_the_call_timeout(kind: str, said: str) -> None:
    async def scrape(base_url: str) -> str:
        async with ServerAPI(base_url, timeout_s=1.0) as api, asyncio.timeout(30):  # 30: fails, not hangs, the test
            with pytest.raises(ServerAPIError) as caught:
                await api.metrics()
            assert await api.metrics_or_none() is None  # the sampler's call: no sample, the cell goes on
        return str(caught.value)

    with FaultServer() as server:
        server.set_metrics_fault(kind)
        message = run_sync(lambda: scrape(server.base_url))
    assert message == server.base_url + said
    assert psutil.Process().memory_info().rss < 1024**3  # nothing inflated
