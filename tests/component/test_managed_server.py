"""Managed servers through `python -m toolkit run` with a `server:` block, the fault server standing in for vLLM.

The toolkit launches the server (tests/fake_vllm.py) in a process group of its own, waits for /health, runs
both notebooks against it and stops it: on success, on errors, on Ctrl-C and SIGTERM. Bad blocks fail with one
line and leave nothing running. A server killed mid-cell makes that cell an Error that names the exit and shows
the log tail; `--resume` launches it again and completes the run. The real vLLM: tests/integration.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import nbformat
import psutil
import pytest
import yaml

from tests.fake_vllm import BANNER, DIST_STORE
from tests.faultserver import FaultServer
from tests.processes import assert_group_gone
from tests.tiny_params import tiny_params
from toolkit.base.folder_lock import LOCK_FILE
from toolkit.jupyter.execute import declared_parameters
from toolkit.results.local_paths import public_paths
from toolkit.results.run_document import RunDocument
from toolkit.results.store import RESULTS_FILE, RUN_FILE
from toolkit.servers.embedded.server import free_port
from toolkit.servers.gpu import NO_TELEMETRY
from toolkit.servers.launch import LAUNCH_FILE
from toolkit.servers.managed import ManagedServer, has_live_member

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "MANAGED_TEST_KEY"
SECRET = "sk-managed-DISTINCTIVE-7731"
RAN = ("Valid", "Requests queued")

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


def fake_params(port: int, **overrides: Any) -> dict[str, Any]:
    values = tiny_params(
        base_url=f"http://127.0.0.1:{port}", concurrency=[1, 2], api_key_env=KEY_ENV, control_window_s=0.5,
        server={"command": [sys.executable, "-m", "tests.fake_vllm", "--port", str(port)],
                "env": {"FAKE_VLLM_SETTING": "on"}, "health_timeout_s": 30},
    )  # fmt: skip
    values.update(overrides)
    return values


def toolkit_run(tmp_path: Path, params: dict[str, Any], out: Path, *extra: str) -> list[str]:
    path = tmp_path / f"params-{len(list(tmp_path.glob('params-*')))}.yaml"
    path.write_text(yaml.safe_dump(params))
    return [sys.executable, "-m", "toolkit", "run", str(path), "--out", str(out), *extra]


def env(key: str | None = SECRET) -> dict[str, str]:
    values = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    values["PYTHONPATH"] = str(REPO) + os.pathsep + values.get("PYTHONPATH", "")
    values["MPLBACKEND"] = "Agg"
    return values | ({KEY_ENV: key} if key else {})


def run(cmd: list[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=timeout)


def record(out: Path) -> dict[str, Any]:
    return json.loads((out / LAUNCH_FILE).read_text())


def results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]


def key(r: dict[str, Any]) -> tuple[str, int, int]:
    return (r["phase"], r["context_tokens"], r["concurrency"])


# A proxy's, an index's and a hub's credentials in the server's environment, and a header on its command line.
CREDENTIALS = {"HTTPS_PROXY": "http://user:proxypass-2931@127.0.0.1:9", "PIP_INDEX_URL": "https://u:idxtok-5521@127.0.0.1/s",
               "HF_ENDPOINT": "http://127.0.0.1:9/?token=hubtok-7741"}  # fmt: skip
HEADER = "Authorization: Bearer hdrtok-3313abcd"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under folder, by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line_error(done: subprocess.CompletedProcess[str], code: int, prefix: str) -> str:
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {prefix}"), done.stderr
    return lines[0]


def test_an_unknown_key_in_the_block_is_one_line(tmp_path: Path) -> None:
    params = fake_params(free_port())
    params["server"]["health_timeout"] = 5
    line = _one_line_error(run(toolkit_run(tmp_path, params, tmp_path / "out")), 2, "server.health_timeout: ")
    assert line.endswith("unknown parameter; allowed: command, env, health_timeout_s, log_file; did you mean "
                         "health_timeout_s?")  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_a_command_not_found_is_one_line(tmp_path: Path) -> None:
    params = fake_params(free_port())
    params["server"]["command"] = "no-such-vllm-binary serve m"
    line = _one_line_error(run(toolkit_run(tmp_path, params, tmp_path / "out")), 2, "server.command: ")
    assert "'no-such-vllm-binary' not found" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["never-healthy", "exits"])
def test_a_server_that_never_becomes_healthy_fails_and_leaves_nothing(tmp_path: Path, kind: str) -> None:
    pid_file = tmp_path / "server.pid"
    script = {"never-healthy": f"echo $$ > {pid_file}; sleep 60 & sleep 60",  # a child in the group too
              "exits": f"echo $$ > {pid_file}; echo 'fatal: no GPU found' ; exit 3"}[kind]  # fmt: skip
    params = fake_params(free_port())
    params["server"].update(command=["sh", "-c", script], health_timeout_s=3)
    started = time.monotonic()
    done = run(toolkit_run(tmp_path, params, tmp_path / "out"))
    if kind == "never-healthy":
        line = _one_line_error(done, 1, "server.health_timeout_s: the server did not answer ")
        assert "/health within 3 s" in line and time.monotonic() - started < 30
    else:
        line = _one_line_error(done, 1, "server.command: the server exited with code 3 before answering /health")
        assert "last log line: fatal: no GPU found" in line
    assert f"(log: {tmp_path / 'out' / 'server.log'})" in line
    assert_group_gone(int(pid_file.read_text()))


def test_a_port_another_server_answers_is_refused_and_nothing_measured(tmp_path: Path) -> None:
    """An old server still on the port would answer the first /health poll and be measured in the new one's name."""
    with FaultServer() as old:
        done = run(toolkit_run(tmp_path, fake_params(old.port), tmp_path / "out"))
        line = _one_line_error(done, 1, f"base_url: port {old.port} is already listened on by pid {os.getpid()}")
        assert line.endswith("another server runs there; stop it or choose another port")
        assert old.completion_requests() == []
    assert not (tmp_path / "out").exists()  # nothing launched, nothing written


def test_a_server_that_leaves_the_launched_group_is_refused(tmp_path: Path) -> None:
    """The listener must be in the launched process group: a wrapper that detaches the server is refused."""
    port = free_port()
    detach = ("import os, sys\nif os.fork() == 0:\n    os.setsid()\n"
              "    os.execv(sys.executable, [sys.executable, '-m', 'tests.fake_vllm', '--port', sys.argv[1]])\n"
              "os.wait()")  # fmt: skip
    params = fake_params(port)
    params["server"]["command"] = [sys.executable, "-c", detach, str(port)]
    done = run(toolkit_run(tmp_path, params, tmp_path / "out"))
    pids = psutil.net_connections(kind="tcp")
    detached = next(c.pid for c in pids if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid)
    try:
        line = _one_line_error(done, 1, f"base_url: pid {detached} answers at http://127.0.0.1:{port}, outside the "
                                        "server's process group")  # fmt: skip
        assert line.endswith("(it must exec the server); stop it or choose another port")
        assert not (tmp_path / "out" / RESULTS_FILE).exists()
    finally:
        os.kill(detached, signal.SIGKILL)


def _wait_for(predicate: Any, timeout_s: float, proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert proc.poll() is None, f"toolkit run ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _completions(base_url: str) -> int:
    try:
        log = httpx.get(base_url + "/_log", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return 0
    return sum(1 for e in log if e["path"] == "/v1/chat/completions" and e["method"] == "POST")  # not the GET


def test_a_launched_server_killed_mid_cell_is_an_error_and_resume_launches_it_again_and_completes(
    tmp_path: Path,
) -> None:
    """A launch, a kill, a resume and the reports in one run (issue 41: each run here costs three kernels): the
    server killed mid-cell makes that cell an Error naming the exit; `--resume` launches it again, completes the
    run and stops it; the launch command is shown with every credential redacted, in run.json and both reports;
    a resume with another command is refused. (Was two tests: this one and test_run_launches_measures_and_stops_
    the_server, whose assertions follow the resume; its decode cells there were Valid, here Valid or queued.)"""
    port, out = free_port(), tmp_path / "out"
    params = fake_params(port, duration_s=2)
    params["server"]["env"] |= CREDENTIALS
    params["server"]["command"] += ["-H", HEADER]
    base_url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen(toolkit_run(tmp_path, params, out), cwd=REPO, env=env(), stdout=log, stderr=log,
                            text=True)  # fmt: skip
    try:
        # Request 1 is the prefill; from the 3rd on, cell 64 × 1 is re-issuing inside its 2 s window.
        _wait_for(lambda: _completions(base_url) >= 3, 120, proc, "the first decode cell")
        pgid = record(out)["pid"]
        os.killpg(pgid, signal.SIGKILL)  # the whole server, no goodbye
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    first_log = (tmp_path / "first.log").read_text()
    assert proc.returncode == 1, first_log[-3000:]
    assert "error: the server was killed by SIGKILL (exit -9) during the run" in first_log
    by_key = {key(r): r for r in results(out)}
    assert by_key[("prefill", 64, 1)]["status"] == "Valid"
    killed = by_key[("decode", 64, 1)]
    assert killed["status"] == "Error" and killed["total_tok_s"] is None
    assert "the server was killed by SIGKILL (exit -9); last lines of its log:" in killed["error"]
    assert BANNER in killed["error"]  # the log tail
    assert by_key[("decode", 64, 2)]["status"] == "Error"  # the run went on, cell by cell
    assert (out / "report.md").exists()  # and wrote its reports
    assert_group_gone(pgid)

    done = run(toolkit_run(tmp_path, params, out, "--resume"))
    assert done.returncode == 0, done.stderr[-3000:]
    relaunched = record(out)
    assert relaunched["pid"] != pgid and relaunched["exit_code"] is None
    assert_group_gone(relaunched["pid"])
    final = {key(r): r for r in results(out)}  # the latest record of each cell
    assert final[("prefill", 64, 1)] == by_key[("prefill", 64, 1)]  # not redone
    assert all(final[("decode", 64, n)]["status"] in RAN for n in (1, 2)), final
    assert (out / "server.log").read_text().count(BANNER) == 2  # one log, both launches
    assert_launched_run_shown_redacted(out, params, done, first_log)


def assert_launched_run_shown_redacted(
    out: Path, params: dict[str, Any], done: subprocess.CompletedProcess[str], first_log: str
) -> None:
    """The relaunched server stopped in its own group; its command shown redacted in launch.json, run.json and
    both reports; each notebook clean; no secret anywhere in the folder or either run's output; the lock gone; a
    resume with another command refused, leaving the folder as it was."""
    launched = record(out)
    assert launched["exit_code"] is None and launched["stopped_at"] and launched["pid"]
    assert os.getpgid(0) != launched["pid"]
    python = public_paths(sys.executable)  # .venv/bin/python when the virtualenv is inside the checkout
    shown = ("VLLM_API_KEY=<redacted> FAKE_VLLM_SETTING=on HF_ENDPOINT='http://127.0.0.1:9/?token=<redacted>' "
             "HTTPS_PROXY=http://<redacted>@127.0.0.1:9 PIP_INDEX_URL=https://<redacted>@127.0.0.1/s "
             f"{python} -m tests.fake_vllm --port {launched['base_url'].rsplit(':', 1)[1]} "
             "-H 'Authorization: Bearer <redacted>'")  # fmt: skip
    assert launched["command"] == shown
    run_json = json.loads((out / RUN_FILE).read_text())
    assert run_json["launch_command"] == shown and run_json["launch"]["launched_by_toolkit"] is True
    assert "run" not in run_json  # display strings are computed when shown, not stored
    assert RunDocument.load(out).run_block()["Server"] == "launched by the toolkit"
    assert f"```\n{shown}\n```" in (out / "report.md").read_text()
    assert (
        shown in html.unescape((out / "report.html").read_text())
        and "<redacted>" not in (out / "report.html").read_text()
    )
    for name in ("prefill", "decode_matrix", "report"):  # each notebook ran clean, given only its own parameters
        executed = nbformat.read(out / f"{name}.ipynb", as_version=4)
        assert not [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
        assert set(executed.metadata.papermill.parameters) <= declared_parameters(name)
    assert set(nbformat.read(out / "report.ipynb", as_version=4).metadata.papermill.parameters) == {"RESULTS_DIR"}
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count("<img") == 3 and "Sustained decode" in page and "Extras" in page
    assert done.stderr.count(NO_TELEMETRY) == 1, done.stderr[-3000:]
    secrets = [SECRET, "proxypass-2931", "idxtok-5521", "hubtok-7741", "hdrtok-3313abcd"]
    leaks = [(p, s) for p in out.rglob("*") if p.is_file() for s in secrets if s.encode() in p.read_bytes()]
    assert leaks == [] and not [s for s in secrets if s in done.stdout + done.stderr + first_log]
    assert not (out / LOCK_FILE).exists()  # the folder's lock goes with the run

    # --resume with another server command: refused before the launch, the run left exactly as it was
    before = snapshot(out)
    other = params | {"server": params["server"] | {"env": {"FAKE_VLLM_SETTING": "off"}}}
    line = _one_line_error(
        run(toolkit_run(out.parent, other, out, "--resume")), 2, "resume: this launch is not the one"
    )
    assert '(launch command: "VLLM_API_KEY=<redacted> FAKE_VLLM_SETTING=on ' in line, line  # repr: it holds quotes
    assert snapshot(out) == before


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_ctrl_c_or_sigterm_stops_the_server(tmp_path: Path, sig: signal.Signals) -> None:
    port, out = free_port(), tmp_path / "out"
    params = fake_params(port, duration_s=30)
    proc = subprocess.Popen(toolkit_run(tmp_path, params, out), cwd=REPO, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        _wait_for(lambda: _completions(f"http://127.0.0.1:{port}") >= 2, 120, proc, "the decode cells")
        pgid = record(out)["pid"]
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=150)  # the kernel is shut down first (interrupt, then TERM, KILL)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, output[-3000:]
    assert "interrupted: finished measurements are kept" in output
    assert_group_gone(pgid)
    assert record(out)["stopped_at"]


LAUNCHER = """
import os, sys, time
from pathlib import Path
from toolkit.servers.managed import ManagedServer
port = int(sys.argv[1])
server = ManagedServer([sys.executable, "-m", "tests.fake_vllm", "--port", str(port)],
                       base_url=f"http://127.0.0.1:{port}", env=dict(os.environ), log_path=Path(sys.argv[2]))
print(server.start().pid, flush=True)
time.sleep(300)
"""


def test_a_launcher_killed_by_sigkill_takes_its_server_down_with_it(tmp_path: Path) -> None:
    """No goodbye, no `stop()`: the kernel's parent-death signal stops the server all the same."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(free_port()), str(tmp_path / "server.log")],
                                cwd=REPO, env=env(), stdout=subprocess.PIPE, text=True)  # fmt: skip
    pgid = sockets = None
    try:
        pgid = _server_group(launcher)
        assert has_live_member(pgid)
        sockets = psutil.Process(pgid).environ()["VLLM_RPC_BASE_PATH"]  # a killed launcher cannot remove it
        launcher.kill()
        launcher.wait(10)
        assert_group_gone(pgid, timeout_s=10)
    finally:
        _reap(launcher, pgid)
        if sockets is not None:
            shutil.rmtree(sockets, ignore_errors=True)


def _server_group(launcher: subprocess.Popen[str]) -> int:
    """The process group of the server a launcher script started (its first line of output)."""
    assert launcher.stdout is not None
    line = launcher.stdout.readline()
    assert line.strip().isdigit(), f"the launcher did not start the server: {line!r}"
    return int(line)


def _reap(launcher: subprocess.Popen[str], pgid: int | None) -> None:
    """End a launcher test's processes, whatever the test left running (not for the next test)."""
    if launcher.poll() is None:
        launcher.kill()
        launcher.wait(10)
    if launcher.stdout is not None:
        launcher.stdout.close()
    if pgid is not None and has_live_member(pgid):
        os.killpg(pgid, signal.SIGKILL)


STOPPING = """
import sys, time
from pathlib import Path
from toolkit.servers.launch import launched_server
from toolkit.params import load_run_file
params, spec = load_run_file(sys.argv[1])
with launched_server(spec, params, Path(sys.argv[2]), None) as server:
    print(server.pid, flush=True)
    time.sleep(300)
"""


@pytest.mark.parametrize(
    ("first", "second"),
    [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGINT), (signal.SIGHUP, signal.SIGTERM)],
)
def test_a_second_signal_while_the_server_stops_kills_its_group(
    tmp_path: Path, first: signal.Signals, second: signal.Signals
) -> None:
    """The server ignores SIGTERM: a second signal must not end the wait by leaving it running, but SIGKILL it."""
    params = fake_params(free_port())
    params["server"]["command"] += ["--ignore-sigterm"]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    out = tmp_path / "out"
    launcher = subprocess.Popen([sys.executable, "-c", STOPPING, str(path), str(out)], cwd=REPO, env=env(),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    pgid = None
    try:
        pgid = _server_group(launcher)
        launcher.send_signal(first)
        _wait_for(lambda: "SIGTERM ignored" in (out / "server.log").read_text(), 10, launcher, "the server's SIGTERM")
        asked = time.monotonic()
        launcher.send_signal(second)
        assert_group_gone(pgid, timeout_s=10)  # SIGKILL at once, not after the 20 s SIGTERM wait
        killed_s = time.monotonic() - asked
        # then the launcher records the stop (fsynced files: seconds on a busy disk; a fresh clone's .ci/run
        # once took past 15 s from the signal to the launcher's exit) and ends
        launcher.wait(60)
        assert killed_s < 10 and record(out)["stopped_at"]
    finally:
        _reap(launcher, pgid)


def fake_server(port: int, log_path: Path, **env_overrides: str) -> ManagedServer:
    command = [sys.executable, "-m", "tests.fake_vllm", "--port", str(port)]
    return ManagedServer(command, base_url=f"http://127.0.0.1:{port}", env=env() | env_overrides, log_path=log_path,
                         health_timeout_s=30, name="fake vLLM")  # fmt: skip


def test_a_launch_has_its_own_socket_and_temporary_folder_removed_when_it_stops(tmp_path: Path) -> None:
    """vLLM leaves its ZMQ sockets (three a launch) and its torch.distributed file store (`vllm_dist_<hex>`) in the
    temporary folder when it stops: each launch gets a folder of its own as both (VLLM_RPC_BASE_PATH and TMPDIR),
    removed with the server."""
    with fake_server(free_port(), tmp_path / "server.log") as server:
        folder = server.launch_tmp
        assert folder is not None
        left = sorted(folder.iterdir(), key=lambda p: p.is_socket())
        assert [(p.name.startswith(DIST_STORE), p.is_socket()) for p in left] == [(True, False), (False, True)]
    assert server.launch_tmp is None and not folder.exists()


def test_a_socket_folder_the_environment_names_is_used_and_kept(tmp_path: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="sockets-") as name:  # short: a socket's path has at most 107 bytes
        mine = Path(name)
        with fake_server(free_port(), tmp_path / "server.log", VLLM_RPC_BASE_PATH=name, TMPDIR=name) as server:
            assert server.launch_tmp is None and len(list(mine.iterdir())) == 2  # its socket and its file store
        assert len(list(mine.iterdir())) == 2  # the caller's folder and what the server left in it


def test_where_a_socket_path_would_be_too_long_vllms_default_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long = tmp_path / ("long-" * 20)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    with fake_server(free_port(), tmp_path / "server.log", TMPDIR=str(long)) as server:
        assert server.launch_tmp is None
    assert [p.name.startswith(DIST_STORE) for p in long.iterdir()] == [True]  # its own folder gone, vLLM's file left
