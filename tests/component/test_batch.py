"""`python -m toolkit batch` against fault servers (tests/faultserver.py): refusals, --jobs, kill -9 and --resume.

The end-to-end batch on the real vLLM: tests/integration/test_batch_vllm.py; on a Ray cluster:
tests/integration/test_ray.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.folder_check import check_folder
from toolkit.results.store import RESULTS_FILE

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "FAULT_TEST_API_KEY"  # unset: the fault servers need no key

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


@pytest.fixture
def servers(
    monkeypatch: pytest.MonkeyPatch, make_fault_server: Callable[..., FaultServer]
) -> tuple[FaultServer, FaultServer]:
    monkeypatch.delenv(KEY_ENV, raising=False)
    return make_fault_server(), make_fault_server()


def sweep_file(tmp_path: Path, variants: list[dict[str, Any]], **common: Any) -> Path:
    values = {**tiny_params(contexts=["64"], concurrency=[1, 2], max_output=16, control_window_s=0.5,
                            api_key_env=KEY_ENV), **common, "variants": variants}  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def env() -> dict[str, str]:
    values = dict(os.environ, MPLBACKEND="Agg", NO_PROXY="127.0.0.1,localhost")
    values["PYTHONPATH"] = str(REPO) + os.pathsep + values.get("PYTHONPATH", "")
    values.pop(KEY_ENV, None)
    return values


def batch_cmd(sweep: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "toolkit", "batch", str(sweep), "--out", str(out), *extra]


def batch(sweep: Path, out: Path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(batch_cmd(sweep, out, *extra), cwd=REPO, env=env(), capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / RESULTS_FILE).read_text().splitlines()]


def key(record: dict[str, Any]) -> tuple[str, int, int]:
    return (record["phase"], record["context_tokens"], record["concurrency"])


def state(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "batch.json").read_text())
    return data


@pytest.mark.parametrize(
    ("variants", "common", "expected"),
    [
        ([{"label": "a", "max_ouput": 8}], {}, r"^error: sweep: variant 1 \(a\): max_ouput: unknown field; allowed: "),
        ([{"label": "a"}], {"duraton_s": 1}, r"^error: sweep: duraton_s: unknown field; allowed: variants, grid"),
        ([{"label": "a"}, {"label": "a", "duration_s": 2}], {}, r"^error: sweep: duplicate label 'a' \(variants 1 and"),
        ([{"label": "a"}], {"grid": {}}, r"^error: sweep: grid: empty"),
        ([{"label": "a"}], {"grid": {"max_num_seqs": []}, "title": "{max_num_seqs}"}, r"^error: sweep: grid\.max_num"),
        ([{"label": "a", "duration_s": 0}], {}, r"^error: sweep: variant a: duration_s: .*greater than 0"),
    ],
)
def test_a_bad_sweep_is_refused_in_one_line_before_any_load(
    servers: tuple[FaultServer, FaultServer], tmp_path: Path, variants: list[dict[str, Any]], common: dict[str, Any],
    expected: str,
) -> None:  # fmt: skip
    import re

    server = servers[0]
    done = batch(sweep_file(tmp_path, variants, base_url=server.base_url, **common), tmp_path / "out", timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(expected, lines[0]), done.stderr
    assert server.log == []  # not even a /v1/models
    assert not (tmp_path / "out").exists()


def test_jobs_over_variants_sharing_a_server_is_refused(
    servers: tuple[FaultServer, FaultServer], tmp_path: Path
) -> None:
    server = servers[0]
    sweep = sweep_file(tmp_path, [{"label": "a"}, {"label": "b", "duration_s": 2}], base_url=server.base_url)
    done = batch(sweep, tmp_path / "out", "--jobs", "2", timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"error: --jobs 2: variants a and b measure the same server ({server.base_url}); "
                                   "variants sharing a base_url must run one at a time (--jobs 1)")  # fmt: skip
    assert server.log == []


def completion_span(server: FaultServer, since: float) -> tuple[float, float]:
    times = [e["time"] for e in server.completion_requests() if e["time"] >= since]
    return min(times), max(times)


def assert_server_agrees(m: dict[str, Any]) -> None:
    """As tests/integration/test_matrix_engine.py: the server's token count lies in the client's bracket (± 2 %)."""
    assert m["client_tokens_min"] > 0, m
    assert 0.98 * m["client_tokens_min"] <= m["server_output_tokens"] <= 1.02 * m["client_tokens_max"], m


def test_jobs_2_measures_two_servers_at_once(servers: tuple[FaultServer, FaultServer], tmp_path: Path) -> None:
    """Both variants measured at the same time, each cell as good as alone: Valid, the server's count agreeing.

    One at a time (no --jobs) is the other tests' batches: test_a_failed_variant_and_a_kill_9_mid_variant_then_resume
    kills the batch while b runs and finds c not begun.
    """
    one, two = servers
    sweep = sweep_file(tmp_path, [{"label": "a", "base_url": one.base_url}, {"label": "b", "base_url": two.base_url}],
                       duration_s=1.5)  # fmt: skip
    since, out = time.time(), tmp_path / "out"
    done = batch(sweep, out, "--jobs", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    plan = {("prefill", 64, 1), ("decode", 64, 1), ("decode", 64, 2)}
    for label in ("a", "b"):
        assert state(out)["variants"][label]["state"] == "done"
        measured = records(out / label)
        assert {key(m): m["status"] for m in measured} == dict.fromkeys(plan, "Valid"), measured
        for m in measured:
            assert not m["error"], m
            if m["phase"] == "decode":
                assert_server_agrees(m)
    (a0, a1), (b0, b1) = completion_span(one, since), completion_span(two, since)
    overlap = min(a1, b1) - max(a0, b0)
    assert overlap > 0.5 * min(a1 - a0, b1 - b0), ((a0, a1), (b0, b1))  # both servers were measured at once
    assert check_folder(out) == []  # batch.json and both variants' folders, whole


def ipc_sockets(process: psutil.Process) -> list[str]:
    """The IPC socket files a kernel has bound (toolkit.jupyter.kernels names them toolkit-kernel-*-ipc-N)."""
    try:
        return [c.laddr for c in process.net_connections(kind="unix") if "toolkit-kernel-" in c.laddr]
    except psutil.NoSuchProcess:
        return []


def test_a_failed_variant_and_a_kill_9_mid_variant_then_resume(
    servers: tuple[FaultServer, FaultServer], tmp_path: Path
) -> None:
    """A variant whose server is gone is recorded failed and the batch goes on; the batch is then killed (SIGKILL)
    in the next variant, and --resume finishes it: the done variant kept, the killed one continued, the last run,
    the gone one failed again, and the three that ran compared.

    One batch for both stories (they were two tests, 37-70 s and 72-110 s here): the failed variant's assertions
    are those of the old test_a_failed_variant_is_recorded_and_the_batch_goes_on, checked after the resume."""
    from tests.faultserver import closed_port

    server = servers[0]
    gone = f"http://127.0.0.1:{closed_port()}"
    variants = [{"label": "a"}, {"label": "gone", "base_url": gone}, {"label": "b"}, {"label": "c"}]
    # 2 s windows, not tiny_params' 0.5 s: the killed cell must outlast its kernel's notice that the batch is gone
    # (ipykernel's parent poller looks once a second), or it ends and is recorded before the kernel exits. With 1 s
    # the stalled cell was recorded 1.3 s after the stall's first hit on a quiet machine, and once in a busy make
    # test before its kernel exited; with 2 s, 5.0 s after it.
    sweep = sweep_file(tmp_path, variants, base_url=server.base_url, duration_s=2.0)
    out = tmp_path / "out"
    log = (tmp_path / "first.log").open("wb")
    proc = subprocess.Popen(batch_cmd(sweep, out), cwd=REPO, env=env(), stdout=log, stderr=subprocess.STDOUT,
                            process_group=0)  # fmt: skip
    kernels: list[psutil.Process] = []

    def b_records() -> int:
        path = out / "b" / RESULTS_FILE
        return path.read_bytes().count(b"\n") if path.exists() else 0

    def wait_until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not done():
            time.sleep(0.02)

    try:
        # b's prefill notebook writes prefill 64, its decode notebook then 64 × 1: kill in 64 × 2. Its streams
        # stall once b has begun (a is done then), so 64 × 2 cannot end before the kill however slow this is.
        wait_until(lambda: b_records() >= 1)
        server.set_fault("stall", while_busy=True)
        wait_until(lambda: server.fault is not None and server.fault.hit > 0)
        assert proc.poll() is None, (tmp_path / "first.log").read_text()
        assert b_records() == 2, (tmp_path / "first.log").read_text()
        kernels = psutil.Process(proc.pid).children(recursive=True)
        sockets = [path for kernel in kernels for path in ipc_sockets(kernel)]
        os.killpg(proc.pid, signal.SIGKILL)  # the batch and its process group; kernels have groups of their own
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()
    _, alive = psutil.wait_procs(kernels, timeout=15)  # a kernel exits once its parent is gone
    assert alive == []
    assert sockets and [path for path in sockets if os.path.exists(path)] == []  # and takes its sockets with it
    first = state(out)
    assert first["variants"]["a"]["state"] == "done" and first["variants"]["b"]["state"] == "running"
    assert first["variants"]["gone"]["state"] == "failed"  # recorded, and the batch went on to b
    a_results, a_report = (out / "a" / RESULTS_FILE).read_bytes(), (out / "a" / "report.html").stat().st_mtime_ns
    raw = (out / "b" / RESULTS_FILE).read_bytes()
    before = [json.loads(x) for x in raw[: raw.rfind(b"\n") + 1].splitlines()]
    assert len(before) == 2 and not (out / "c").exists()

    server.clear_fault()
    done = batch(sweep, out, "--resume")
    assert done.returncode == 1, done.stderr[-3000:]  # gone failed again; the others are done
    assert (out / "a" / RESULTS_FILE).read_bytes() == a_results  # the first variant is not measured again
    assert (out / "a" / "report.html").stat().st_mtime_ns == a_report
    after = records(out / "b")
    assert after[: len(before)] == before  # b's finished records kept as they were
    redone = [key(r) for r in after[len(before) :]]
    assert not set(redone) & {key(r) for r in before}  # no finished cell measured again
    plan = {("prefill", 64, 1), ("decode", 64, 1), ("decode", 64, 2)}
    assert {key(r) for r in after} == plan and len(after) == len(plan)
    assert len({r["run_id"] for r in after}) == 1  # the same run, continued
    assert {key(r) for r in records(out / "c")} == plan
    final = state(out)
    assert {label: v["state"] for label, v in final["variants"].items()} == {
        "a": "done", "gone": "failed", "b": "done", "c": "done"}  # fmt: skip
    assert final["variants"]["a"]["started_at"] == first["variants"]["a"]["started_at"]  # skipped, not rerun
    assert final["variants"]["b"]["resumed"] is True and final["variants"]["c"]["resumed"] is False
    error = final["variants"]["gone"]["error"]
    assert "\n" not in error and gone in error, error
    assert (out / "gone" / "error.txt").exists()
    index = (out / "index.md").read_text()
    for label in "abc":
        assert f"[{label}]({label}/report.md) | done" in index
    assert "| gone | failed" in index and error in index
    assert "compare/compare.md" in index  # the three that ran are compared
    assert (out / "compare" / "compare.html").exists()
    compare = (out / "compare" / "compare.md").read_text()
    assert "gone" not in compare and all(f"| {label} |" in compare for label in "abc")


def test_ray_without_ray_installed_says_how_to_install_it(
    servers: tuple[FaultServer, FaultServer], tmp_path: Path
) -> None:
    server = servers[0]
    sweep = sweep_file(tmp_path, [{"label": "a"}], base_url=server.base_url)
    args = ["batch", str(sweep), "--out", str(tmp_path / "out"), "--ray", "127.0.0.1:1"]
    hide_ray = f"import sys; sys.modules['ray'] = None; from toolkit.cli import main; sys.exit(main({args!r}))"
    done = subprocess.run([sys.executable, "-c", hide_ray], cwd=REPO, env=env(), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: --ray: Ray is not installed; install it with "
                                   "`.venv/bin/pip install -e '.[ray]'` (ray>=2.9)")  # fmt: skip
    assert server.log == []


def test_an_interleaved_batch_alternates_its_rounds_and_compares_them_paired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two configurations in 2 interleaved rounds (slow fast, fast slow): four run folders measured in that order,
    and the comparison is the paired report of fast against slow, summed up in the index."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    with FaultServer(token_interval_s=0.02) as slow, FaultServer(token_interval_s=0.012) as fast:
        sides = [{"label": "slow", "base_url": slow.base_url}, {"label": "fast", "base_url": fast.base_url}]
        sweep = sweep_file(tmp_path, sides, interleave=2, concurrency=[1])
        out = tmp_path / "out"
        done = batch(sweep, out)
    assert done.returncode == 0, done.stderr[-2000:]
    variants = state(out)["variants"]
    order = sorted(variants, key=lambda label: variants[label]["started_at"])
    assert order == ["slow-round1", "fast-round1", "fast-round2", "slow-round2"]
    assert all(variants[label]["state"] == "done" for label in order)
    table = (out / "compare" / "fast-vs-slow.csv").read_text()
    assert "total_tok_s_ratio" in table
    report = (out / "compare" / "fast-vs-slow.md").read_text()
    assert report.startswith("# Interleaved comparison: fast / slow") and "2 rounds measured in alternating" in report
    index = (out / "index.md").read_text()
    assert (
        "- [fast-vs-slow.md](compare/fast-vs-slow.md): fast / slow over 2 interleaved rounds, paired: Total tok/s 1."
        in index
    )
    assert "(1 cell, detects ±" in index  # the smallest change these 2 rounds detect at 80 % power
    assert not (out / "compare" / "compare.md").exists()  # the paired report is the comparison
