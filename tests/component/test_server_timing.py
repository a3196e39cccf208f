"""Per-request server timing through a rate sweep against the fault server: vLLM's `metrics` object on each
stream's final chunk (plausible, malformed, contradicting the client's clock), and vLLM's timing histograms when
no reply carries it: the records' `server_*` and `wire_ttft_ms`, the step's breakdown, and what the run says."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.faultserver import CONTRADICTING_EXTRA_MS, CONTRADICTING_QUEUE, FaultServer
from toolkit.loadgen.server_timing import SERVER_FIELDS
from toolkit.method.breakdown import BREAKDOWN_COLUMNS
from toolkit.method.goodput import steady_mask
from toolkit.rates.files import read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates

REQUESTS, OUTPUT, INTERVAL_S = 8, 4, 0.005
TIMING = [*SERVER_FIELDS, "wire_ttft_ms"]


@pytest.fixture
def server(make_fault_server: Callable[..., FaultServer]) -> FaultServer:
    return make_fault_server(token_interval_s=INTERVAL_S, per_request_metrics=True)


def sweep(server: FaultServer, tmp_path: Path) -> tuple[dict[str, Any], pd.DataFrame, list[str]]:
    """One step of `REQUESTS` at 50 req/s: its steps.jsonl row, its records, what the run said."""
    said: list[str] = []
    params = {"base_url": server.base_url, "rates": [50], "requests_per_step": REQUESTS, "input_tokens": 30,
              "output_tokens": OUTPUT, "results_dir": str(tmp_path / "run")}  # fmt: skip
    out = run_rates(make_rate_params(params), say=said.append)
    (row,) = read_steps(out)  # validated as written: a negative wire passes, a negative part would not
    return row, read_records(out), said


def client_ttft_ms(records: pd.DataFrame) -> pd.Series:
    return (records["first_token_s"] - records["sent_s"]) * 1e3


def test_plausible_timing_splits_every_request(server: FaultServer, tmp_path: Path) -> None:
    row, records, said = sweep(server, tmp_path)
    assert (row["completed"], row["failed"]) == (REQUESTS, 0) and records["error"].isna().all()
    assert records[TIMING].notna().all(axis=None) and records["note"].isna().all()
    # The fault server's own delays: a prefill of 2 ms and more, then OUTPUT - 1 intervals between the tokens.
    assert (records["server_ttft_ms"] >= 1.99).all() and (records["server_queue_ms"] >= 0).all()
    assert (records["server_generation_ms"] >= 0.99 * (OUTPUT - 1) * INTERVAL_S * 1e3).all()
    # Every request: the client's TTFT is the server's queue and TTFT and the wire, which is never negative.
    assert (records["wire_ttft_ms"] >= 0).all()
    parts = records["server_queue_ms"] + records["server_ttft_ms"] + records["wire_ttft_ms"]
    assert ((client_ttft_ms(records) - parts).abs() <= 1e-9).all()
    e2e = (records["last_token_s"] - records["sent_s"]) * 1e3
    assert (records["server_queue_ms"] + records["server_ttft_ms"] + records["server_generation_ms"] <= e2e).all()

    assert set(BREAKDOWN_COLUMNS) <= set(row)
    assert row["breakdown_basis"] == "per-request" and row["timing_mismatches"] == 0
    steady = records[steady_mask(records)]
    assert row["timed_requests"] == len(steady) == row["steady_requests"]
    for column, field in (("queue_p50_ms", "server_queue_ms"), ("server_ttft_p50_ms", "server_ttft_ms"),
                          ("wire_ttft_p50_ms", "wire_ttft_ms"), ("decode_p50_ms", "server_generation_ms"),
                          ("server_itl_p50_ms", "server_itl_ms")):  # fmt: skip
        assert row[column] == pytest.approx(steady[field].median()), column
    assert row["wire_ttft_p50_ms"] >= 0
    assert row["queue_mean_ms"] is None and row["wire_ttft_mean_ms"] is None  # no histograms on this server
    assert not [line for line in said if "server timing" in line]


def test_a_malformed_object_costs_only_those_requests_timing(server: FaultServer, tmp_path: Path) -> None:
    server.set_fault("metrics-malformed", after=2, times=3)
    row, records, said = sweep(server, tmp_path)
    assert (row["completed"], row["failed"], row["requests"]) == (REQUESTS, 0, REQUESTS)
    assert records["error"].isna().all() and (records["output_tokens"] == OUTPUT).all()
    assert row["client_generation_tokens"] == row["server_generation_tokens"] == REQUESTS * OUTPUT
    unread = records["note"].notna()
    assert unread.sum() == 3 and records.loc[unread, TIMING].isna().all(axis=None)
    assert records.loc[~unread, TIMING].notna().all(axis=None)
    assert (records.loc[unread, "note"] == "server timing not read: metrics.queue_time_ms is not a duration or rate "
                                           ">= 0 ('soon')").all()  # fmt: skip
    assert row["breakdown_basis"] == "per-request" and row["timing_mismatches"] == 0
    assert row["timed_requests"] == int((~unread & steady_mask(records)).sum())
    (line,) = [line for line in said if "server timing not read" in line]
    assert line == (f"step 0: 3 of {REQUESTS} requests' server timing not read: metrics.queue_time_ms is not a "
                    "duration or rate >= 0 ('soon')")  # fmt: skip


def test_timing_that_contradicts_the_client_s_clock_is_counted_and_said(server: FaultServer, tmp_path: Path) -> None:
    server.set_fault("metrics-contradicting")
    row, records, said = sweep(server, tmp_path)
    assert (row["completed"], row["failed"]) == (REQUESTS, 0)
    assert row["timing_mismatches"] == REQUESTS and row["breakdown_basis"] == "per-request"
    server_ttft = (records["server_queue_ms"] - CONTRADICTING_EXTRA_MS) / CONTRADICTING_QUEUE  # its measured TTFT
    assert (server_ttft < client_ttft_ms(records)).all()
    assert (records["wire_ttft_ms"] < 0).all() and row["wire_ttft_p50_ms"] < 0
    (line,) = [line for line in said if "exceeds the client's clock" in line]
    assert line.startswith(f"step 0: {REQUESTS} of {REQUESTS} requests' server timing exceeds the client's clock")
    assert not [line for line in said if "server timing not read" in line]


def test_histograms_stand_in_when_no_reply_carries_timing(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=INTERVAL_S, timing_histograms=True) as fs:
        row, records, said = sweep(fs, tmp_path)
    assert records[TIMING].isna().all(axis=None) and (row["completed"], row["failed"]) == (REQUESTS, 0)
    assert row["breakdown_basis"] == "histograms" and row["timed_requests"] == 0 and row["timing_mismatches"] == 0
    assert all(row[k] is None for k in BREAKDOWN_COLUMNS if k.endswith("_p50_ms"))
    assert 0 <= row["queue_mean_ms"] < row["server_ttft_mean_ms"] and row["server_ttft_mean_ms"] >= 1.99
    assert row["decode_mean_ms"] >= 0.99 * (OUTPUT - 1) * INTERVAL_S * 1e3
    expected = client_ttft_ms(records).mean() - row["queue_mean_ms"] - row["server_ttft_mean_ms"]
    assert row["wire_ttft_mean_ms"] == pytest.approx(expected) and row["wire_ttft_mean_ms"] >= 0
    assert not [line for line in said if "server timing" in line]


def test_neither_leaves_no_basis(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=INTERVAL_S) as fs:
        row, records, _ = sweep(fs, tmp_path)
    assert records[TIMING].isna().all(axis=None) and row["breakdown_basis"] == ""
    assert all(row[k] is None for k in BREAKDOWN_COLUMNS if k not in ("breakdown_basis", "timed_requests",
                                                                      "timing_mismatches"))  # fmt: skip
    assert (row["timed_requests"], row["timing_mismatches"]) == (0, 0)
