"""The real vLLM behind a small reverse proxy that answers `/metrics` with its own metrics, as a gateway does
(issue 28): the matrix takes about the time it takes without the proxy, its statuses come from the client side,
and the report says that server-side figures were not available. The rerunnable measurement with longer windows:
benchmarks/gateway_proxy.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.gateway_proxy import gateway
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.reports.tables import CLIENT_BASIS_NOTE, report_markdown
from toolkit.results import runs
from toolkit.servers.embedded.server import EmbeddedServer

pytestmark = pytest.mark.timeout(600)


def measure(base_url: str, out: Path) -> tuple[float, list[tuple[str, int, str, str | None]]]:
    params = make_params({"base_url": base_url, "contexts": ["256"], "concurrency": [1, 2], "duration_s": 1.5,
                          "max_output": 256, "readiness_timeout_s": 60, "control_window_s": 0})  # fmt: skip
    started = time.monotonic()
    cells = run_matrix(params, out, progress=False)
    return time.monotonic() - started, [(m.phase, m.concurrency, m.status, m.status_basis) for m in cells]


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
