"""The measurement engine against the real embedded vLLM (issue: measurement engine, must show)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import TEST_API_KEY, start_server
from toolkit.embedded.server import EmbeddedServer, ServerConfig
from toolkit.metrics import PROMPT_TOKENS, REQUEST_SUCCESS, parse_metrics
from toolkit.params import make_params
from toolkit.runner import run_matrix


def _params(server: EmbeddedServer, **values: object):
    base = {"base_url": server.base_url, "duration_s": 4, "max_output": 1024, "readiness_timeout_s": 60}
    return make_params(base | values)


@pytest.fixture(scope="module")
def small_matrix(vllm_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory, api_key_env_module):
    out = tmp_path_factory.mktemp("matrix")
    results = run_matrix(_params(vllm_server, contexts=["512", "1K"], concurrency=[1, 2, 4]), out, progress=False)
    return {(m.phase, m.context_tokens, m.concurrency): m for m in results}


@pytest.fixture(scope="module")
def api_key_env_module():
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_API_KEY", TEST_API_KEY)
    yield "VLLM_API_KEY"
    mp.undo()


def assert_server_agrees(m) -> None:
    """Same interval on both sides (the client's tokens between the two /metrics scrapes), within 2 %; a slow
    scrape widens the interval in which the server read its counter, and that slack is allowed on top."""
    tolerance = 0.02 * m.client_tokens_server_interval + m.server_check_slack_tokens
    assert abs(m.server_output_tokens - m.client_tokens_server_interval) <= tolerance, m


def test_matrix_measures_every_cell(small_matrix) -> None:
    assert sorted(small_matrix) == sorted(
        [("prefill", c, 1) for c in (512, 1024)] + [("decode", c, n) for c in (512, 1024) for n in (1, 2, 4)]
    )
    for m in small_matrix.values():
        assert m.status in ("Valid", "Requests queued"), m
        assert m.prompt_tokens is not None and abs(m.prompt_tokens - m.context_tokens) <= 16


def test_client_tokens_agree_with_server_counter_within_2_percent(small_matrix) -> None:
    valid = [m for m in small_matrix.values() if m.phase == "decode" and m.status == "Valid"]
    assert valid, "no Valid cell to compare"
    for m in valid:
        assert m.output_tokens > 100
        assert_server_agrees(m)


def test_prefill_is_cold_and_decode_hits_the_cache(small_matrix) -> None:
    for ctx in (512, 1024):
        prefill = small_matrix[("prefill", ctx, 1)]
        assert prefill.cached_tokens == 0, prefill
        assert prefill.total_tok_s > 0 and prefill.ttft_ms > 0
        cell = small_matrix[("decode", ctx, 4)]
        # All but the last partial block of each request's prompt comes from the prefix cache.
        assert cell.cached_tokens >= 0.5 * cell.server_prompt_tokens > 0, cell


def test_decode_quantities_are_consistent(small_matrix) -> None:
    for n in (1, 2, 4):
        m = small_matrix[("decode", 1024, n)]
        assert m.total_tok_s == pytest.approx(m.output_tokens / m.measured_s)
        assert 0 < m.measured_s <= 4.0 + 1.0  # the window closes on the client clock; allow scheduling lag
        assert m.tbt_ms == pytest.approx(1000 / m.per_request_tok_s, rel=0.5)
        assert m.ttft_p99_ms >= m.ttft_ms


def test_over_capacity_cells_are_recorded_and_never_sent(constrained_server: EmbeddedServer, tmp_path: Path) -> None:
    # 40 blocks × 128 = 5,120 tokens; a request of 256 + 640 takes 896: 8 of them (7,168) do not fit.
    metrics = lambda: parse_metrics(httpx.get(constrained_server.base_url + "/metrics").text)  # noqa: E731
    before = metrics()
    results = run_matrix(_params(constrained_server, contexts=["256"], concurrency=[8, 16], max_output=640),
                         tmp_path, phases=("decode",), progress=False)  # fmt: skip
    after = metrics()
    assert [(m.concurrency, m.status, m.kv_budget_tokens) for m in results] == [
        (8, "Over capacity", 5120), (16, "Over capacity", 5120)
    ]
    assert after.value(REQUEST_SUCCESS) == before.value(REQUEST_SUCCESS)
    assert after.value(PROMPT_TOKENS) == before.value(PROMPT_TOKENS)


def test_max_num_seqs_2_queues_4_streams(constrained_server: EmbeddedServer, tmp_path: Path) -> None:
    # 640 tokens take longer than the 3 s window, so no stream re-issues inside it.
    results = run_matrix(_params(constrained_server, contexts=["256"], concurrency=[2, 4], max_output=640,
                                 duration_s=3, readiness_timeout_s=10), tmp_path, phases=("decode",),
                         progress=False)  # fmt: skip
    by_n = {m.concurrency: m for m in results}
    assert by_n[4].status == "Requests queued"
    assert by_n[4].max_waiting >= 1
    assert by_n[2].status == "Valid", by_n[2]


@pytest.mark.xfail(
    reason="open: the --stream-interval 4 server sometimes stalls for most of a 4 s window on this 2-core "
    "machine (88 tokens at 154 tok/s seen); not understood yet, so this must-show of issue 3 is not claimed",
    strict=False,
)
def test_stream_interval_4_keeps_time_between_tokens_per_token(
    vllm_server: EmbeddedServer, tmp_path: Path, api_key_env_module: str
) -> None:
    """Compared: one stream (512-token context, 4 s window) on the main server (stream interval 1) and on a
    server equal but for --stream-interval 4. On this CPU machine the interval changes the server's own speed
    (its API server shares a core; measured 120 vs 363 tok/s), so each run's per-request tok/s is checked
    against that run's true per-token rate, total tok/s of its single stream: with time between tokens taken
    per chunk instead of per token, the interval-4 run would come out about 4x too slow."""
    coarse = start_server(ServerConfig(max_model_len=4096, stream_interval=4), api_key=TEST_API_KEY)
    try:
        params = dict(contexts=["512"], concurrency=[1], max_output=2048)
        fine_run = run_matrix(_params(vllm_server, **params), tmp_path / "si1", phases=("decode",), progress=False)
        coarse_run = run_matrix(_params(coarse, **params), tmp_path / "si4", phases=("decode",), progress=False)
    finally:
        coarse.stop()
    fine, multi = fine_run[0], coarse_run[0]
    assert fine.status == multi.status == "Valid"
    assert multi.output_tokens > 100
    assert multi.tokens_per_chunk >= 3.0 and fine.tokens_per_chunk < 1.2  # chunks carry several tokens
    for m in (fine, multi):
        assert m.per_request_tok_s == pytest.approx(m.total_tok_s, rel=0.10), m
        assert m.tbt_ms == pytest.approx(1000 / m.total_tok_s, rel=0.10), m
    assert_server_agrees(multi)


def test_killed_run_resumes_without_redoing_finished_cells(
    vllm_server: EmbeddedServer, tmp_path: Path, api_key_env_module: str
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    args = ["--base-url", vllm_server.base_url, "--contexts", "256", "--concurrency", "1,2,4",
            "--duration", "2", "--max-output", "512", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "matrix", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    results = out / "results.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and len(results.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = results.read_text().splitlines()
    assert 2 <= len(before) < 4, "the kill should land mid-matrix"
    done = subprocess.run([sys.executable, "-m", "toolkit", "matrix", *args, "--resume"],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    after = results.read_text().splitlines()
    assert after[: len(before)] == before  # finished cells untouched
    import json

    keys = [(r["phase"], r["context_tokens"], r["concurrency"]) for r in map(json.loads, after)]
    assert sorted(keys) == sorted([("prefill", 256, 1)] + [("decode", 256, n) for n in (1, 2, 4)])
