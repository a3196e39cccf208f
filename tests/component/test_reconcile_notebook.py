"""`vllm-speedtest reconcile`: our rate step beside vllm bench serve's, imported, through the notebook and reports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PEERS = REPO / "tests" / "fixtures" / "peers"

pytestmark = [pytest.mark.process, pytest.mark.timeout(240)]


def toolkit(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=200)  # fmt: skip


def test_reconcile_prints_each_ratio_and_writes_the_reports(tmp_path: Path) -> None:
    imported = toolkit("import-results", PEERS / "vllm-bench-4rps.json", "--out", tmp_path / "vllm")
    assert imported.returncode == 0, imported.stderr
    # our sender replayed vllm bench's own requests (scripts/peer_fixtures.py): the same schedule and lengths
    done = toolkit("reconcile", PEERS / "toolkit-replay-4rps", tmp_path / "vllm", "--labels", "toolkit,vllm",
                   "--out", tmp_path / "rec")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 4 req/s | vllm |")]
    assert [row.split(" | ")[2] for row in rows] == [
        "output tok/s", "TTFT p50 ms", "TPOT p50 ms", "e2e p50 ms", "ITL p50 ms (interval too narrow)",
    ]  # fmt: skip
    assert all(" [" in row.split(" | ")[6] for row in rows)  # each ratio with its interval
    html = (tmp_path / "rec" / "reconcile.html").read_text()
    assert "data:image/png" in html and "vllm bench serve" in html and "RUN_DIRS" not in html  # inputs hidden
    assert (tmp_path / "rec" / "reconcile.md").read_text() in done.stdout


def test_reconcile_refuses_a_folder_without_rate_steps(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = toolkit("reconcile", PEERS / "toolkit-4rps", tmp_path / "empty", "--out", tmp_path / "rec")
    assert done.returncode == 2 and done.stderr.strip().endswith("holds no rate steps (no rates/ folder)"), done.stderr
