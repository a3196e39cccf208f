"""The measurement engine against the real embedded vLLM (issue: measurement engine, must show)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.conftest import TEST_API_KEY
from tests.server_tokens import assert_server_agrees
from toolkit.matrix.prometheus import PROMPT_TOKENS, REQUEST_SUCCESS, parse_metrics
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.servers.autogroups import protected_from_autogroups
from toolkit.servers.embedded.server import EmbeddedServer


def _params(server: EmbeddedServer, **values: object):
    """A matrix on the real vLLM; the drift control cell at its start and end has a 1 s window (the default 5 s only
    lengthens the run: the control's arithmetic is the unit tests', its path on a real server is taken the same)."""
    base = {"base_url": server.base_url, "duration_s": 4, "max_output": 1024, "readiness_timeout_s": 60,
            "control_window_s": 1}  # fmt: skip
    return make_params(base | values)


@pytest.fixture(scope="module")
def small_matrix(vllm_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory, api_key_env_module):
    out = tmp_path_factory.mktemp("matrix")
    # Requests of 256 tokens end 1-2 s after they start, so every 4 s window sees several end (the server's
    # per-request timing needs requests that ended inside the window; at 1,024 tokens some windows saw none).
    params = _params(vllm_server, contexts=["512", "1K"], concurrency=[1, 2, 4], max_output=256)
    results = run_matrix(params, out, progress=False)
    return {(m.phase, m.context_tokens, m.concurrency): m for m in results}


@pytest.fixture(scope="module")
def api_key_env_module():
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_API_KEY", TEST_API_KEY)
    yield "VLLM_API_KEY"
    mp.undo()


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
    for m in valid:  # the bracket holds whether or not a pause of the machine hit the window
        assert m.client_tokens_max > 100, m
        assert_server_agrees(m)
    for m in valid:  # a cell is flagged exactly when its window held a long silence or a blocked loop
        assert m.attempts >= 1
        assert bool(m.disturbed) == (m.longest_silence_s > 1.0 or m.loop_lag_max_ms > 250.0
                                     or (m.max_sample_gap_s or 0) > 1.5), m  # fmt: skip


def test_one_session_leaves_every_window_undisturbed(small_matrix) -> None:
    """Server and client share this session (one scheduler autogroup): no pause of seconds stops either, so
    every cell ends undisturbed. A disturbed cell here means the layout broke or the machine itself paused."""
    disturbed = {k: (m.disturbed, m.attempts) for k, m in small_matrix.items() if m.disturbed}
    assert disturbed == {}


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
        assert m.ttft_p99_ms is None  # n requests: a p99 needs 100
        assert m.tbt_p90_ms is not None and m.tbt_p99_ms is not None and m.tbt_p90_ms <= m.tbt_p99_ms  # over gaps
        assert m.tbt_p99_low_ms is not None and m.tbt_p99_low_ms <= m.tbt_p99_ms, m  # 95 % bounds of the gaps' p99
        assert m.tbt_p99_high_ms is None or m.tbt_p99_ms <= m.tbt_p99_high_ms, m
        assert m.tbt_ms == pytest.approx(1000 / m.per_request_tok_s, rel=0.2)


def test_the_servers_own_clock_times_every_decode_cell(small_matrix) -> None:
    """Issue 45: the requests that ended in each window carried the server's timing; their mean time between tokens
    on the server's clock is the client's within 2 % in every undisturbed cell (the same requests on two clocks;
    the window's TBT covers other stretches, 11 % apart once on this busy machine), and no request's span exceeds
    the client's. Requests of 256 tokens take 1-2 s here, so a window sees several end; under a pause one may see
    none, and such a cell has no split."""
    cells = [m for m in small_matrix.values() if m.phase == "decode" and m.status == "Valid" and not m.disturbed]
    timed = [m for m in cells if m.timed_requests]
    assert len(timed) >= len(cells) / 2 > 0, cells
    for m in timed:
        print(
            f"{m.context_tokens}×{m.concurrency}: window TBT {m.tbt_ms:.3f} ms; the requests' ITL, client "
            f"{m.client_itl_p50_ms:.3f} ms, server {m.server_itl_p50_ms:.3f} ms over {m.timed_requests} requests; "
            f"queue {m.queue_p50_ms:.2f}, prefill {m.server_ttft_p50_ms:.2f}, wire {m.wire_ttft_p50_ms:.2f} ms"
        )
        assert m.breakdown_basis == "per-request" and m.timing_mismatches == 0, m
        assert m.server_itl_p50_ms == pytest.approx(m.client_itl_p50_ms, rel=0.02), m
        assert m.wire_ttft_p50_ms >= 0 and m.decode_mean_ms > 0
    for m in set(cells) - set(timed):  # none ended in the window: no median, at most the histograms' means
        assert m.breakdown_basis in ("", "histograms") and m.queue_p50_ms is None, m
        assert (m.breakdown_basis == "histograms") == (m.queue_mean_ms is not None), m


def test_over_capacity_cells_are_recorded_and_never_sent(constrained_server: EmbeddedServer, tmp_path: Path) -> None:
    # 104 blocks × 128 = 13,312 tokens; a request of 2,048 + 640 takes 2,688: 8 of them (21,504) do not fit.
    metrics = lambda: parse_metrics(httpx.get(constrained_server.base_url + "/metrics").text)  # noqa: E731
    before = metrics()
    results = run_matrix(_params(constrained_server, contexts=["2K"], concurrency=[8, 16], max_output=640),
                         tmp_path, phases=("decode",), progress=False)  # fmt: skip
    after = metrics()
    assert [(m.concurrency, m.status, m.kv_budget_tokens) for m in results] == [
        (8, "Over capacity", 13312),
        (16, "Over capacity", 13312),
    ]
    assert after.value(REQUEST_SUCCESS) == before.value(REQUEST_SUCCESS)
    assert after.value(PROMPT_TOKENS) == before.value(PROMPT_TOKENS)


def test_max_num_seqs_2_queues_4_streams(constrained_server: EmbeddedServer, tmp_path: Path) -> None:
    """At most 2 requests run: 1 and 2 streams are Valid (a running count a little under N with nothing waiting
    is not a queue), 4 streams are Requests queued on the server's own waiting count, and the readiness gate
    ends on the plateau (3 s) instead of its 120 s timeout, so a 4-stream cell takes under 3 windows + 15 s."""
    window_s = 4
    results = run_matrix(_params(constrained_server, contexts=["1K"], concurrency=[1, 2, 4],
                                 duration_s=window_s, readiness_timeout_s=120), tmp_path, progress=False)  # fmt: skip
    cells = {(m.context_tokens, m.concurrency): m for m in results if m.phase == "decode"}
    # One context: a second one (2K, until this session) showed the same at twice the time.
    for n in (1, 2):
        assert cells[(1024, n)].status == "Valid" and cells[(1024, n)].max_waiting == 0, cells[(1024, n)]
    four = cells[(1024, 4)]
    assert four.status == "Requests queued" and four.readiness_queued, four
    assert four.status_basis == "server" and four.max_waiting == 2, four
    assert four.cell_wall_s <= 3 * window_s + 15, four
    assert not [m for m in cells.values() if m.disturbed], cells  # one session: no pause disturbs a window


def test_decode_cells_keep_to_a_json_schema_and_call_tools_on_the_real_engine(
    constrained_server: EmbeddedServer, tmp_path: Path
) -> None:
    """Issue 46 in the decode matrix on the real engine: every request of a 2-stream cell carries the schema (or the
    tools), vLLM takes them (no 400), and the cell's share is that of replies that kept to them. Random weights could
    not close a boolean object or call a tool on their own, so 100 % shows the server applied each request's format
    (the embedded server decodes compact JSON and parses tool calls: STRUCTURED_FLAGS)."""
    schema = tmp_path / "answer.json"
    schema.write_text('{"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}')
    tools = tmp_path / "tools.json"
    weather = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": weather}}]))
    shares = {}
    for name, extra in (("schema", {"response_format": f"json_schema:{schema}"}),
                        ("tools", {"tools": str(tools), "tool_choice": "required"})):  # fmt: skip
        params = _params(constrained_server, contexts=["256"], concurrency=[2], duration_s=2, max_output=48,
                         control_window_s=0, **extra)  # fmt: skip
        (cell,) = run_matrix(params, tmp_path / name, phases=("decode",), progress=False)
        assert cell.status == "Valid" and cell.completed, cell
        shares[name] = (cell.schema_valid_share, cell.tool_called_share, cell.tool_args_valid_share)
    assert shares == {"schema": (1.0, None, None), "tools": (None, 1.0, 1.0)}


def _one_stream_against_the_engine(base_url: str, max_tokens: int = 600):
    """One streamed request on an idle server, and the engine's inter-token latencies over exactly its steps
    (/metrics read before it starts and after it ends, when nothing else runs)."""
    import math

    from toolkit.loadgen.client import StreamClient, build_request
    from toolkit.matrix.prometheus import ITL_COUNT, ITL_SUM, mean_delta
    from toolkit.matrix.runner import run_sync
    from toolkit.matrix.server_api import ServerAPI
    from toolkit.method.window import summarize_window

    async def measure():
        async with ServerAPI(base_url, api_key=TEST_API_KEY) as api, \
                StreamClient(base_url, api_key=TEST_API_KEY) as client:  # fmt: skip
            before = await api.metrics()
            result = await client.stream(*build_request("chat", "tiny-llama", "stream interval " * 100, max_tokens))
            after = await api.metrics()
        return result, mean_delta(before, after, ITL_SUM, ITL_COUNT)

    result, engine_tbt_s = run_sync(measure)
    assert result.error is None and result.completion_tokens == max_tokens, result
    return summarize_window([result], -math.inf, math.inf), engine_tbt_s * 1000


def test_stream_interval_4_keeps_time_between_tokens_per_token(
    vllm_server: EmbeddedServer, server_in_own_session: str
) -> None:
    """Compared: one 600-token stream on the main server (stream interval 1) and one on a server equal but for
    --stream-interval 4. The interval-4 chunks carry about 4 tokens. On each, the toolkit's per-token time
    between tokens must match the engine's own inter-token latency over the same request's steps
    (vllm:inter_token_latency_seconds, stamped per engine step, blind to chunking) within 10 %; taken per
    chunk it would come out 4x too long. Then the two servers' per-request tok/s, as the toolkit measures
    them, stand in the same ratio as the engine's rates, within 10 %. Why not plain "within 10 % of each
    other": on this shared 2-core machine one server's own rate moves by more than that between windows
    (69 to 125 tok/s seen), and a pause of the machine hits client and engine clocks alike."""
    # The interval-4 server is conftest's `toolkit serve` in a session of its own (one launch for two tests): this
    # process raises its autogroup's weight while it measures, as a kernel does, or that session starves it.
    with protected_from_autogroups(server_in_own_session, print):
        multi, multi_engine_ms = _one_stream_against_the_engine(server_in_own_session)
    fine, fine_engine_ms = _one_stream_against_the_engine(vllm_server.base_url)
    print(
        f"\ninterval 1: client {fine.tbt_ms:.2f} ms vs engine {fine_engine_ms:.2f} ms, "
        f"{fine.tokens_per_chunk:.2f} tokens/chunk; interval 4: client {multi.tbt_ms:.2f} ms vs engine "
        f"{multi_engine_ms:.2f} ms, {multi.tokens_per_chunk:.2f} tokens/chunk"
    )
    assert multi.tokens_per_chunk >= 3.5 and fine.tokens_per_chunk < 1.2  # chunks carry several tokens
    assert multi.tbt_ms == pytest.approx(multi_engine_ms, rel=0.10)
    assert fine.tbt_ms == pytest.approx(fine_engine_ms, rel=0.10)
    engine_ratio = fine_engine_ms / multi_engine_ms
    assert multi.per_request_tok_s / fine.per_request_tok_s == pytest.approx(engine_ratio, rel=0.10)


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
            "--duration", "2", "--max-output", "512", "--control-window", "1", "--out", str(out)]  # fmt: skip
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
    keys = [(r["phase"], r["context_tokens"], r["concurrency"]) for r in map(json.loads, after)]
    assert sorted(keys) == sorted([("prefill", 256, 1)] + [("decode", 256, n) for n in (1, 2, 4)])


def test_a_paused_server_disturbs_the_window_and_the_cell_is_measured_again(
    vllm_server: EmbeddedServer, tmp_path: Path, api_key_env_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real vLLM's API server, frozen with SIGSTOP for 2.5 s inside the first window (as this machine
    sometimes freezes by itself): that window is flagged and the runner measures the cell again. Only the API
    server: with its engine core frozen too, vLLM on CPU gave almost no token for 9-16 s after SIGCONT in two of
    four make test runs here. Requests of 256 tokens: after the pause, vLLM 0.32 sometimes streamed each later
    request's first ~200 tokens and held the rest until the request ended (3,776-token requests: 8-9 s silent,
    every window for a minute, in 3 of 7 rounds alone and in make test runs; 256-token requests: 6 of 6 rounds
    measured again once), so the cell may still take up to eight retries: what the test holds is that a disturbed
    window is measured again until one is not."""
    import os
    import re
    import signal
    import threading
    import time

    # No drift control here: the test pauses the server once the first stream runs, which must be the cell's.
    params = _params(vllm_server, contexts=["256"], concurrency=[1], duration_s=6, max_output=256,
                     disturbed_retries=8, control_window_s=0)  # fmt: skip
    box: dict[str, object] = {}
    runner = threading.Thread(target=lambda: box.update(result=run_matrix(params, tmp_path, phases=("decode",),
                                                                          progress=False)))  # fmt: skip
    runner.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the stream is running: the window opens right after
        text = httpx.get(vllm_server.base_url + "/metrics", timeout=10).text
        if parse_metrics(text).value(("vllm:num_requests_running",)):
            break
        time.sleep(0.1)
    time.sleep(1.5)
    os.kill(vllm_server.process.pid, signal.SIGSTOP)
    time.sleep(2.5)
    os.kill(vllm_server.process.pid, signal.SIGCONT)
    runner.join(timeout=300)
    (m,) = box["result"]
    assert m.status == "Valid" and 2 <= m.attempts <= 9, m
    pauses = [float(s) for s in re.findall(r"window disturbed \(no token for ([\d.]+) s\)", capsys.readouterr().err)]
    assert pauses and max(pauses) >= 2.3, pauses
