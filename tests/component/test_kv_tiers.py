"""KV tiers (issue 45) against the fault server standing for vLLM with a KV connector's external tier (the embedded
vLLM has none): a rate step records the tier's hit rate and the prompt tokens by source, the views show it, and
a prefill the tier served is not counted cold."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.rates.files import read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.reports.rate_tables import HITS_COLUMN, steps_table
from toolkit.reports.workload_views import EXTERNAL_COLUMN, cache_shown
from toolkit.results.rate_runs import load_rate_sweep
from toolkit.results.store import RESULTS_FILE

pytestmark = pytest.mark.timeout(120)
FOUND = 10  # prompt tokens each request finds in the external tier


@pytest.fixture
def server(make_fault_server: Callable[..., FaultServer]) -> FaultServer:
    return make_fault_server(token_interval_s=0.005, external_tier=True)


def test_a_step_records_the_external_tiers_hit_rate_and_the_views_show_it(server: FaultServer, tmp_path: Path) -> None:
    server.external_hit_tokens = FOUND
    values = {"base_url": server.base_url, "requests_per_step": 12, "input_tokens": 90, "output_tokens": 8,
              "results_dir": str(tmp_path / "run"), "rates": [20], "workload": "shared-prefix", "prefixes": 3,
              "prefix_tokens": 60, "endpoint": "completions"}  # fmt: skip
    out = run_rates(make_rate_params(values), say=lambda line: None)
    (row,) = read_steps(out)  # validated
    queried = row["server_prompt_tokens"]  # every prompt is new to the GPU cache: all of it was queried outside
    assert row["prefix_cache_hit_rate"] == 0.0
    assert row["external_prefix_cache_hit_rate"] == pytest.approx(12 * FOUND / queried)
    assert row["prompt_tokens_by_source"] == {"external_kv_transfer": 12 * FOUND, "local_cache_hit": 0,
                                              "local_compute": queried - 12 * FOUND}  # fmt: skip
    assert row["client_cached_tokens"] == 12 * FOUND  # the replies' usage counts both tiers, as vLLM's does
    sweep = load_rate_sweep(out)
    assert steps_table(sweep.steps)[HITS_COLUMN].iloc[0].endswith(f", external {100 * 12 * FOUND / queried:.1f}%")
    assert EXTERNAL_COLUMN in cache_shown(sweep.steps, sweep.records, sweep.controls)


def test_without_a_connectors_queries_the_step_has_no_external_hit_rate(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=0.005) as plain:
        values = {"base_url": plain.base_url, "requests_per_step": 4, "input_tokens": 40, "output_tokens": 4,
                  "results_dir": str(tmp_path / "run"), "rates": [20]}  # fmt: skip
        (row,) = read_steps(run_rates(make_rate_params(values), say=lambda line: None))
    assert row["external_prefix_cache_hit_rate"] is None and row["prompt_tokens_by_source"] is None


def _prefill(server: FaultServer, out: Path) -> dict[str, Any]:
    params = make_params(tiny_params(base_url=server.base_url, read_timeout_s=None))
    run_matrix(params, out, progress=False)
    records = [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]
    return next(r for r in records if r["phase"] == "prefill")


def test_the_cold_prefill_check_counts_the_external_tiers_hits(server: FaultServer, tmp_path: Path) -> None:
    cold = _prefill(server, tmp_path / "cold")
    assert cold["status"] == "Valid" and cold["cached_tokens"] == 0 and cold["status_basis"] == "server"
    server.external_hit_tokens = FOUND  # a fresh prompt, but the tier (shared, offloaded) holds its head
    warm = _prefill(server, tmp_path / "warm")
    assert warm["cached_tokens"] == FOUND and warm["status_basis"] == "server", warm
