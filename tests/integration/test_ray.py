"""`toolkit batch --ray` and a rate sweep's `ray_address` on one real Ray cluster that the tests start on 127.0.0.1
(and stop), against fault servers.

The same two-variant sweep runs locally and on Ray: the same folders, index and comparison, though on Ray each
variant ran in a Ray worker process and came back as an archive. A variant interrupted on its worker comes back
with the cells it measured, and --resume does not measure them again. Needs Ray (`pip install -e '.[ray]'`, which
`make install` does). Marked engine although it uses no vLLM, so `make test-offline` leaves it out: beside the offline
tier's three workers and the flake hunt's two busy processes, its batches ran past their 240 s timeouts (all three
tests failed, 2026-12-04), while one at a time they take 7-66 s. `make test` runs it on its own beside the offline
tier (the Makefile's RAY_TESTS), before the engine tier's gate.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest

from tests.component.test_batch import KEY_ENV, batch, batch_cmd, env, key, records, state, sweep_file
from tests.faultserver import FaultServer
from toolkit.rates.files import read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.results.store import RESULTS_FILE

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = ("127.0.0.1", "::ffff:127.0.0.1", "::1")

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed: pip install -e '.[ray]'"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster(NamedTuple):
    address: str
    proc: subprocess.Popen[bytes]
    work: Path  # the workers' TMPDIR: a task's folder is <work>/toolkit-batch-*/<label>/


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Cluster]:
    """`ray start --head --block` on 127.0.0.1 only (2 CPUs, no dashboard); SIGTERM stops it and its workers."""
    temp = Path(tempfile.mkdtemp(prefix="tkray-", dir="/tmp"))  # short: Ray's socket paths must stay < 108 bytes
    port = free_port()
    (temp / "work").mkdir()
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", MPLBACKEND="Agg",
               TMPDIR=str(temp / "work"))  # fmt: skip
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop(KEY_ENV, None)
    cmd = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--port", str(port), "--num-cpus", "2", "--include-dashboard", "false", "--disable-usage-stats",
           "--temp-dir", str(temp)]  # fmt: skip
    log_path = temp / "ray-start.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, process_group=0)
    try:
        deadline = time.monotonic() + 120
        while b"Ray runtime started" not in log_path.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)
        yield Cluster(f"127.0.0.1:{port}", proc, temp / "work")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        shutil.rmtree(temp, ignore_errors=True)


def listening_addresses(root: int) -> set[str]:
    """The addresses that a process and its descendants listen on."""
    procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    found = set()
    for proc in procs:
        try:
            found |= {c.laddr.ip for c in proc.net_connections("inet") if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            continue
    return found


def folder_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_a_sweep_on_ray_gives_the_same_folders_index_and_compare_as_a_local_batch(
    ray_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    address, cluster, _ = ray_cluster
    monkeypatch.delenv(KEY_ENV, raising=False)
    with FaultServer() as one, FaultServer() as two, FaultServer() as three, FaultServer() as four:
        sweeps = []
        for name, (a, b) in (("local", (one, two)), ("ray", (three, four))):
            (tmp_path / f"{name}-sweep").mkdir()
            sweeps.append(sweep_file(tmp_path / f"{name}-sweep", [
                {"label": "a", "base_url": a.base_url, "resources": {"CPU": 1}},
                {"label": "b", "base_url": b.base_url, "resources": {"CPU": 1, "node:127.0.0.1": 0.01}},
            ], concurrency=[1]))  # fmt: skip
        # The local batch beside the Ray one, each with its own servers: both mostly wait (0.8 of the 2 cores idle
        # when they ran one after the other), and nothing here compares their speeds.
        local = subprocess.Popen(batch_cmd(sweeps[0], tmp_path / "local"), cwd=REPO, env=env(),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            started = time.monotonic()
            on_ray = batch(sweeps[1], tmp_path / "ray", "--ray", address, "--jobs", "2")
            ray_s = time.monotonic() - started
            _, local_err = local.communicate(timeout=240)
        finally:
            if local.poll() is None:
                local.kill()
                local.wait()
        assert local.returncode == 0, local_err[-3000:]
        assert on_ray.returncode == 0, on_ray.stderr[-3000:]
        assert listening_addresses(cluster.pid) <= set(LOOPBACK)  # the cluster listens on loopback only

    mine, theirs = tmp_path / "local", tmp_path / "ray"
    for label in ("a", "b"):
        assert folder_files(mine / label) == folder_files(theirs / label)  # notebooks, reports, results, traces
        assert {r["status"] for r in records(theirs / label)} == {"Valid"}
        assert len(records(theirs / label)) == len(records(mine / label))
    assert sorted(p.name for p in theirs.iterdir()) == sorted(p.name for p in mine.iterdir())
    ran = state(theirs)
    for label in ("a", "b"):
        entry = ran["variants"][label]
        assert entry["state"] == "done" and entry["ray"] is True
        assert entry["pid"] != ran["driver_pid"] and entry["pid"] != os.getpid()  # ran in a Ray worker
        assert state(mine)["variants"][label]["pid"] == state(mine)["driver_pid"]
        assert "a: 100%" in (theirs / "a" / "run.log").read_text()  # the worker's output came back too
    assert ran["ray"] == address and ran["compare"] == {"state": "done", "labels": ["a", "b"]}

    def shape(markdown: str) -> list[str]:
        """The index's rows: variant link and state, without the numbers and times."""
        return [line.split(" | ")[0] + " | " + line.split(" | ")[1].split(" (")[0]
                for line in markdown.splitlines() if line.startswith("| [")]  # fmt: skip

    assert shape((theirs / "index.md").read_text()) == shape((mine / "index.md").read_text()) == [
        "| [a](a/report.md) | done", "| [b](b/report.md) | done"]  # fmt: skip
    for name in ("compare.html", "compare.md", "compare.ipynb"):
        assert (theirs / "compare" / name).exists()
    headings = [[x for x in (d / "compare" / "compare.md").read_text().splitlines() if x.startswith("#")]
                for d in (mine, theirs)]  # fmt: skip
    assert headings[0] == headings[1]
    print(f"ray batch: {ray_s:.1f} s", file=sys.stderr)
    assert json.loads((theirs / "a" / "run.json").read_text())["run_label"] == "a"


@pytest.mark.parametrize(("sig", "jobs"), [(signal.SIGINT, "1"), (signal.SIGTERM, "2")],
                         ids=["ctrl-c", "sigterm-jobs-2"])  # fmt: skip
def test_a_variant_interrupted_on_its_worker_keeps_its_cells_and_resume_measures_the_rest(
    ray_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals, jobs: str
) -> None:
    """Interrupted in the driver's main thread (--jobs 1) and in a scheduling thread (--jobs 2)."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    out, log_path = tmp_path / "out", tmp_path / "first.log"
    plan = {("prefill", 64, 1), ("decode", 64, 1), ("decode", 64, 2)}
    with FaultServer() as server:
        sweep = sweep_file(tmp_path, [{"label": "cut"}], base_url=server.base_url)
        earlier = set(ray_cluster.work.glob("toolkit-batch-*"))  # an earlier test's task may still be ending
        with open(log_path, "wb") as log:
            first = batch_cmd(sweep, out, "--ray", ray_cluster.address, "--jobs", jobs)
            proc = subprocess.Popen(first, cwd=REPO, env=env(), stdout=log, stderr=subprocess.STDOUT, process_group=0)
        try:
            deadline = time.monotonic() + 120
            # The prefill notebook wrote prefill 64 in the worker's folder: interrupt before the decode cells.
            while time.monotonic() < deadline and proc.poll() is None:
                found = [p / "cut" / RESULTS_FILE for p in set(ray_cluster.work.glob("toolkit-batch-*")) - earlier]
                if any(f.exists() and f.read_bytes().count(b"\n") >= 1 for f in found):
                    break
                time.sleep(0.05)
            assert proc.poll() is None, log_path.read_text()
            started = time.monotonic()
            proc.send_signal(sig)  # to the driver alone: the worker runs elsewhere
            assert proc.wait(120) == 130, log_path.read_text()  # the driver waits up to 60 s for the folder
            stop_s = time.monotonic() - started
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        assert state(out)["variants"]["cut"]["state"] == "interrupted"
        raw = (out / "cut" / RESULTS_FILE).read_bytes()  # the cells measured before the interrupt came back
        before = [json.loads(x) for x in raw[: raw.rfind(b"\n") + 1].splitlines()]
        assert key(before[0]) == ("prefill", 64, 1) and {key(r) for r in before} < plan, before

        done = batch(sweep, out, "--resume", "--ray", ray_cluster.address)
        assert done.returncode == 0, done.stderr[-3000:]
    after = records(out / "cut")
    assert after[: len(before)] == before  # kept as they were
    assert sorted(key(r) for r in after[len(before) :]) == sorted(plan - {key(r) for r in before})  # only the rest
    assert len({r["run_id"] for r in after}) == 1  # the same run, continued
    assert state(out)["variants"]["cut"]["state"] == "done"
    print(f"{sig.name} to exit: {stop_s:.1f} s, kept {len(before)} cell(s)", file=sys.stderr)


def test_two_ray_clients_send_one_rate_step_together(ray_cluster: Cluster, tmp_path: Path) -> None:
    """A rate step sent from 2 client processes on the Ray head against the fault server: the records of both merge
    into one step, whose achieved rate is the two streams' together."""
    with FaultServer(token_interval_s=0.005) as server:
        params = make_rate_params({
            "base_url": server.base_url, "rates": [40], "arrival": "constant", "requests_per_step": 80,
            "input_tokens": 30, "output_tokens": 5, "ray_address": ray_cluster.address, "clients": 2,
            "results_dir": str(tmp_path / "run"),
        })  # fmt: skip
        out = run_rates(params, say=lambda line: None)
        seen = {e["path"] for e in server.completion_requests()}
    import ray

    # Disconnected: a driver left connected is ended by Ray (exit 1, nothing said) a minute after its cluster stops.
    assert not ray.is_initialized()
    (row,) = read_steps(out)
    records = read_records(out)
    assert row["completed"] == 80 and row["failed"] == 0 and list(records["request"]) == list(range(80))
    assert row["achieved_rate"] == pytest.approx(40, rel=0.05)  # the two clients' ~20/s each, summed
    lags = records["sent_s"] - records["scheduled_s"]
    assert lags.min() >= 0 and lags.median() < 0.02  # both held the common schedule
    assert row["server_generation_tokens"] == row["client_generation_tokens"] == 400
    assert seen == {"/v1/chat/completions"}
