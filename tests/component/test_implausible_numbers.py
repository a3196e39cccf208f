"""Numbers a server can corrupt (issue 40): a usage's prompt or cached tokens no prompt sent can hold, a generation
counter that goes back or jumps between scrapes, a KV cache size or block label <= 0. Each costs only the request
or cell it reached, which says why in one line; nothing overflows and no such number is used."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.faultserver import COUNTER_STEP, FaultServer
from tests.tiny_params import tiny_params
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.rates.files import read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.results.store import RESULTS_FILE

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]
ABSURD = 2**40  # no count in these runs comes near it


def matrix(server: FaultServer, out: Path, **values: Any) -> list[dict[str, Any]]:
    params = make_params(tiny_params(base_url=server.base_url, **values))
    run_matrix(params, out, progress=False)
    return [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]


def numbers(record: dict[str, Any]) -> list[float]:
    """The record's finite numbers (an offered rate of inf is a rate, not a count)."""
    return [v for v in record.values() if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]


def test_a_prompt_count_no_prompt_can_hold_makes_the_prefill_an_error(tmp_path: Path) -> None:
    with FaultServer() as server:
        server.set_fault("huge-prompt-usage", times=1)  # the prefill's request only
        prefill, decode = matrix(server, tmp_path)
    assert prefill["status"] == "Error" and prefill["total_tok_s"] is None, prefill
    assert f"usage.prompt_tokens is {2**62}, more than the " in prefill["error"], prefill
    assert "\n" not in prefill["error"]
    assert decode["status"] == "Valid" and decode["prompt_tokens"] == 64
    assert all(abs(v) < ABSURD for v in numbers(prefill) + numbers(decode))


@pytest.mark.parametrize(("kind", "field", "value"), [("huge-prompt-usage", "prompt_tokens", 2**62),
                                                      ("huge-cached-usage", "cached_tokens", 2**63 - 1)])  # fmt: skip
def test_a_step_whose_replies_report_impossible_prompt_counts_fails_them_without_overflow(
    tmp_path: Path, kind: str, field: str, value: int
) -> None:
    with FaultServer(token_interval_s=0.002) as server:
        server.set_fault(kind, after=1)  # the first request is served well, the three others are not
        out = run_rates(make_rate_params({"base_url": server.base_url, "requests_per_step": 4, "rates": ["inf"],
                                          "input_tokens": 40, "output_tokens": 4, "max_in_flight": 1,
                                          "results_dir": str(tmp_path / "run")}), say=lambda line: None)  # fmt: skip
    records = read_records(out).sort_values("request")
    errors = list(records["error"])
    assert pd.isna(errors[0]) and all(f"usage.{field_path(field)} is {value}, more than " in e for e in errors[1:])
    (row,) = read_steps(out)
    assert row["failed"] == 3 and row["completed"] == 1
    assert row["client_prompt_tokens"] == records["input_tokens"].iloc[0] == 40
    assert (records["input_tokens"] == 40).all() and (records["cached_tokens"].fillna(0) < ABSURD).all()
    assert all(abs(v) < ABSURD for v in numbers(row))


def field_path(field: str) -> str:
    return "prompt_tokens_details.cached_tokens" if field == "cached_tokens" else field


@pytest.mark.parametrize("kind", ["counter-back", "counter-jump"])
def test_a_generation_counter_that_goes_back_or_jumps_is_refused_and_the_cell_judged_client_side(
    kind: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with FaultServer() as server:
        server.set_metrics_fault(kind)
        prefill, decode = matrix(server, tmp_path)
    assert prefill["status"] == "Valid"
    assert decode["status"] == "Valid" and decode["status_basis"] == "client", decode
    assert decode["server_output_tokens"] is None and decode["output_tokens"] > 0
    moved = "went back" if kind == "counter-back" else "grew by"
    assert decode["metrics_problem"].startswith(f"vllm:generation_tokens_total {moved} "), decode
    assert "\n" not in decode["metrics_problem"]
    said = [line for line in capfd.readouterr().err.splitlines() if "judged client-side" in line]
    assert said == [f"decode 64 ×1: {decode['metrics_problem']}: judged client-side"], said
    assert COUNTER_STEP > 10_000  # the bound below a stream's ceiling x window, for this test's one stream


def test_a_step_keeps_no_counter_that_went_back(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=0.002) as server:
        server.set_metrics_fault("counter-back")
        out = run_rates(make_rate_params({"base_url": server.base_url, "requests_per_step": 4, "rates": [20],
                                          "input_tokens": 40, "output_tokens": 4,
                                          "results_dir": str(tmp_path / "run")}), say=lambda line: None)  # fmt: skip
    (row,) = read_steps(out)
    assert row["server_generation_tokens"] is None and row["client_generation_tokens"] == 16
    assert row["server_prompt_tokens"] == row["client_prompt_tokens"]  # the counters that held are kept


@pytest.mark.parametrize("size", [-5, 0])
def test_a_kv_cache_size_of_zero_or_less_is_refused_never_used(
    size: int, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with FaultServer(kv_cache_size_tokens=size) as server:
        _prefill, decode = matrix(server, tmp_path)
    assert decode["status"] == "Valid" and decode["kv_budget_tokens"] is None, decode
    said = [line for line in capfd.readouterr().err.splitlines() if "vllm:cache_config_info" in line]
    assert said == [
        f"vllm:cache_config_info: kv_cache_size_tokens {str(size)!r} is not a whole number >= 1, "
        f"num_gpu_blocks {str(size // 16)!r} is not a whole number >= 1: treated as unknown"
    ], said
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["server"]["kv_budget_tokens"] is None and info["server"]["kv_budget_source"] == "unknown"
