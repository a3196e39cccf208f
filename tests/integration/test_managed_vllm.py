"""The real vLLM (CPU, tiny model) launched from a params file's `server:` block by `python -m toolkit run`.

The block is params/managed-embedded.yaml's, on a free port and with a small matrix. Run under the machine's
vLLM lock (`flock /tmp/vllm.lock`): the test starts its own vLLM, twice.
"""

from __future__ import annotations

import html
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import TEST_API_KEY
from tests.processes import assert_group_gone
from toolkit.matrix.prometheus import RUNNING, parse_metrics
from toolkit.results.local_paths import REPO_ROOT, public_paths
from toolkit.results.store import RESULTS_FILE, RUN_FILE
from toolkit.servers.embedded.server import VLLM_PYTHON, ensure_model, free_port
from toolkit.servers.gpu import NO_TELEMETRY
from toolkit.servers.launch import LAUNCH_FILE

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "params" / "managed-embedded.yaml"
RAN = ("Valid", "Requests queued")

pytestmark = pytest.mark.timeout(900)


def managed_params(tmp_path: Path, **overrides: Any) -> tuple[Path, list[str], str]:
    """The example file on a free port (and this checkout's vLLM and model); its path, command and base URL."""
    values = yaml.safe_load(EXAMPLE.read_text())
    port = free_port()
    command = (values["server"]["command"].replace(".venv-vllm/bin/python", str(VLLM_PYTHON))
               .replace(".cache/tiny-llama", str(ensure_model())).replace("--port 8011", f"--port {port}"))  # fmt: skip
    values["server"]["command"] = command
    values.update({"base_url": f"http://127.0.0.1:{port}", "contexts": ["256"], "concurrency": [1, 2],
                   "duration_s": 2, "max_output": 256, **overrides})  # fmt: skip
    path = tmp_path / "managed.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path, shlex.split(command), values["base_url"]


def env() -> dict[str, str]:
    return {"VLLM_API_KEY": TEST_API_KEY, "PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"),
            "MPLBACKEND": "Agg", "NO_PROXY": "127.0.0.1,localhost"}  # fmt: skip


def toolkit_run(params: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "toolkit", "run", str(params), "--out", str(out), *extra]


def results(out: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    rows = [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]
    return {(r["phase"], r["context_tokens"], r["concurrency"]): r for r in rows}


def assert_launched_run_end_to_end(out: Path, command: list[str], done: subprocess.CompletedProcess[str]) -> None:
    """A finished `toolkit run` of a launched vLLM: the server stopped with its group, the exact command in the
    reports, no key anywhere, the machine and the engine (read from the server's own Python) in run.json and
    report.md, NVML's absence said once, and every cell measured."""
    launched = json.loads((out / LAUNCH_FILE).read_text())
    # Started and stopped by the toolkit, engine processes included.
    assert_group_gone(launched["pid"], timeout_s=10, what="vLLM")
    assert launched["stopped_at"] and launched["exit_code"] is None
    shown = ("VLLM_API_KEY=<redacted> VLLM_CPU_KVCACHE_SPACE=1 VLLM_HOST_IP=127.0.0.1 VLLM_TARGET_DEVICE=cpu "
             "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 "
             "TOKENIZERS_PARALLELISM=false " + public_paths(shlex.join(command)))  # fmt: skip
    assert launched["command"] == shown
    page = (out / "report.html").read_text()
    assert html.escape(shown, quote=False) in page  # the exact command that ran, paths relative to the checkout
    assert f"{REPO_ROOT}/" not in page
    report = (out / "report.md").read_text()
    assert f"```\n{shown}\n```" in report

    leaks = [p for p in out.rglob("*") if p.is_file() and TEST_API_KEY.encode() in p.read_bytes()]
    assert leaks == [] and TEST_API_KEY not in done.stdout + done.stderr  # server.log included

    run = json.loads((out / RUN_FILE).read_text())
    machine = run["environment"]["machine"]
    assert machine["os"] and machine["cpu_model"] and machine["cpu_cores"] >= 1 and machine["memory_bytes"] > 0
    engine = run["launch"]["engine"]  # read from the launched server's own Python environment
    assert engine["python"] == str(VLLM_PYTHON) and engine["build"] == "cpu" and "commit" in engine
    assert engine["version"] and engine["version"] == run["server"]["version"]  # and /version agrees
    assert engine["torch"].endswith("+cpu")
    for line in (f"**Version**: {engine['version']}", "**Build**: cpu", "**Backend**: cpu",
                 f"**CPU**: {machine['cpu_model']}", f"**CPU cores**: {machine['cpu_cores']}", "**Memory**: ",
                 f"**OS**: {machine['os']}", "**GPU**: none", "**Server**: launched by the toolkit"):  # fmt: skip
        assert f"- {line}" in report, line
    assert done.stderr.count(NO_TELEMETRY) == 1  # no NVML here: said once, and the run completed

    cells = results(out)
    assert cells[("prefill", 256, 1)]["status"] == "Valid"
    for n in (1, 2):
        assert cells[("decode", 256, n)]["status"] in RAN and cells[("decode", 256, n)]["output_tokens"] > 0
        assert cells[("decode", 256, n)]["gpu_throttled"] is None


def _running(base_url: str) -> float:
    try:
        return parse_metrics(httpx.get(base_url + "/metrics", timeout=2).text).value(RUNNING) or 0
    except (httpx.HTTPError, ValueError):
        return 0


def test_the_launched_vllm_killed_mid_cell_then_resume_relaunches_it_and_finishes_the_run(tmp_path: Path) -> None:
    """The params file's `server:` block end to end: `toolkit run` launches the real vLLM, which is SIGKILLed in the
    first decode window; that cell is an Error saying so with the log's last lines; `--resume` relaunches the server,
    keeps the prefill and finishes the run, whose folder and reports are checked whole (the end-to-end test of a
    launched server, once: a first run that went through untouched would start one more vLLM to show the same)."""
    # No drift control: the kill must land in a measured cell.
    quiet = {"disturbed_retries": 0, "control_window_s": 0}
    params, command, base_url = managed_params(tmp_path, duration_s=8, max_output=640, **quiet)
    out = tmp_path / "out"
    log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen(toolkit_run(params, out), cwd=REPO, env=env(), stdout=log, stderr=log, text=True)
    try:
        deadline = time.monotonic() + 300
        # The prefill is recorded; then the decode notebook's first cell streams (window of 8 s).
        while not ((out / RESULTS_FILE).exists() and _running(base_url) >= 1):
            assert proc.poll() is None and time.monotonic() < deadline, "the first decode cell never started"
            time.sleep(0.1)
        time.sleep(1.5)
        pgid = json.loads((out / LAUNCH_FILE).read_text())["pid"]
        os.killpg(pgid, signal.SIGKILL)  # the API server and the engine core at once
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    first_log = (tmp_path / "first.log").read_text()
    assert proc.returncode == 1, first_log[-3000:]
    assert "the server was killed by SIGKILL (exit -9) during the run" in first_log
    assert_group_gone(pgid, timeout_s=10, what="vLLM")
    first = results(out)
    assert first[("prefill", 256, 1)]["status"] == "Valid"
    killed = first[("decode", 256, 1)]
    assert killed["status"] == "Error" and killed["total_tok_s"] is None, killed
    assert first[("decode", 256, 2)]["status"] == "Error"  # the server was gone: recorded, and the run went on
    assert "the server was killed by SIGKILL (exit -9); last lines of its log:\n" in killed["error"]
    tail = killed["error"].split("last lines of its log:\n", 1)[1].splitlines()
    log_lines = (out / "server.log").read_text().splitlines()
    assert tail and tail[-1] == log_lines[-1]  # the log's last lines, as written when it died

    done = subprocess.run(toolkit_run(params, out, "--resume"), cwd=REPO, env=env(), capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    relaunched = json.loads((out / LAUNCH_FILE).read_text())
    assert relaunched["pid"] != pgid
    assert_group_gone(relaunched["pid"], timeout_s=10, what="vLLM")
    final = results(out)
    assert final[("prefill", 256, 1)] == first[("prefill", 256, 1)]  # finished before the kill: not redone
    for n in (1, 2):
        assert final[("decode", 256, n)]["status"] in RAN and final[("decode", 256, n)]["error"] is None
    assert TEST_API_KEY not in first_log
    assert_launched_run_end_to_end(out, command, done)
