"""A results folder has one writer, and a resumed run continues the server it began with (fault servers).

A second `toolkit run`, `matrix` or `batch` on a folder whose run is alive is refused naming that run's pid; a
`--resume` against a server other than the one run.json recorded is refused in one line and leaves every file
of the first run byte for byte. The launched-server side of both: tests/component/test_managed_server.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.base.folder_lock import LOCK_FILE
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.results.store import RESULTS_FILE, RUN_FILE

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "FOLDER_TEST_API_KEY"  # unset: the fault servers need no key
COMMON = tiny_params(concurrency=[1, 2], api_key_env=KEY_ENV)
MATRIX_ARGS = ["--contexts", "64", "--concurrency", "1,2", "--duration", "0.5", "--max-output", "8",
               "--api-key-env", KEY_ENV, "--control-window", "0"]  # fmt: skip

pytestmark = [pytest.mark.process, pytest.mark.timeout(240)]


def env() -> dict[str, str]:
    values = dict(os.environ, MPLBACKEND="Agg", NO_PROXY="127.0.0.1,localhost")
    values["PYTHONPATH"] = str(REPO) + os.pathsep + values.get("PYTHONPATH", "")
    values.pop(KEY_ENV, None)
    return values


def toolkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolkit", *args], cwd=REPO, env=env(), capture_output=True,
                          text=True, timeout=180)  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code and len(lines) == 1, (done.returncode, done.stderr[-3000:])
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under folder, by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def params_file(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"base_url": base_url, **COMMON}))
    return path


def sweep_file(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base_url": base_url, **COMMON, "variants": [{"label": "a"}]}))
    return path


def first_run(server: FaultServer, out: Path) -> None:
    """A run whose decode cells are Errors: a --resume has cells to measure again."""
    server.set_fault("500", after=1)  # the prefill passes, every decode request fails
    run_matrix(make_params({"base_url": server.base_url, **COMMON}), out, progress=False)
    statuses = [json.loads(line)["status"] for line in (out / RESULTS_FILE).read_text().splitlines()]
    assert statuses == ["Valid", "Error", "Error"]
    server.clear_fault()


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.mark.parametrize("command", ["matrix", "run", "batch"])
def test_resume_against_another_server_is_refused_and_leaves_the_run_as_it_was(tmp_path: Path, command: str) -> None:
    out = tmp_path / "out"
    folder = out / "a" if command == "batch" else out  # the batch's variant a is the run to continue
    with FaultServer() as first:
        first_run(first, folder)
    before = snapshot(out)
    with FaultServer(max_model_len=2048) as other:  # another server (the first one's port is gone)
        if command == "matrix":
            done = toolkit("matrix", "--base-url", other.base_url, *MATRIX_ARGS, "--out", str(out), "--resume")
        elif command == "run":
            done = toolkit("run", str(params_file(tmp_path, other.base_url)), "--out", str(out), "--resume")
        else:
            done = toolkit("batch", str(sweep_file(tmp_path, other.base_url)), "--out", str(out), "--resume")
        assert other.completion_requests() == []
    expected = (f"resume: the server at {other.base_url} is not the one the run in {folder} measured "
                "(max_model_len: 4096 -> 2048); continue it against that server or use a new --out")  # fmt: skip
    if command == "batch":  # the variant fails with that line; the batch goes on to its index
        assert done.returncode == 1, done.stderr[-3000:]
        variant = json.loads((out / "batch.json").read_text())["variants"]["a"]
        assert variant["state"] == "failed" and variant["error"] == expected
        after = snapshot(out)
        assert {k: v for k, v in after.items() if k in before} == before
        assert set(after) - set(before) == {"batch.json", "index.html", "index.md", "a/error.txt", "a/run.log"}
    else:
        assert one_line(done, 2) == f"error: {expected}"
        assert snapshot(out) == before


def test_a_second_run_on_a_folder_in_use_is_refused_naming_its_pid(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with FaultServer() as server:
        first = subprocess.Popen(
            [sys.executable, "-m", "toolkit", "matrix", "--base-url", server.base_url, "--contexts", "64",
             "--concurrency", "1", "--duration", "60", "--max-output", "8", "--api-key-env", KEY_ENV,
             "--control-window", "0", "--out", str(out)],
            cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not (out / RESULTS_FILE).exists():  # the prefill is written: the decode cell runs for 60 s
                assert first.poll() is None and time.monotonic() < deadline, "the first run did not get going"
                time.sleep(0.1)
            assert (out / LOCK_FILE).read_text().strip() == str(first.pid)
            before = (out / RESULTS_FILE).read_bytes(), (out / RUN_FILE).read_bytes()
            busy = (f"error: out: {out} is in use by another toolkit run (pid {first.pid}); wait for it to end or "
                    "choose another folder")  # fmt: skip
            resumed = toolkit("matrix", "--base-url", server.base_url, "--contexts", "64", "--concurrency", "1",
                              "--duration", "60", "--max-output", "8", "--api-key-env", KEY_ENV, "--out", str(out),
                              "--resume")  # fmt: skip
            assert one_line(resumed, 2) == busy
            assert one_line(toolkit("run", str(params_file(tmp_path, server.base_url)), "--out", str(out)), 2) == busy
            done = toolkit("batch", str(sweep_file(tmp_path, server.base_url)), "--out", str(out), "--resume")
            assert one_line(done, 2) == busy
            assert ((out / RESULTS_FILE).read_bytes(), (out / RUN_FILE).read_bytes()) == before
            assert not (out / "batch.json").exists() and not (out / "a").exists()
            assert first.poll() is None  # the first run goes on
        finally:
            first.send_signal(signal.SIGINT)
            try:
                first.wait(120)
            finally:
                if first.poll() is None:  # never left running into the next test
                    first.kill()
                    first.wait()
    assert not (out / LOCK_FILE).exists()
