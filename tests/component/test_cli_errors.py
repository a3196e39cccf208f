"""`python -m toolkit matrix` against the fault server: a bug inside a measurement (a TypeError, a ValueError)
stops the command with its traceback and a non-zero exit; it is not turned into a one-line "bad input" error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faultserver import FaultServer

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]

# `python -m toolkit` itself, after the measurement was replaced by one that hits a bug.
BROKEN = """
import runpy, sys
from toolkit.matrix import runner

async def broken(*args, **kwargs):
    raise {error}("a bug inside a measurement")

runner.measure_prefill = broken
sys.argv = ["toolkit", *sys.argv[1:]]
runpy.run_module("toolkit", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("error", ["TypeError", "ValueError"])
def test_a_bug_inside_a_measurement_stops_the_matrix_with_its_traceback(error: str, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with FaultServer(max_model_len=4096) as server:
        args = ["matrix", "--base-url", server.base_url, "--out", str(tmp_path / "out"), "--contexts", "64",
                "--concurrency", "1", "--duration", "1", "--max-output", "8", "--control-window", "0.5"]  # fmt: skip
        done = subprocess.run([sys.executable, "-c", BROKEN.format(error=error), *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=90)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback (most recent call last):" in done.stderr, done.stderr
    assert f"{error}: a bug inside a measurement" in done.stderr.splitlines(), done.stderr
    assert "error: " not in done.stderr  # not the one line of a ToolkitError
    assert "in broken" in done.stderr  # the frame where the bug is
