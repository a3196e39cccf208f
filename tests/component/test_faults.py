"""Faults a real vLLM cannot be made to show, injected mid-run by tests/faultserver.py.

Every fault leaves its cell recorded as Error with a message saying what happened; the other cells
are kept, the run finishes, and `--resume` redoes exactly the Error cells.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.matrix.runner import run_matrix
from toolkit.params import RunParams, make_params
from toolkit.results.store import RESULTS_FILE, RUN_FILE, load_measurements

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "FAULT_TEST_API_KEY"  # unset unless a test sets it
RAN = ("Valid", "Requests queued")
COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions")
P64, D64x1, D64x2 = ("prefill", 64, 1), ("decode", 64, 1), ("decode", 64, 2)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, fault_server: FaultServer) -> FaultServer:
    monkeypatch.delenv(KEY_ENV, raising=False)
    return fault_server


def params(server: FaultServer, **overrides: Any) -> RunParams:
    # tiny_params' control_window_s 0: no drift control, the faults are armed by request count
    values = tiny_params(base_url=server.base_url, concurrency=[1, 2], api_key_env=KEY_ENV)
    values.update(overrides)
    return make_params(values)


def records(out: Path) -> list[dict[str, Any]]:
    """The results file as written, one dict per line (all lines must be whole)."""
    return [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]


def key(record: dict[str, Any]) -> tuple[str, int, int]:
    return (record["phase"], record["context_tokens"], record["concurrency"])


ERRORS = {
    "500": r"^HTTP 500: .*injected fault",
    "401": r"^HTTP 401: .*Incorrect API key",
    "cut": r"payload is not completed|stream ended before \[DONE\]",
    "malformed": r"^malformed SSE data: b'\{not json'",
    "stall": r"^read timeout: no data for 0\.5 s",
}


def test_a_prefill_redone_by_resume_is_cold_again(server: FaultServer, tmp_path: Path) -> None:
    """The cut prefill reached the server, which cached its prompt; the redo must send a new one."""
    p = params(server, concurrency=[1])
    server.set_fault("cut", after=0, times=1)  # request 1 is the prefill
    run_matrix(p, tmp_path, progress=False)
    assert {key(r): r["status"] for r in records(tmp_path)} == {P64: "Error", D64x1: "Valid"}

    run_matrix(p, tmp_path, resume=True, progress=False)
    redone = records(tmp_path)[-1]
    assert key(redone) == P64 and redone["status"] == "Valid"
    assert redone["cached_tokens"] == 0, redone  # with the first prompt again, all 64 tokens were cached


@pytest.mark.parametrize("kind", list(ERRORS))
def test_fault_mid_cell_is_an_error_cell_and_resume_redoes_only_it(
    kind: str, server: FaultServer, tmp_path: Path
) -> None:
    # A stall must outlast the read timeout inside the cell's window: 1 s, not tiny_params' 0.5 s.
    p = params(server, read_timeout_s=0.5, duration_s=1.0) if kind == "stall" else params(server)
    # Request 1 is the prefill, 2 and 3 are the first two of cell 64 × 1 (one stream, one after the
    # other), so the fault hits that cell mid-way; the cell after it (64 × 2) runs clean.
    server.set_fault(kind, after=3, times=1)
    run_matrix(p, tmp_path, progress=False)

    first = records(tmp_path)
    assert [key(r) for r in first] == [P64, D64x1, D64x2]  # the run went on to the end
    by_key = {key(r): r for r in first}
    failed = by_key[D64x1]
    assert failed["status"] == "Error"
    assert re.search(ERRORS[kind], failed["error"]), failed["error"]
    assert failed["total_tok_s"] is None and failed["ttft_ms"] is None
    assert failed["requests_started"] >= 3  # it failed mid-cell, after good requests
    assert by_key[P64]["status"] == "Valid"
    assert by_key[D64x2]["status"] in RAN and by_key[D64x2]["error"] is None
    assert server.fault is not None and server.fault.hit == 1

    server.clear_fault()
    run_matrix(p, tmp_path, resume=True, progress=False)
    second = records(tmp_path)
    assert second[: len(first)] == first  # finished records are untouched
    assert [key(r) for r in second[len(first) :]] == [D64x1]  # only the Error cell was redone
    redone = second[-1]
    assert redone["status"] in RAN and redone["error"] is None and redone["total_tok_s"] > 0
    assert redone["run_id"] == failed["run_id"]
    latest = {m.key: m for m in load_measurements(tmp_path / RESULTS_FILE)}
    assert all(m.status != "Error" for m in latest.values())


def test_persistent_5xx_fails_every_later_cell_and_resume_redoes_them(server: FaultServer, tmp_path: Path) -> None:
    p = params(server, contexts=[64, 128])
    server.set_fault("500", after=1)  # from the first decode request on, every request fails
    started = time.monotonic()
    run_matrix(p, tmp_path, progress=False)
    assert time.monotonic() - started < 30  # failing cells end at once, they do not wait out timeouts

    first = records(tmp_path)
    plan = [P64, D64x1, D64x2, ("prefill", 128, 1), ("decode", 128, 1), ("decode", 128, 2)]
    assert [key(r) for r in first] == plan
    assert first[0]["status"] == "Valid"
    for r in first[1:]:
        assert r["status"] == "Error", r
        assert "HTTP 500" in r["error"]

    server.clear_fault()
    run_matrix(p, tmp_path, resume=True, progress=False)
    second = records(tmp_path)
    assert second[: len(first)] == first
    assert [key(r) for r in second[len(first) :]] == plan[1:]  # every Error cell, in plan order
    assert all(r["status"] in RAN for r in second[len(first) :])
    # A third resume finds nothing to do and sends no request.
    before = len(server.log)
    run_matrix(p, tmp_path, resume=True, progress=False)
    assert records(tmp_path) == second
    assert not [e for e in server.log[before:] if e["path"] in COMPLETION_PATHS]


@pytest.mark.parametrize("kind", ["404", "drop", "nan", "gateway"])
@pytest.mark.parametrize("after", [0, 2], ids=["from-start", "mid-run"])
def test_metrics_unreachable_run_goes_on_with_client_side_status(
    kind: str, after: int, server: FaultServer, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """/metrics gone, malformed, or someone else's (a gateway in front of vLLM answers with its own): the cells are
    judged client-side, and the readiness gate does not wait out its timeout for a running count that never comes
    (before, a gateway's metrics made every cell "Requests queued" after the timeout)."""
    server.set_metrics_fault(kind, after=after)
    run_matrix(params(server), tmp_path, progress=False)

    by_key = {key(r): r for r in records(tmp_path)}
    assert list(by_key) == [P64, D64x1, D64x2]
    for k in (D64x1, D64x2):
        assert by_key[k]["status"] in RAN and by_key[k]["error"] is None, by_key[k]
        assert by_key[k]["status_basis"] == "client" and not by_key[k]["readiness_queued"], by_key[k]
        assert by_key[k]["avg_active"] is None and by_key[k]["client_avg_active"] is not None
        assert by_key[k]["total_tok_s"] > 0
    run = json.loads((tmp_path / RUN_FILE).read_text())
    assert run["server"]["metrics_available"] is (after > 0)
    said = [line for line in capfd.readouterr().err.splitlines() if "server-side statuses unavailable" in line]
    if after == 0:
        assert by_key[P64]["status_basis"] == "client"
        assert len(said) == 1 and run["server"]["metrics_problem"] in said[0], said  # said once, with the reason
        if kind == "gateway":
            assert "holds none of vLLM's gauges: no vllm:num_requests_running (2 other metric(s), e.g. " \
                   "gateway_requests_total, process_cpu_seconds_total)" in said[0]  # fmt: skip
    else:
        assert said == [] and run["server"]["metrics_problem"] is None


def test_truncated_last_line_warns_and_resume_completes(server: FaultServer, tmp_path: Path) -> None:
    p = params(server, concurrency=[1])
    run_matrix(p, tmp_path, progress=False)
    path = tmp_path / RESULTS_FILE
    whole = path.read_bytes()
    lines = whole.splitlines(keepends=True)
    assert [key(json.loads(x)) for x in lines] == [P64, D64x1]
    # A kill -9 in the middle of writing the last record leaves half a line.
    path.write_bytes(lines[0] + lines[1][: len(lines[1]) // 2])

    with pytest.warns(UserWarning, match=r"results\.jsonl:2: truncated last line ignored"):
        loaded = load_measurements(path)
    assert [m.key for m in loaded] == [P64]

    with pytest.warns(UserWarning, match="truncated last line ignored"):
        run_matrix(p, tmp_path, resume=True, progress=False)
    after = records(tmp_path)  # every line whole again: the partial tail was dropped before the append
    assert [key(r) for r in after] == [P64, D64x1]
    assert after[0] == json.loads(lines[0])  # the finished prefill was not redone
    assert after[1]["status"] in RAN


def _cli(server: FaultServer, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "toolkit", "matrix", "--base-url", server.base_url, "--contexts", "64,128",
            "--concurrency", "1,2", "--duration", "1", "--max-output", "8", "--api-key-env", KEY_ENV,
            "--control-window", "0", "--out", str(out), *extra]  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.process
def test_kill_9_mid_run_then_resume_redoes_no_finished_cell(server: FaultServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    results = out / RESULTS_FILE
    log = (tmp_path / "first.log").open("wb")
    proc = subprocess.Popen(_cli(server, out), cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        # Wait until three cells are finished (prefill, 64 × 1, 64 × 2), then kill it in the next ones; 128 × 2
        # stalls, so the run cannot reach its end first however slow this process is.
        while time.monotonic() < deadline and proc.poll() is None:
            if results.exists() and results.read_bytes().count(b"\n") >= 3:
                break
            time.sleep(0.02)
        server.set_fault("stall", while_busy=True)
        time.sleep(0.3)  # well inside the next cell (prefill 128 and its decode cells)
        assert proc.poll() is None, (tmp_path / "first.log").read_text()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
    assert proc.returncode == -signal.SIGKILL

    raw = results.read_bytes()
    whole = raw[: raw.rfind(b"\n") + 1]  # what was fully written before the kill
    before = [json.loads(x) for x in whole.splitlines()]
    assert 3 <= len(before) < 6
    assert all(r["status"] != "Error" for r in before)

    server.clear_fault()
    done = subprocess.run(_cli(server, out, "--resume"), cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=90)  # fmt: skip
    assert done.returncode == 0, done.stderr
    after = records(out)
    assert after[: len(before)] == before  # finished records kept byte for byte (started_at and all)
    redone = [key(r) for r in after[len(before) :]]
    assert not set(redone) & {key(r) for r in before}  # no finished cell was measured again
    plan = [P64, D64x1, D64x2, ("prefill", 128, 1), ("decode", 128, 1), ("decode", 128, 2)]
    assert sorted(key(r) for r in after) == sorted(plan)  # the matrix is complete, each cell once
    assert all(r["status"] in RAN for r in after)
    assert len({r["run_id"] for r in after}) == 1
    assert (out / "results.csv").exists()


# ---- secrets -------------------------------------------------------------------------------------

SECRET = "sk-test-DISTINCTIVE-12345"


def _files_containing(root: Path, needle: str) -> list[Path]:
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files
    return [p for p in files if needle.encode() in p.read_bytes()]


@pytest.mark.process
def test_api_key_is_in_no_output_file_nor_in_a_401_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    with FaultServer(api_key=SECRET) as srv:
        # The 401 fault answers "Incorrect API key provided: <the key presented>", as some gateways do.
        srv.set_fault("401", after=3, times=1)
        p = params(srv, launch_command=f"VLLM_API_KEY={SECRET} vllm serve m --api-key {SECRET} --port 8000")
        run_matrix(p, tmp_path, progress=False)
        assert srv.fault is not None and srv.fault.hit == 1
        assert all(e["status"] != 401 for e in srv.log if e["path"] != "/v1/chat/completions")  # key was sent
    by_key = {key(r): r for r in records(tmp_path)}
    failed = by_key[D64x1]
    assert failed["status"] == "Error"
    assert failed["error"].startswith("HTTP 401: ") and "Incorrect API key provided: <redacted>" in failed["error"]
    assert by_key[D64x2]["status"] in RAN  # the run went on with the key
    run = json.loads((tmp_path / RUN_FILE).read_text())
    assert run["launch_command"] == "VLLM_API_KEY=<redacted> vllm serve m --api-key <redacted> --port 8000"
    assert _files_containing(tmp_path, SECRET) == []


@pytest.mark.process
def test_api_key_stays_out_of_the_cli_outputs(server: FaultServer, tmp_path: Path) -> None:
    with FaultServer(api_key=SECRET) as srv:
        srv.set_fault("401", after=2, times=1)
        env = _env() | {KEY_ENV: SECRET}
        out = tmp_path / "out"
        cmd = [*_cli(srv, out)[:-2], "--contexts", "64", "--concurrency", "1", "--out", str(out)]
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert "Error" in done.stdout  # the 401 cell is shown as an error
    assert {p.name for p in out.iterdir()} >= {"results.jsonl", "results.csv", "run.json"}
    assert _files_containing(out, SECRET) == []
