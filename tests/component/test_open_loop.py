"""The open-loop sender against the fault server: sends on time, never early, records, a cap, cancellation."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from tests.faultserver import FaultServer
from toolkit.loadgen.client import StreamClient, build_request
from toolkit.loadgen.open_loop import REQUEST_FIELDS, PlannedRequest, send_open_loop
from toolkit.matrix.runner import run_sync
from toolkit.method.goodput import RECORD_COLUMNS, RECORD_DEFAULTS


def planned(n: int, tokens: int = 5) -> list[PlannedRequest]:
    path, body = build_request("completions", "fault-model", "one two three", tokens)
    return [PlannedRequest(path, body, 11)] * n


def test_the_record_fields_are_a_step_record_less_the_step_columns() -> None:
    assert set(REQUEST_FIELDS) | {"step", "offered_rate"} | set(RECORD_DEFAULTS) == set(RECORD_COLUMNS)


def test_requests_leave_at_their_due_times_while_others_run() -> None:
    due = [0.0, 0.05, 0.1, 0.1, 0.3, 0.31]
    with FaultServer(token_interval_s=0.05) as server:  # each request lasts ~0.2 s: they overlap

        async def go() -> list[dict]:
            async with StreamClient(server.base_url) as client:
                return await send_open_loop(client, planned(len(due)), due)

        records = run_sync(go)
    assert [r["request"] for r in records] == list(range(len(due)))
    lags = [r["sent_s"] - r["scheduled_s"] for r in records]
    assert min(lags) >= 0 and sorted(lags)[len(lags) // 2] < 0.02  # never early; on time (a shared machine: 20 ms)
    assert all(r["error"] is None and r["output_tokens"] == 5 and r["input_tokens"] == 11 for r in records)
    assert all(r["sent_s"] < r["first_token_s"] <= r["last_token_s"] == r["chunk_times_s"][-1] for r in records)
    assert records[4]["sent_s"] < records[0]["last_token_s"] + 0.15  # not held back by the earlier ones
    assert all(len(r["chunk_times_s"]) == 5 for r in records)


def test_a_cap_on_requests_in_flight_delays_the_send() -> None:
    with FaultServer(token_interval_s=0.04) as server:

        async def go() -> list[dict]:
            async with StreamClient(server.base_url) as client:
                return await send_open_loop(client, planned(4), [0.0] * 4, max_in_flight=2)

        records = run_sync(go)
    sent = sorted(r["sent_s"] for r in records)
    assert sent[1] < 0.05 and sent[2] > 0.15  # the third waited for a free slot (~4 × 40 ms)
    with pytest.raises(ValueError, match="max_in_flight"):
        run_sync(lambda: send_open_loop(None, [], [], max_in_flight=0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="2 requests for 1 due times"):
        run_sync(lambda: send_open_loop(None, planned(2), [0.0]))  # type: ignore[arg-type]


def test_cancelling_a_step_cancels_its_requests() -> None:
    with FaultServer(token_interval_s=0.05) as server:

        async def go() -> None:
            async with StreamClient(server.base_url) as client:
                task = asyncio.create_task(send_open_loop(client, planned(4, tokens=100), [0.0, 0.0, 0.1, 5.0]))
                # Until the first three are streaming: a fixed 0.4 s was once too short for the third on a busy machine.
                due = time.perf_counter() + 4
                while len(server.completion_requests()) < 3 and time.perf_counter() < due:
                    await asyncio.sleep(0.02)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            deadline = time.perf_counter() + 5
            while server.state.running and time.perf_counter() < deadline:
                await asyncio.sleep(0.05)

        started = time.perf_counter()
        run_sync(go)
        assert time.perf_counter() - started < 4.5  # neither the 5 s request nor the 5 s streams were waited for
        assert server.state.running == 0 and len(server.completion_requests()) == 3


def test_a_request_that_never_left_is_recorded_as_not_sent() -> None:
    from toolkit.loadgen.client import StreamResult
    from toolkit.loadgen.open_loop import record

    row = record(7, 1.5, StreamResult(), planned(1)[0], 0.0)
    assert row["error"] == "not sent: the step was stopped" and math.isnan(row["sent_s"]) and row["input_tokens"] == 11


def test_held_requests_count_their_wait_in_the_latencies_from_the_schedule() -> None:
    """Under a cap of 1 in flight, 6 requests due 20 ms apart, each ~5 x 30 ms long: each waits for the one before.
    From the send, every TTFT is one token's time and a 100 ms TTFT limit passes; from the schedule (what the
    step is judged on), the wait counts and the same limit fails."""
    import pandas as pd

    from toolkit.method.goodput import ServiceLevel, request_latencies, summarize_step

    with FaultServer(token_interval_s=0.03) as server:

        async def go() -> list[dict]:
            async with StreamClient(server.base_url) as client:
                return await send_open_loop(client, planned(6), [0.02 * i for i in range(6)], max_in_flight=1)

        records = pd.DataFrame(run_sync(go)).assign(step=0, offered_rate=50.0)
    latencies = request_latencies(records)
    held = latencies["lag_ms"]
    assert (latencies["ttft_sched_ms"] - latencies["ttft_ms"]).to_numpy() == pytest.approx(held.to_numpy())
    assert held.iloc[-1] > 400  # due at 100 ms, it waited for the 5 before it (~150 ms each): sent near 750 ms
    level = ServiceLevel(ttft_ms=100, target=0.99)
    assert latencies["ttft_ms"].max() < 100  # from the send, every request would meet the limit ...
    judged = summarize_step(records, level)
    assert judged.held >= 4 and not judged.slo_met and judged.slo_fraction <= 2 / 6  # ... from the schedule, not
    on_send = summarize_step(records.assign(scheduled_s=records["sent_s"]), level)  # what a send-based judge sees
    assert on_send.slo_met and on_send.held == 0
    assert judged.percentiles["ttft_sched_p50_ms"] > judged.percentiles["ttft_p50_ms"] + 100
