"""A watchdog on every kernel `toolkit run` starts: a measuring cell that hangs on a server that never replies ends
the run within its bound in one line, the folder keeps what was measured, and `--resume` finishes the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.results.store import RESULTS_FILE

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "WATCHDOG_TEST_API_KEY"  # unset: the fault server needs no key
BOUND_S = 30  # every cell's bound (cell_timeout_s): above the slowest import cell on a busy 2-core machine
# The client would wait 10 minutes for the stalled streams: only the watchdog can end the cell sooner.
PARAMS = tiny_params(readiness_timeout_s=600, read_timeout_s=600, api_key_env=KEY_ENV, cell_timeout_s=BOUND_S)

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


def toolkit(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = dict(os.environ, MPLBACKEND="Agg", NO_PROXY="127.0.0.1,localhost")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop(KEY_ENV, None)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "toolkit", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=240)  # fmt: skip
    return done, time.monotonic() - started


def statuses(folder: Path) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in (folder / RESULTS_FILE).read_text().splitlines()]
    return [(row["phase"], row["status"]) for row in rows]


def test_a_hung_measuring_cell_ends_the_run_in_one_line_and_resume_finishes_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with FaultServer() as server:
        params = tmp_path / "params.yaml"
        params.write_text(yaml.safe_dump({"base_url": server.base_url, **PARAMS}))
        server.set_fault("stall", after=1)  # the prefill is answered; the decode cell's stream never is
        hung, took = toolkit("run", str(params), "--out", str(out))
        lines = hung.stderr.strip().splitlines()
        assert hung.returncode == 1, hung.stderr[-3000:]
        assert lines[-1].startswith("error: decode_matrix.ipynb: cell "), lines[-3:]
        assert f"ran past its bound of {BOUND_S} s and its kernel was stopped" in lines[-1]
        assert "rerun with --resume" in lines[-1]
        assert [line for line in lines if line.startswith("error:")] == lines[-1:]
        assert took < 200  # two kernels' start, the prefill, then the bound: not the client's 600 s
        assert statuses(out) == [("prefill", "Valid")]  # what was measured before the hang is kept
        assert (out / "decode_matrix.ipynb").exists() and not (out / "report.html").exists()
        server.clear_fault()
        resumed, _ = toolkit("run", str(params), "--out", str(out), "--resume")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert statuses(out) == [("prefill", "Valid"), ("decode", "Valid")]
    assert (out / "report.html").exists() and (out / "report.md").exists()
