"""The embeddings matrix's pure parts (issue 46): a cell's rates with their intervals, its latency percentiles with
their bounds, its status, the server cross-check; its parameters, plan and table."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from toolkit.base.errors import ParamsError
from toolkit.base.schema import Measurement
from toolkit.matrix.embeddings import PLACEHOLDER, EmbeddingSpec
from toolkit.matrix.plan import make_plan
from toolkit.method.contexts import embedding_lengths
from toolkit.method.embedding_cell import (
    EmbeddingRequest,
    e2e_percentiles,
    ended_in,
    judge_embeddings_window,
    prompt_token_problem,
    window_rates,
)
from toolkit.params import make_params
from toolkit.reports import views
from toolkit.reports.embeddings_tables import embeddings_table, has_embeddings
from toolkit.reports.tables import report_markdown, summary_line
from toolkit.results.store import to_dataframe


def request(ended: float, latency: float = 0.1, items: int = 2, tokens: int = 200, error: str | None = None):
    return EmbeddingRequest(ended - latency, ended, items, None if error else tokens, error)


def test_only_completed_requests_whose_reply_ended_inside_the_window_count() -> None:
    inside, failed = request(1.0), request(2.0, error="HTTP 500: boom")
    edges = [request(0.0), request(3.0), request(3.01)]  # (start, end]: the start's own reply is the ramp's
    assert ended_in([inside, failed, *edges], 0.0, 3.0) == [inside, edges[1]]


def test_even_parts_give_the_rate_with_no_spread() -> None:
    requests = [request(t) for t in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0)]  # two a second, 2 inputs of 100 tokens each
    found = window_rates(requests, 0.0, 3.0)
    assert found["items_s"] == pytest.approx(4.0) and found["input_tok_s"] == pytest.approx(400.0)
    assert found["items_s_ci"] == pytest.approx(0.0, abs=1e-12) and found["input_tok_s_ci"] == pytest.approx(0.0)


def test_uneven_halves_give_the_window_interval_at_0_9_degrees_of_freedom() -> None:
    from scipy import stats  # 0.6 s to import: only where it is used, not in every worker's collection

    # 2 and 4 replies of 2 items in the window's halves of 1.5 s: 2.667 and 5.333 items/s, mean 4, standard error
    # |5.333 - 2.667| / 2 = 1.333; as a decode window's (toolkit.method.spread.window_interval)
    requests = [request(t) for t in (0.5, 1.4, 1.8, 2.2, 2.5, 2.9)]
    found = window_rates(requests, 0.0, 3.0)
    assert found["items_s"] == pytest.approx(4.0)
    assert found["items_s_ci"] == pytest.approx(stats.t.ppf(0.975, 0.9) * 4 / 3)
    assert found["input_tok_s_ci"] == pytest.approx(100 * found["items_s_ci"])
    with pytest.raises(ValueError, match="is not after start"):
        window_rates(requests, 3.0, 3.0)


def test_a_part_counts_the_share_of_each_request_done_inside_it_but_nothing_where_no_reply_came() -> None:
    from toolkit.method.embedding_cell import _part_rates

    # a 1 s request from 1.5 s to 2.5 s: half of it done in (1, 2], all of its reply in (2, 3]
    one = [EmbeddingRequest(1.5, 2.5, 2, 200), request(1.2), request(2.9)]
    assert _part_rates(one, 1.0, 2.0) == pytest.approx(((2 + 0.5 * 2) / 1, (200 + 0.5 * 200) / 1))
    assert _part_rates(one, 2.0, 3.0) == pytest.approx(((0.5 * 2 + 2) / 1, (0.5 * 200 + 200) / 1))
    assert _part_rates([EmbeddingRequest(0.5, 3.5, 2, 200)], 1.0, 2.0) == (0.0, 0.0)  # in flight, no reply: silent


def test_percentiles_need_enough_values_and_come_with_distribution_free_bounds() -> None:
    latencies = [float(v) for v in range(1, 41)]  # 40 values: p90 bounded (36 needed), p99 not supported
    found = e2e_percentiles(latencies)
    assert found["e2e_p50_ms"] == pytest.approx(20.5) and found["e2e_p90_ms"] == pytest.approx(36.1)
    assert found["e2e_p99_ms"] is None and found["e2e_p99_high_ms"] is None
    for q in (50, 90):
        low, high = found[f"e2e_p{q}_low_ms"], found[f"e2e_p{q}_high_ms"]
        assert low is not None and high is not None and low <= found[f"e2e_p{q}_ms"] <= high
    assert (found["e2e_p50_low_ms"], found["e2e_p50_high_ms"]) == (14.0, 27.0)  # order statistics 14 and 27 of 40


def test_the_server_count_must_be_within_two_percent_of_the_replies() -> None:
    assert prompt_token_problem(1019.0, 1000) is None and prompt_token_problem(981.0, 1000) is None
    assert prompt_token_problem(None, 1000) is None  # no /metrics: nothing to check against
    assert prompt_token_problem(1030.0, 1000) == (
        "the server counted 1,030 prompt tokens, the replies 1,000 (off by more than 2%)"
    )
    assert prompt_token_problem(5.0, 0) is not None and prompt_token_problem(0.0, 0) is None


def steady(n: int = 12) -> list[EmbeddingRequest]:
    return [request(0.25 * (i + 1)) for i in range(n)]  # a reply every 0.25 s over (0, 3]


def test_a_valid_cell_from_server_samples_with_nothing_waiting() -> None:
    samples = [(0.5 * i, 2, 0) for i in range(7)]
    found = judge_embeddings_window(steady(), 0.0, 3.0, concurrency=2, server_samples=samples)
    assert found["status"] == "Valid" and found["error"] is None and found["status_basis"] == "server"
    assert found["completed"] == 12 and found["requests_started"] == 12 and found["measured_s"] == 3.0
    assert found["items_s"] == pytest.approx(8.0) and found["sub_windows"] == 2
    assert found["window_dof"] == pytest.approx(0.9)  # the dof its half-widths were read at, recorded with them
    assert found["e2e_p50_ms"] == pytest.approx(100.0) and found["avg_active"] == 2.0


def test_requests_waiting_half_a_second_make_the_cell_queued() -> None:
    samples = [(0.5 * i, 2, 1 if 2 <= i <= 3 else 0) for i in range(7)]
    found = judge_embeddings_window(steady(), 0.0, 3.0, concurrency=4, server_samples=samples)
    assert found["status"] == "Requests queued" and found["max_waiting"] == 1
    assert found["items_s"] == pytest.approx(8.0)  # its numbers are kept, as a queued decode cell's


def test_a_failed_request_or_an_empty_window_is_an_error_without_figures() -> None:
    failed = [*steady(), request(2.0, error="HTTP 500: engine died")]
    found = judge_embeddings_window(failed, 0.0, 3.0, concurrency=1, server_samples=None)
    assert (found["status"], found["error"]) == ("Error", "HTTP 500: engine died") and "items_s" not in found
    empty = judge_embeddings_window([request(5.0)], 0.0, 3.0, concurrency=1, server_samples=None)
    assert (empty["status"], empty["error"]) == ("Error", "no reply ended in the 3 s window")


def test_without_server_samples_the_client_counts_its_requests_in_flight() -> None:
    found = judge_embeddings_window(steady(), 0.0, 3.0, concurrency=1, server_samples=None)
    assert found["status"] == "Valid" and found["status_basis"] == "client"
    assert found["client_avg_active"] == pytest.approx(0.4)  # each 0.1 s of every 0.25 s: 8 of the 20 ticks


def test_each_input_of_a_request_is_its_own_text() -> None:
    spec = EmbeddingSpec("m", f"[run] {PLACEHOLDER} words", batch_size=3, concurrency=1, duration_s=1.0, cell_number=7)
    assert spec.body(42) == {"model": "m", "input": ["[run] #000007.000042.000 words", "[run] #000007.000042.001 words",
                                                     "[run] #000007.000042.002 words"]}  # fmt: skip
    other = EmbeddingSpec("m", f"[run] {PLACEHOLDER} words", batch_size=3, concurrency=1, duration_s=1.0)
    assert len(PLACEHOLDER) == len("#000007.000042.000") and 0 <= other.cell_number < 10**6


def test_embeddings_parameters_are_checked_in_one_line() -> None:
    params = make_params({"endpoint": "embeddings", "batch_size": 8, "contexts": "128,512", "max_output": 4096})
    assert params.inputs_per_request() == 8 and params.fingerprint()["batch_size"] == 8
    assert make_params({"endpoint": "embeddings"}).inputs_per_request() == 1
    with pytest.raises(ParamsError, match=r"^batch_size: applies to endpoint embeddings only$"):
        make_params({"batch_size": 2})
    with pytest.raises(ParamsError, match=r"^per_stream_prompts, kv_budget_tokens: not with endpoint embeddings"):
        make_params({"endpoint": "embeddings", "per_stream_prompts": True, "kv_budget_tokens": 1000})
    with pytest.raises(ParamsError, match=r"^batch_size: Input should be greater than or equal to 1 \(got 0\)$"):
        make_params({"endpoint": "embeddings", "batch_size": 0})
    with pytest.raises(ValueError, match="not a generating endpoint"):
        _ = params.generation_endpoint


def test_an_embeddings_plan_has_only_embeddings_cells() -> None:
    plan = make_plan(make_params({"endpoint": "embeddings", "concurrency": [1, 4]}), max_model_len=2048)
    assert plan.embedding_contexts == (128, 512) == tuple(embedding_lengths(2048))
    assert plan.keys(["prefill", "decode"]) == []
    assert plan.keys(["prefill", "decode", "embeddings"]) == [
        ("embeddings", 128, 1), ("embeddings", 128, 4), ("embeddings", 512, 1), ("embeddings", 512, 4)]  # fmt: skip
    generating = make_plan(make_params({"contexts": [64], "concurrency": [1], "max_output": 8}), max_model_len=2048)
    assert generating.keys(["prefill", "decode", "embeddings"]) == [("prefill", 64, 1), ("decode", 64, 1)]
    with pytest.raises(ParamsError, match=r"^contexts: 2K does not fit max_model_len 2,048 for prefill"):
        make_plan(make_params({"endpoint": "embeddings", "contexts": ["2K"]}), max_model_len=2048)
    with pytest.raises(ParamsError, match=r"^max_model_len: 150 leaves no room for an input of 128 tokens"):
        embedding_lengths(150)


def cell(ctx: int, n: int, **values: object) -> Measurement:
    return Measurement(phase="embeddings", context_tokens=ctx, context=str(ctx), concurrency=n, **values)  # type: ignore[arg-type]


def embeddings_frame() -> pd.DataFrame:
    return to_dataframe([
        cell(128, 1, status="Valid", batch_size=4, items_s=250.0, items_s_ci=12.5, input_tok_s=32000.0,
             input_tok_s_ci=1600.0, e2e_p50_ms=15.2, e2e_p50_low_ms=14.0, e2e_p50_high_ms=16.9, e2e_p90_ms=21.0,
             e2e_p90_low_ms=19.0, e2e_p90_high_ms=None, server_prompt_tokens=51200, client_prompt_tokens=51200),
        cell(128, 4, status="Error", batch_size=4, error="HTTP 500: engine died"),
    ])  # fmt: skip


def test_the_table_shows_each_cell_with_its_intervals_and_the_server_tokens() -> None:
    table = embeddings_table(embeddings_frame())
    assert table.iloc[0].tolist() == ["128", "1", "4", "Valid", "250.0 ± 12.5", "32K ± 1,600.0", "15 [14, 17]",
                                      "21 [19, unbounded]", "—", "51,200 / 51,200"]  # fmt: skip
    assert table.iloc[1].tolist()[3:6] == ["Error (HTTP 500: engine died)", "—", "—"]


def test_the_report_shows_embeddings_only_where_the_run_has_them() -> None:
    frame = embeddings_frame()
    markdown = report_markdown(frame, {})
    assert "## Embeddings" in markdown and "250.0 ± 12.5" in markdown
    assert "embeddings: 1 input length (128) × 2 concurrency levels (1–4)" in summary_line(frame)
    generating = to_dataframe([Measurement(phase="prefill", context_tokens=64, context="64", concurrency=1,
                                           status="Valid", total_tok_s=1000.0, ttft_ms=64.0)])  # fmt: skip
    assert not has_embeddings(generating) and "Embeddings" not in report_markdown(generating, {})
    assert views.embeddings(generating) is None
    shown = views.embeddings(frame)
    assert shown is not None and "<h2>Embeddings</h2>" in shown.data and "status-error" in shown.data


def test_the_embedded_server_of_an_embeddings_run_is_the_embedding_model() -> None:
    from toolkit.servers.embedded.server import DEMO_CONFIG, EMBEDDING_MODEL_NAME, config_for

    assert config_for(make_params({"endpoint": "embeddings"})) == replace(DEMO_CONFIG, model=EMBEDDING_MODEL_NAME)
    assert config_for(make_params({})) == DEMO_CONFIG
