"""Embeddings rate sweeps against the fault server (issue 46): the records and rows, failures, and a server that
embeds nothing refused before anything is measured."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.component.test_notebooks_offline import execute
from tests.faultserver import FaultServer
from toolkit.base.errors import ParamsError, RateSweepError
from toolkit.rates.cli import summary_table
from toolkit.rates.files import read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.results.rate_runs import load_rate_sweep

BATCH = 3


@pytest.fixture
def server(make_fault_server: Callable[..., FaultServer]) -> FaultServer:
    return make_fault_server(embeddings=True, embedding_delay_s=0.01)


def sweep(server: FaultServer, tmp_path: Path, said: list[str] | None = None, **values: Any) -> Path:
    base = {"base_url": server.base_url, "endpoint": "embeddings", "batch_size": BATCH, "requests_per_step": 12,
            "input_tokens": 40, "arrival": "constant", "results_dir": str(tmp_path / "run")}  # fmt: skip
    return run_rates(make_rate_params(base | values), say=(said if said is not None else []).append)


def test_an_embeddings_step_reports_items_input_tokens_and_end_to_end_latency(
    server: FaultServer, tmp_path: Path
) -> None:
    said: list[str] = []
    out = sweep(server, tmp_path, said, rates=[20, 40], slo_e2e_ms=2000)
    rows = read_steps(out)
    assert [r["offered_rate"] for r in rows] == [20, 40]
    for row in rows:
        assert row["completed"] == row["requests"] == 12 and row["items"] == 12 * BATCH
        assert row["items_s"] == pytest.approx(row["items"] / row["duration_s"])
        assert row["input_tok_s"] == pytest.approx(row["input_tokens"] / row["duration_s"])
        assert row["input_tokens"] == 12 * BATCH * 40  # every input as long as asked, as the server counted it
        assert row["server_prompt_tokens"] == row["client_prompt_tokens"] == row["input_tokens"]
        assert 10 <= row["e2e_p50_ms"] <= row["e2e_sched_p50_ms"] < 2000  # the server's 10 ms, and the lag
        assert row["e2e_p50_low_ms"] is not None and row["e2e_p50_low_ms"] <= row["e2e_p50_ms"]
        assert row["ttft_p50_ms"] is None and row["tpot_p50_ms"] is None and row["itl_p50_ms"] is None
        assert row["ttft_p50_low_ms"] is None and row["output_tok_s"] == 0
        assert row["slo_fraction"] == 1.0 and row["goodput"] == pytest.approx(row["request_throughput"])
    records = read_records(out)
    assert (records["items"] == BATCH).all() and records["first_token_s"].isna().all()
    assert (records["output_tokens"] == 0).all() and records["chunk_times_s"].map(len).eq(0).all()
    assert ((records["last_token_s"] - records["sent_s"]) > 0.01).all()
    inputs = [text for entry in server.log if entry["path"] == "/v1/embeddings" for text in entry["input"]]
    assert len(inputs) == 1 + 2 * 12 * BATCH and len(set(inputs)) == len(inputs)  # the probe, then cold inputs
    assert "items/s" in said[0] and "TTFT" not in said[0]
    table = summary_table(rows)
    assert "items/s" in table and "e2e p50" in table and "TTFT" not in table
    loaded = load_rate_sweep(out)  # what the notebooks read: the inputs per request kept
    assert (loaded.records["items"] == BATCH).all() and loaded.steps["items_s"].notna().all()


def test_failed_embeddings_are_recorded_and_never_meet_the_level(server: FaultServer, tmp_path: Path) -> None:
    server.set_fault("500", after=4, times=3)  # the probe is the first request
    out = sweep(server, tmp_path, rates=[30], slo_e2e_ms=2000, steady_trim=0)
    (row,) = read_steps(out)
    assert (row["completed"], row["failed"], row["items"]) == (9, 3, 9 * BATCH)
    assert row["slo_fraction"] == pytest.approx(9 / 12) and not row["slo_met"]
    failed = read_records(out).query("error.notna()")
    assert len(failed) == 3 and failed["error"].str.startswith("HTTP 500").all()
    assert failed["last_token_s"].isna().all() and (failed["input_tokens"] == 0).all()
    assert row["client_prompt_tokens"] == row["server_prompt_tokens"]  # refused inputs counted on neither side


def test_a_server_that_embeds_nothing_is_refused_before_anything_is_measured(tmp_path: Path) -> None:
    with FaultServer() as generating:
        with pytest.raises(ParamsError, match=r"^endpoint: embeddings: .* does not serve embeddings of "
                                              r"'fault-model' \(HTTP 404: Not Found\)$"):  # fmt: skip
            sweep(generating, tmp_path, rates=[10])
        assert [e["path"] for e in generating.log if e["path"].startswith("/v1/e")] == ["/v1/embeddings"]
        assert not generating.completion_requests() and not (tmp_path / "run").exists()


def test_inputs_per_request_that_are_not_counts_are_named_when_read(server: FaultServer, tmp_path: Path) -> None:
    out = sweep(server, tmp_path, rates=[50])
    path = out / "rates" / "step-000.parquet"
    records = pd.read_parquet(path)
    records.assign(items=records["items"].astype(str)).to_parquet(path)
    with pytest.raises(RateSweepError, match=r"step-000\.parquet: items: not whole counts of inputs per request$"):
        load_rate_sweep(out)


@pytest.mark.process
def test_the_rate_notebook_shows_an_embeddings_sweep(server: FaultServer, tmp_path: Path) -> None:
    """Its steps table and knee in inputs and end-to-end latency, its rejudging the sweep's own goodputs."""
    out = sweep(server, tmp_path, rates=[20, 40], slo_e2e_ms=2000)
    executed, probed = execute("rate_sweep", tmp_path, {"RESULTS_DIR": str(out), "MEASURE": False})
    by_source = {cell.source.splitlines()[0]: cell for cell in executed.cells if cell.source}
    table = by_source["rate_views.steps(sweep)"].outputs[0]["data"]["text/html"]
    assert "Items/s" in table and "E2E p90" in table and "TTFT p50" not in table
    (knee,) = probed[by_source["rate_plots.knee_figure(steps, sweep.level, x=X_AXIS)"].id]["figure"]
    assert knee["title"].startswith("End-to-end") and [line["label"] for line in knee["lines"]][:2] == [
        "E2E p50", "E2E p90"]  # fmt: skip
    rejudged = next(cell for first, cell in by_source.items() if first.startswith("level = rate_tables.rejudge"))
    frame = probed[rejudged.id]["frame"]
    goodputs = [dict(zip(frame["columns"], values, strict=True))["goodput"] for values in frame["data"]]
    assert goodputs == pytest.approx([row["goodput"] for row in read_steps(out)]) and min(goodputs) > 0
