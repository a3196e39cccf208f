"""Embeddings requests (issue 46): a reply judged, a request's record, a step's summary and figures, the sweep's
parameters, the lines that show a step, and the embedded server's embedding model."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pandas as pd
import pytest

from toolkit.base.errors import ParamsError
from toolkit.cli.entry import build_parser
from toolkit.loadgen.embeddings import EmbeddingResult, embedding_record, embeddings_body, read_reply
from toolkit.loadgen.open_loop import PlannedRequest
from toolkit.method.embeddings import embedding_figures, embedding_latencies, summarize_embedding_step
from toolkit.method.goodput import BOUND_COLUMNS, ServiceLevel
from toolkit.rates.cli import params_from_args, summary_table
from toolkit.rates.files import records_frame
from toolkit.rates.lengths import check_lengths
from toolkit.rates.params import make_rate_params
from toolkit.rates.step_lines import progress_text
from toolkit.reports.rate_plots import knee_figure
from toolkit.reports.rate_tables import rejudge, steps_table
from toolkit.servers.embedded.server import POOLING_FLAGS, STRUCTURED_FLAGS, ServerConfig, launch_command


def reply(vectors: int, tokens: object = 12) -> bytes:
    data = [{"index": i, "object": "embedding", "embedding": [0.5, 0.25]} for i in range(vectors)]
    return orjson.dumps({"data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


def test_a_reply_gives_its_prompt_tokens_or_why_it_is_no_embedding_of_the_inputs() -> None:
    assert read_reply(200, reply(3), 3) == (12, None)
    assert read_reply(404, b'{"error": {"message": "Not  Found"}}', 1) == (None, "HTTP 404: Not Found")
    assert read_reply(200, reply(2), 3) == (None, "the reply holds 2 embeddings for 3 inputs")
    assert read_reply(200, b"[1, 2]", 1) == (None, "the reply holds no list of embeddings for 1 inputs")
    assert read_reply(200, b"<html>", 1) == (None, "the reply is not JSON")
    assert read_reply(200, reply(1, "12"), 1) == (None, "the reply's usage.prompt_tokens is '12', not a count")
    assert read_reply(200, reply(1, -1), 1)[0] is None


def test_a_record_times_the_whole_reply_and_has_no_token_times() -> None:
    planned = PlannedRequest("/v1/embeddings", embeddings_body("m", ["a", "b"]), 20)
    done = embedding_record(3, 0.5, EmbeddingResult(started=10.6, ended=10.65, prompt_tokens=21), planned, 10.0)
    assert done["sent_s"] == pytest.approx(0.6) and done["last_token_s"] == pytest.approx(0.65)
    assert math.isnan(done["first_token_s"]) and done["chunk_times_s"] == [] and done["output_tokens"] == 0
    assert (done["input_tokens"], done["items"], done["error"]) == (21, 2, None)
    failed = embedding_record(0, 0.0, EmbeddingResult(started=10.0, ended=10.1, error="HTTP 500: x"), planned, 10.0)
    assert math.isnan(failed["last_token_s"]) and failed["input_tokens"] == 0 and failed["error"] == "HTTP 500: x"
    unsent = embedding_record(0, 0.0, EmbeddingResult(), planned, 10.0)
    assert math.isnan(unsent["sent_s"]) and unsent["error"] == "not sent: the step was stopped"


def step_records(e2e_ms: list[float], failed: int = 0, items: int = 4):
    """A step of requests 0.1 s apart, each taking `e2e_ms`, and `failed` more that failed."""
    records = []
    for i, ms in enumerate([*e2e_ms, *[math.nan] * failed]):
        result = EmbeddingResult(started=0.1 * i, ended=0.1 * i + ms / 1e3, prompt_tokens=10 * items)
        if math.isnan(ms):
            result = EmbeddingResult(started=0.1 * i, ended=0.1 * i, error="HTTP 500: x")
        planned = PlannedRequest("/v1/embeddings", embeddings_body("m", ["x"] * items))
        records.append(embedding_record(i, 0.1 * i, result, planned, 0.0))
    return records_frame(records, 0, 10.0)


def test_a_step_is_judged_on_its_end_to_end_latency_without_any_first_token() -> None:
    frame = step_records([20.0] * 16 + [300.0] * 4, failed=2)
    summary = summarize_embedding_step(frame, ServiceLevel(e2e_ms=100, target=0.9), trim=0)
    assert (summary.requests, summary.completed, summary.failed) == (22, 20, 2)
    assert summary.slo_fraction == pytest.approx(16 / 22) and not summary.slo_met
    assert summary.goodput == pytest.approx(16 / summary.duration_s)
    assert summary.percentiles["e2e_p50_ms"] == pytest.approx(20.0)
    assert summary.percentiles["e2e_p90_ms"] == pytest.approx(300.0) and summary.percentiles["e2e_p99_ms"] is None
    assert all(summary.percentiles[f"{n}_p50_ms"] is None for n in ("ttft", "tpot", "itl", "ttft_sched"))
    assert summary.bounds["e2e_p50_low_ms"] is not None and summary.bounds["ttft_p50_low_ms"] is None
    assert set(summary.bounds) == set(BOUND_COLUMNS) and summary.output_tok_s == 0
    assert summary.input_tokens == 20 * 40  # failed requests count none
    assert embedding_latencies(frame)["ttft_ms"].isna().all()
    figures = embedding_figures(frame, summary)
    assert figures["items"] == 80 and figures["items_s"] == pytest.approx(80 / summary.duration_s)
    assert figures["input_tok_s"] == pytest.approx(800 / summary.duration_s)


def test_embeddings_parameters_refuse_what_only_generation_has() -> None:
    assert make_rate_params({"endpoint": "embeddings"}).inputs_per_request() == 1
    assert make_rate_params({"endpoint": "embeddings", "batch_size": 8, "slo_e2e_ms": 50, "search": True}).search
    bad = {
        "batch_size: Input should be greater than or equal to 1 (got 0)": {"endpoint": "embeddings", "batch_size": 0},
        "batch_size: applies to endpoint embeddings only": {"batch_size": 2},
        "output_tokens, slo_tpot_ms: generation only; endpoint embeddings takes none (an SLO: slo_e2e_ms)": {
            "endpoint": "embeddings", "output_tokens": 16, "slo_tpot_ms": 10},
        "workload: not with endpoint embeddings (its inputs are built here, cold, and sent from this process)": {
            "endpoint": "embeddings", "workload": "shared-prefix", "prefixes": 2, "prefix_tokens": 64},
    }  # fmt: skip
    for message, values in bad.items():
        with pytest.raises(ParamsError) as caught:
            make_rate_params(values)
        assert str(caught.value) == message


def test_an_input_must_fit_the_context_and_no_output_is_counted_beside_it() -> None:
    check_lengths(make_rate_params({"endpoint": "embeddings", "input_tokens": 256}), max_model_len=256)
    with pytest.raises(ParamsError, match=r"^input_tokens: up to 300 tokens, over the server's max_model_len 256$"):
        check_lengths(make_rate_params({"endpoint": "embeddings", "input_tokens": "uniform:8:300"}), 256)
    with pytest.raises(ParamsError, match=r"^input_tokens \+ output_tokens: "):
        check_lengths(make_rate_params({"input_tokens": 256}), max_model_len=256)


def test_the_command_line_takes_a_batch_size() -> None:
    args = build_parser().parse_args(["rates", "--base-url", "http://h:1", "--endpoint", "embeddings",
                                      "--batch-size", "16"])  # fmt: skip
    assert params_from_args(args).batch_size == 16
    args = build_parser().parse_args(["rates", "--base-url", "http://h:1", "--endpoint", "embeddings",
                                      "--batch-size", "0"])  # fmt: skip
    with pytest.raises(ParamsError, match=r"^batch_size: "):
        params_from_args(args)


def test_an_embeddings_step_is_shown_by_its_inputs_and_end_to_end_latency() -> None:
    frame = step_records([20.0] * 12)
    summary = summarize_embedding_step(frame, ServiceLevel(e2e_ms=100))
    row = {"step": 0, "searched": False, **summary.row(), **embedding_figures(frame, summary), "lag_flagged": False,
           "server_waiting_max": 0}  # fmt: skip
    line = progress_text(row, slo=True)
    assert "items/s" in line and "tok/s in" in line and "e2e p50 20 ms" in line and "TTFT" not in line
    table = summary_table([row])
    assert "items/s" in table.splitlines()[0] and "TTFT" not in table and " 12/12 " in table


def test_the_steps_table_shows_inputs_and_end_to_end_latency_and_rejudging_keeps_the_goodput() -> None:
    frame = step_records([20.0] * 12 + [60.0] * 8)
    level = ServiceLevel(e2e_ms=100)
    summary = summarize_embedding_step(frame, level)
    row = {"step": 0, **summary.row(), **embedding_figures(frame, summary), "lag_flagged": False,
           "server_waiting_max": 0, "server_waiting_mean": 0.0, "searched": False}  # fmt: skip
    table = steps_table(pd.DataFrame([row]))
    assert {"Items/s", "Input tok/s", "E2E p50", "E2E p90"} <= set(table.columns)
    assert not {"Output tok/s", "TTFT p50", "TPOT p50"} & set(table.columns)  # none generated, none streamed
    assert table.loc[0, "E2E p50"].startswith("20") and "from send" in table.loc[0, "E2E p90"]
    (judged,) = rejudge(frame, level).to_dict("records")
    assert judged["goodput"] == pytest.approx(row["goodput"]) and judged["completed"] == 20
    (stricter,) = rejudge(frame, ServiceLevel(e2e_ms=40)).to_dict("records")
    assert stricter["goodput"] == pytest.approx(row["goodput"] * 12 / 20)


def test_the_knee_of_an_embeddings_sweep_is_its_end_to_end_latency_against_inputs_per_second() -> None:
    rows = []
    for step, ms in enumerate((20.0, 30.0, 90.0)):
        frame = step_records([ms] * 12)
        summary = summarize_embedding_step(frame, ServiceLevel(e2e_ms=50))
        rows.append({"step": step, "searched": False, "lag_flagged": step == 2, **summary.row(),
                     **embedding_figures(frame, summary), "offered_rate": 10.0 * (step + 1)})  # fmt: skip
    figure = knee_figure(pd.DataFrame(rows), ServiceLevel(e2e_ms=50))
    (ax,) = figure.axes
    assert ax.get_xlabel() == "Achieved inputs/s (embeddings)" and "End-to-end" in ax.get_title()
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["E2E p50"].get_ydata()) == pytest.approx([20.0, 30.0, 90.0], abs=0.01)
    assert list(lines["limit 50 ms"].get_ydata()) == [50, 50] and "lag flagged" in lines


def test_the_embedding_model_runs_the_pooling_runner_without_generation_flags() -> None:
    embedding = launch_command(ServerConfig(model="tiny-embedding", max_num_seqs=4), 8000, Path("/m"))
    assert embedding[embedding.index("--served-model-name") + 1] == "tiny-embedding"
    assert " ".join(POOLING_FLAGS) in " ".join(embedding) and embedding[-2:] == ["--max-num-seqs", "4"]
    assert not set(STRUCTURED_FLAGS) & set(embedding) and "--enable-per-request-metrics" not in embedding
    generating = launch_command(ServerConfig(), 8000, Path("/m"))
    assert generating[generating.index("--served-model-name") + 1] == "tiny-llama" and "--runner" not in generating
    with pytest.raises(ParamsError, match=r"^model: 'tiny-bert'; allowed: tiny-llama, tiny-embedding, tiny-vision$"):
        ServerConfig(model="tiny-bert").check()
    with pytest.raises(ParamsError, match=r"^model: tiny-embedding generates nothing"):
        ServerConfig(model="tiny-embedding", stream_interval=4).check()
