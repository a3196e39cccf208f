"""`toolkit batch` end to end on the real vLLM (CPU, tiny model): a variant launched from its `server:` block
(params/managed-embedded.yaml's, on a free port, --max-num-seqs 1), measured and stopped, then a variant on the
session's vLLM (at most 256 running); the launched vLLM is SIGKILLed mid-cell and `--resume` relaunches it.

One test, two vLLM starts: a launched server killed mid-cell then relaunched by --resume (the tests before this
one, test_batch_vllm's and test_managed_vllm's, took four starts and 247 s together; a second launched variant
took a third start, 35-40 s, to show what the session's server shows as well: 2 streams Valid where the launched
server queues them).
"""

from __future__ import annotations

import html
import json
import os
import re
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
from tests.server_tokens import assert_server_agrees
from toolkit.base.schema import PHASE_TITLES
from toolkit.batch.index import headline
from toolkit.matrix.prometheus import RUNNING, parse_metrics
from toolkit.reports.number_format import format_tok_s
from toolkit.results import runs
from toolkit.results.local_paths import REPO_ROOT, public_paths
from toolkit.results.store import RESULTS_FILE, RUN_FILE
from toolkit.servers.embedded.server import VLLM_PYTHON, EmbeddedServer, ensure_model, free_port
from toolkit.servers.gpu import NO_TELEMETRY
from toolkit.servers.launch import LAUNCH_FILE

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "params" / "managed-embedded.yaml"
LABELS = ("max_num_seqs=1", "session")
RAN = ("Valid", "Requests queued")

pytestmark = pytest.mark.timeout(1200)


def sweep_file(tmp_path: Path, session_url: str) -> tuple[Path, str, str]:
    """params/managed-embedded.yaml's server block on a free port, --max-model-len 2048 and --max-num-seqs 1 for
    the first variant, `session_url` for the second; the file, the launched command, and its base URL. No drift
    control and no retry of a disturbed window: the kill must land in a measured cell."""
    example = yaml.safe_load(EXAMPLE.read_text())
    port = free_port()
    command = (example["server"]["command"].replace(".venv-vllm/bin/python", str(VLLM_PYTHON))
               .replace(".cache/tiny-llama", str(ensure_model())).replace("--port 8011", f"--port {port}")
               .replace("--max-model-len 4096", "--max-model-len 2048")) + " --max-num-seqs 1"  # fmt: skip
    sweep = {
        "contexts": ["256"], "concurrency": [1, 2], "duration_s": 4, "max_output": 256, "readiness_timeout_s": 30,
        "control_window_s": 0, "disturbed_retries": 0, "hardware_type": "CPU (no GPU)",
        "variants": [
            {"label": LABELS[0], "base_url": f"http://127.0.0.1:{port}",
             "server": {**example["server"], "command": command}},
            {"label": LABELS[1], "base_url": session_url},
        ],
    }  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path, command, f"http://127.0.0.1:{port}"


def env() -> dict[str, str]:
    return {"VLLM_API_KEY": TEST_API_KEY, "PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"),
            "MPLBACKEND": "Agg", "NO_PROXY": "127.0.0.1,localhost"}  # fmt: skip


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


def status_rows(markdown: str) -> list[list[str]]:
    """The rows of compare.md's status differences table."""
    section = markdown.split("## Status differences", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("| ")][1:]  # without the header
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_a_batch_of_a_launched_vllm_killed_mid_cell_and_the_session_vllm_then_resumed(
    tmp_path: Path, vllm_server: EmbeddedServer
) -> None:
    """`toolkit batch` launches the first variant's vLLM, which is SIGKILLed in its first decode cell: that cell is
    an Error saying so with the log's last lines, the variant is recorded failed and the batch goes on to the second
    (the session's vLLM). `--resume` relaunches the first variant's server, keeps its prefill, finishes it, and
    writes the index and the comparison of both; each folder and report is checked whole."""
    sweep, command, base_url = sweep_file(tmp_path, vllm_server.base_url)
    out = tmp_path / "batch"
    first_variant = out / LABELS[0]
    cmd = [sys.executable, "-m", "toolkit", "batch", str(sweep), "--out", str(out)]
    log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=log, stderr=log, text=True)
    try:
        deadline = time.monotonic() + 300
        # The prefill is recorded; then the decode notebook's first cell streams (window of 4 s).
        while not ((first_variant / RESULTS_FILE).exists() and _running(base_url) >= 1):
            assert proc.poll() is None and time.monotonic() < deadline, "the first decode cell never started"
            time.sleep(0.1)
        time.sleep(0.5)
        pgid = json.loads((first_variant / LAUNCH_FILE).read_text())["pid"]
        os.killpg(pgid, signal.SIGKILL)  # the API server and the engine core at once
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    first_log = (tmp_path / "first.log").read_text()
    assert proc.returncode == 1, first_log[-3000:]  # a variant failed
    assert_group_gone(pgid, timeout_s=10, what="vLLM")
    variants = json.loads((out / "batch.json").read_text())["variants"]
    assert [variants[label]["state"] for label in LABELS] == ["failed", "done"], variants
    assert "the server was killed by SIGKILL (exit -9)" in variants[LABELS[0]]["error"]
    first = results(first_variant)
    assert first[("prefill", 256, 1)]["status"] == "Valid"
    killed = first[("decode", 256, 1)]
    assert killed["status"] == "Error" and killed["total_tok_s"] is None, killed
    assert first[("decode", 256, 2)]["status"] == "Error"  # the server was gone: recorded, and the run went on
    assert "the server was killed by SIGKILL (exit -9); last lines of its log:\n" in killed["error"]
    tail = killed["error"].split("last lines of its log:\n", 1)[1].splitlines()
    log_lines = (first_variant / "server.log").read_text().splitlines()
    assert tail and tail[-1] == log_lines[-1]  # the log's last lines, as written when it died
    assert TEST_API_KEY not in first_log

    done = subprocess.run([*cmd, "--resume"], cwd=REPO, env=env(), capture_output=True, text=True, timeout=1100)
    (tmp_path / "resume.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    relaunched = json.loads((first_variant / LAUNCH_FILE).read_text())
    assert relaunched["pid"] != pgid
    final = results(first_variant)
    assert final[("prefill", 256, 1)] == first[("prefill", 256, 1)]  # finished before the kill: not redone
    for n in (1, 2):
        assert final[("decode", 256, n)]["error"] is None
    assert_launched_run_end_to_end(first_variant, shlex.split(command), done)

    state = json.loads((out / "batch.json").read_text())
    assert state["labels"] == list(LABELS)
    frames = {}
    for label in LABELS:
        folder = out / label
        assert state["variants"][label]["state"] == "done", state["variants"][label]
        for name in ("report.html", "report.md", "results.csv", "run.json", "prefill.ipynb", "decode_matrix.ipynb"):
            assert (folder / name).exists(), (label, name)
        frames[label], _ = runs.load_run(folder)
        for m in frames[label].to_dict("records"):
            assert m["status"] in RAN, m
            if m["phase"] == "decode" and m["status"] == "Valid":
                assert_server_agrees(m)
        leaks = [p for p in folder.rglob("*") if p.is_file() and TEST_API_KEY.encode() in p.read_bytes()]
        assert leaks == []
    assert not (out / LABELS[1] / LAUNCH_FILE).exists()  # the session's server: measured, not launched
    one = frames["max_num_seqs=1"]
    assert one[(one["phase"] == "decode") & (one["concurrency"] == 2)]["status"].tolist() == ["Requests queued"]

    page = (out / "index.html").read_text()
    for label in LABELS:  # every report linked, with its headline numbers
        row = next(line for line in page.splitlines() if f'href="{label.replace("=", "%3D")}/report.html"' in line)
        numbers = headline(frames[label])
        assert f"{format_tok_s(numbers['prefill_tok_s'], trim_zero=True)} at 256" in row, row
        best = f"{format_tok_s(numbers['best_total_tok_s'])} at 256 × {numbers['best_concurrency']}"
        assert html.escape(best) in row, row
        assert "Valid " in row and "done" in row
    assert 'href="compare/compare.html"' in page

    # The comparison's status differences are exactly those of the runs' own results.csv.
    csv = {label: runs.load_run(out / label)[0] for label in LABELS}
    statuses = {label: {(r["phase"], r["context"], r["concurrency"]): r["status"]
                        for r in frame.to_dict("records")} for label, frame in csv.items()}  # fmt: skip
    cells = sorted(set().union(*statuses.values()), key=lambda k: (k[0] != "prefill", k[1], k[2]))
    expected = [[PHASE_TITLES[p], c, str(n), *(statuses[label].get((p, c, n), "—") for label in LABELS)]
                for p, c, n in cells if len({statuses[label].get((p, c, n)) for label in LABELS}) > 1]  # fmt: skip
    compare_md = (out / "compare" / "compare.md").read_text()
    assert status_rows(compare_md) == expected
    assert ["Sustained decode", "256", "2", "Requests queued", "Valid"] in expected  # 1 running at most vs 256
    assert (out / "compare" / "compare.html").exists()
    assert re.search(r"\| \[session\]\(session/report\.md\) \| done", (out / "index.md").read_text())
