"""Open-loop sending: each request leaves at its due time whatever the earlier ones are doing.

One dispatcher coroutine sleeps until the next due time (on the running loop: uvloop under the toolkit's runners)
and starts that request as a task on the shared `StreamClient`; an optional cap on requests in flight makes a
request wait for a free slot (its wait shows as scheduling lag). Every request gives one record: due time, send
time, first and last token, every content chunk's arrival, tokens, error and note (a reply whose kept text was
cut), times in seconds from the step's start (`time.perf_counter()`), and `schema_valid` for a request that carries
a `response_format` (its reply's text is kept, within `reply_text_bound`, and checked once the step's requests are
all done: toolkit.loadgen.structured; None for a failed request or one without a format), and for a request that
carries `tools`, `tool_called` (its stream carried a tool call with a function's name) and `tool_args_valid` (the
first call's arguments keep to its function's `parameters`: toolkit.loadgen.tools; None without a call), and
`images`, the image parts the request carried (toolkit.loadgen.images). The
fields are those a rate step stores, less the step's own (`step`, `offered_rate`), which the caller adds.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from toolkit.loadgen.client import StreamClient, StreamResult
from toolkit.loadgen.images import image_count
from toolkit.loadgen.reply_checks import schema_fields, tool_fields
from toolkit.loadgen.server_timing import SERVER_FIELDS, ServerTiming

REQUEST_FIELDS: tuple[str, ...] = ("request", "scheduled_s", "sent_s", "first_token_s", "last_token_s",
                                   "chunk_times_s", "input_tokens", "output_tokens", "error",
                                   "cached_tokens", "note", *SERVER_FIELDS, "wire_ttft_ms",
                                   "schema_valid", "schema_problem", "tool_called", "tool_args_valid",
                                   "images")  # fmt: skip


@dataclass(frozen=True)
class PlannedRequest:
    """One request of a step: where it goes, its body, and the prompt tokens it was built with (if known)."""

    path: str
    body: dict[str, Any]
    input_tokens: int | None = None


def record(index: int, due: float, result: StreamResult, planned: PlannedRequest, start: float) -> dict[str, Any]:
    """The request's record; times from `start`. A failed request has NaN first/last token times."""
    if not result.started:  # never left: cancelled before its slot or its due time
        return {
            "request": index,
            "scheduled_s": due,
            "sent_s": math.nan,
            "first_token_s": math.nan,
            "last_token_s": math.nan,
            "chunk_times_s": [],
            "input_tokens": planned.input_tokens or 0,
            "output_tokens": 0,
            "error": "not sent: the step was stopped",
        }
    chunks = [t - start for t, _ in result.token_events]
    first = result.first_token_at - start if result.first_token_at is not None else (chunks[0] if chunks else None)
    error = result.error or ("cancelled" if result.cancelled else None)
    if error is None and first is None:
        error = "no token in the reply"
    failed = error is not None
    prompt = result.prompt_tokens if result.prompt_tokens is not None else planned.input_tokens
    ttft_ms = None if failed or first is None else (first - (result.started - start)) * 1e3
    return {
        "request": index,
        "scheduled_s": due,
        "sent_s": result.started - start,
        "first_token_s": math.nan if failed or first is None else first,
        "last_token_s": math.nan if failed or not chunks else chunks[-1],
        "chunk_times_s": chunks,
        "input_tokens": int(prompt or 0),
        "output_tokens": int(result.completion_tokens),
        "error": error,
        "cached_tokens": result.cached_tokens,
        "note": result.note,
        **server_fields(result.server_timing, ttft_ms),
        **schema_fields(planned.body, result, failed),
        **tool_fields(planned.body, result, failed),
        "images": image_count(planned.body),
    }


def server_fields(timing: ServerTiming | None, ttft_ms: float | None) -> dict[str, float]:
    """A record's `server_*` fields and `wire_ttft_ms`: the client's TTFT less the server's queue and TTFT, the
    time outside the engine (network, HTTP, the API server, the client). NaN where a figure is missing."""
    fields = {k: math.nan if v is None else v for k, v in (timing or ServerTiming()).fields().items()}
    queue, server_ttft = fields["server_queue_ms"], fields["server_ttft_ms"]
    wire = math.nan if ttft_ms is None else ttft_ms - queue - server_ttft
    return {**fields, "wire_ttft_ms": wire}


async def send_open_loop(
    client: StreamClient,
    requests: Sequence[PlannedRequest],
    due: Sequence[float],
    *,
    max_in_flight: int | None = None,
    start: float | None = None,
) -> list[dict[str, Any]]:
    """Send `requests[i]` at `start + due[i]` (due ascending), read every reply, return their records in order.

    `start` defaults to now. Cancelled: the requests in flight are cancelled and the cancellation propagates.
    """
    if len(requests) != len(due):
        raise ValueError(f"{len(requests)} requests for {len(due)} due times")
    if max_in_flight is not None and max_in_flight < 1:
        raise ValueError(f"max_in_flight: {max_in_flight} is not a whole number >= 1")
    t0 = time.perf_counter() if start is None else start
    # a reply checked against a response format keeps its text (checked after the step, off the sending path)
    # and one that carries tools keeps its first tool call
    results = [StreamResult(text=[] if "response_format" in r.body else None,
                            tool_args=[] if "tools" in r.body else None) for r in requests]  # fmt: skip

    async def one(i: int) -> None:
        await client.stream(requests[i].path, requests[i].body, results[i])

    await on_schedule(due, t0, one, max_in_flight)
    return [record(i, when, results[i], requests[i], t0) for i, when in enumerate(due)]


async def sleep_until(moment: float) -> None:
    """Wait until `time.perf_counter()` reaches `moment` (the loop's timers may wake early: never return early)."""
    while (delay := moment - time.perf_counter()) > 0:
        await asyncio.sleep(delay)


async def on_schedule(
    due: Sequence[float], t0: float, start: Callable[[int], Awaitable[None]], max_in_flight: int | None = None
) -> None:
    """Start `start(i)` at `t0 + due[i]` (due ascending), at most `max_in_flight` at once (a later one waits for a
    free slot), and wait for all. Cancelled: those started are cancelled and the cancellation propagates."""
    gate = asyncio.Semaphore(max_in_flight) if max_in_flight else None

    async def held(i: int) -> None:
        if gate is None:
            await start(i)
            return
        async with gate:
            await start(i)

    tasks: list[asyncio.Task[None]] = []
    try:
        for i, when in enumerate(due):
            await sleep_until(t0 + when)
            tasks.append(asyncio.create_task(held(i)))
        if tasks:
            await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
