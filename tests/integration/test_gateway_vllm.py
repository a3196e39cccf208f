"""The real vLLM behind a small reverse proxy that answers `/metrics` with its own metrics, as a gateway does
(issue 28): the matrix takes about the time it takes without the proxy, its statuses come from the client side,
and the report says that server-side figures were not available; with `server_metrics` naming the vLLM behind it
(issue 45), its statuses and counters come from the server again; with two vLLMs behind it, round-robin, and
`server_metrics` naming both, their counters summed. The rerunnable measurement with longer windows:
benchmarks/gateway_proxy.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.gateway_proxy import gateway
from tests.server_tokens import assert_server_agrees
from toolkit.base.schema import Measurement
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.rates.files import read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.reports.rate_tables import endpoint_share_line
from toolkit.reports.tables import CLIENT_BASIS_NOTE, report_markdown
from toolkit.results import runs
from toolkit.servers.embedded.server import EmbeddedServer

pytestmark = pytest.mark.timeout(600)


def measure_cells(base_url: str, out: Path, **extra: Any) -> tuple[float, list[Measurement]]:
    params = make_params({"base_url": base_url, "contexts": ["256"], "concurrency": [1, 2], "duration_s": 1.5,
                          "max_output": 256, "readiness_timeout_s": 60, "control_window_s": 0, **extra})  # fmt: skip
    started = time.monotonic()
    cells = run_matrix(params, out, progress=False)
    return time.monotonic() - started, cells


def measure(base_url: str, out: Path, **extra: Any) -> tuple[float, list[tuple[str, int, str, str | None]]]:
    took, cells = measure_cells(base_url, out, **extra)
    return took, [(m.phase, m.concurrency, m.status, m.status_basis) for m in cells]


def test_a_vllm_behind_a_gateway_is_measured_client_side_in_about_the_same_time(
    vllm_server: EmbeddedServer, api_key_env: str, tmp_path: Path
) -> None:
    direct_s, direct = measure(vllm_server.base_url, tmp_path / "direct")
    with gateway(vllm_server.base_url) as proxied_url:
        proxy_s, proxied = measure(proxied_url, tmp_path / "proxy")
    assert [c[:3] for c in direct] == [c[:3] for c in proxied] == [
        ("prefill", 1, "Valid"), ("decode", 1, "Valid"), ("decode", 2, "Valid")
    ]  # fmt: skip
    assert {c[3] for c in proxied if c[0] == "decode"} == {"client"}
    assert {c[3] for c in direct if c[0] == "decode"} == {"server"}
    # Before the fix each cell behind the proxy waited out its readiness timeout (60 s here).
    assert proxy_s < 2 * direct_s + 10, (direct_s, proxy_s)
    frame, info = runs.load_run(tmp_path / "proxy")
    report = report_markdown(frame, info)
    assert CLIENT_BASIS_NOTE in report and "gateway_requests_total" in report
    direct_frame, direct_info = runs.load_run(tmp_path / "direct")
    assert CLIENT_BASIS_NOTE not in report_markdown(direct_frame, direct_info)


def test_a_vllm_behind_a_gateway_named_in_server_metrics_is_judged_server_side_again(
    vllm_server: EmbeddedServer, api_key_env: str, tmp_path: Path
) -> None:
    with gateway(vllm_server.base_url) as proxied_url:
        _took, cells = measure_cells(proxied_url, tmp_path / "named", server_metrics=[vllm_server.base_url])
    assert [(m.phase, m.concurrency, m.status) for m in cells] == [
        ("prefill", 1, "Valid"), ("decode", 1, "Valid"), ("decode", 2, "Valid")
    ]  # fmt: skip
    decode = [m for m in cells if m.phase == "decode"]
    assert {m.status_basis for m in decode} == {"server"}
    for m in decode:  # the counter read from the replica's /metrics lies in the client's bracket
        assert m.metrics_problem is None and m.client_tokens_min > 0, m
        assert_server_agrees(m)
    timed = [m for m in decode if m.timed_requests]
    assert timed and {m.breakdown_basis for m in timed} == {"per-request"}  # vLLM's timing passes the proxy
    frame, info = runs.load_run(tmp_path / "named")
    report = report_markdown(frame, info)
    assert CLIENT_BASIS_NOTE not in report
    assert f"Server-side figures from 1 endpoint: {vllm_server.base_url}/metrics" in report
    assert info["server"]["metrics_endpoints"] == [f"{vllm_server.base_url}/metrics"]


def test_two_vllms_behind_a_round_robin_gateway_are_summed_from_both_replicas_metrics(
    vllm_server: EmbeddedServer, constrained_server: EmbeddedServer, api_key_env: str, tmp_path: Path
) -> None:
    """Issue 45's must-show: the two session servers (same model, same served name) behind the round-robin proxy,
    `server_metrics` naming both. Every request goes whole to one of them, so N=2 is one stream on each (or both
    on one, which fits the constrained server's 2 running too): the summed running count reaches N either way."""
    replicas = [vllm_server.base_url, constrained_server.base_url]
    with gateway(replicas) as proxied_url:
        _took, cells = measure_cells(proxied_url, tmp_path / "pair", server_metrics=replicas, duration_s=2)
        sweep = make_rate_params({
            "base_url": proxied_url, "server_metrics": replicas, "endpoint": "completions", "rates": [4.0],
            "arrival": "constant", "requests_per_step": 12, "input_tokens": 128, "output_tokens": 32,
            "results_dir": str(tmp_path / "rates"),
        })  # fmt: skip
        lines: list[str] = []
        (row,) = read_steps(run_rates(sweep, say=lines.append))
    assert [(m.phase, m.concurrency, m.status) for m in cells] == [
        ("prefill", 1, "Valid"), ("decode", 1, "Valid"), ("decode", 2, "Valid")
    ]  # fmt: skip
    decode = [m for m in cells if m.phase == "decode"]
    assert {m.status_basis for m in decode} == {"server"}  # from the two replicas' running counts, summed
    for m in decode:  # the two counters summed lie in the client's bracket
        print(f"decode N={m.concurrency}: server {m.server_output_tokens} tokens, client "
              f"{m.client_tokens_min}..{m.client_tokens_max}")  # fmt: skip
        assert m.metrics_problem is None and m.client_tokens_min > 0, m
        assert_server_agrees(m)
    _frame, info = runs.load_run(tmp_path / "pair")
    assert info["server"]["metrics_endpoints"] == [f"{url}/metrics" for url in replicas]
    # The sweep: each request to the next replica in turn, each replica's counter grew by its share.
    print("\n".join(lines))
    shares = row["endpoint_generation_tokens"]
    line = endpoint_share_line(pd.DataFrame([row]))
    print(f"generated tokens by replica {shares}, server {row['server_generation_tokens']}, client "
          f"{row['client_generation_tokens']}; {line}")  # fmt: skip
    assert row["completed"] == row["requests"] == 12 and row["failed"] == 0, row
    assert len(shares) == 2 and all(s is not None and s > 0 for s in shares), row
    assert sum(shares) == row["server_generation_tokens"], row
    assert row["server_generation_tokens"] == pytest.approx(row["client_generation_tokens"], rel=0.02), row
    assert line is not None and "#0" in line and "#1" in line
    assert row["breakdown_basis"] == "per-request", row  # vLLM's per-request timing passes the proxy from both
