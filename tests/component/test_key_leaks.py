"""The API key reaches no output (issue 19), through `toolkit matrix` against the fault server; `run` and `batch`
with such keys (and secret flags in `launch_command`): tests/component/test_hostile_server.py.

Keys read from a k8s secret made with `echo` or from a CRLF `.env` file end in `\\n` or `\\r`: they are stripped
and used, and the fault server echoes the key it was presented in its errors (a 401 body, an error event in the
stream) so that a leak through error text would show. A key holding a control character is refused in one line
before anything is written. Every command runs with HTTP(S)_PROXY pointing at a dead address: our traffic never
goes through a proxy from the environment. Secret flags in `server.command` are refused, in `launch_command`
redacted. Kept few and short: one context, one concurrency, half-second windows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.faultserver import MODEL, FaultServer, closed_port
from tests.tiny_params import tiny_params
from toolkit.loadgen.client import StreamClient, StreamResult, build_request
from toolkit.matrix.prometheus import MetricsSnapshot
from toolkit.matrix.runner import run_sync
from toolkit.matrix.server_api import ServerAPI
from toolkit.servers.embedded.server import free_port
from toolkit.servers.managed import ManagedServer

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-leak-DISTINCTIVE-4242"
NEEDLE = "DISTINCTIVE-4242"  # in every form of every key below: raw, escaped, URL-encoded
TRAILING = {"cr": KEY + "\r", "lf": KEY + "\n", "space": KEY + " "}
CONTROL = "sk-leak-\x07" + NEEDLE
KEY_ENVS = {
    "cr": "LEAK_TEST_KEY_CR",
    "lf": "LEAK_TEST_KEY_LF",
    "space": "LEAK_TEST_KEY_SP",
    "control": "LEAK_TEST_KEY_BEL",
}
FLAGS = ("--api_key", "--api-ke", "--hf-token")

pytestmark = pytest.mark.timeout(240)


PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def env() -> dict[str, str]:
    """This environment with every test key set, and every proxy variable pointing at a closed port."""
    values = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    values["PYTHONPATH"] = str(REPO) + os.pathsep + values.get("PYTHONPATH", "")
    values["MPLBACKEND"] = "Agg"
    dead = f"http://127.0.0.1:{closed_port()}"
    values |= {name: dead for name in PROXY_VARIABLES}
    values |= {KEY_ENVS[name]: key for name, key in TRAILING.items()} | {KEY_ENVS["control"]: CONTROL}
    return values


def toolkit(*args: str | Path, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "toolkit", *map(str, args)]
    return subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=timeout)


def leaks(done: subprocess.CompletedProcess[str], *roots: Path) -> list[str]:
    """Where the key shows: stdout, stderr, any file under `roots`."""
    found = [name for name, text in (("stdout", done.stdout), ("stderr", done.stderr)) if NEEDLE in text]
    files = [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]
    return found + [str(p) for p in files if NEEDLE.encode() in p.read_bytes()]


def one_line_refusal(done: subprocess.CompletedProcess[str], pattern: str) -> None:
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {pattern}"), done.stderr


def params_file(tmp_path: Path, srv: FaultServer | None, **values: Any) -> Path:
    common = tiny_params(duration_s=0.5)
    if srv is not None:
        common["base_url"] = srv.base_url
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(common | values, sort_keys=False))
    return path


@pytest.mark.process
@pytest.mark.parametrize("which", sorted(TRAILING))
def test_matrix_with_a_key_ending_in_whitespace(which: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with FaultServer(api_key=KEY) as srv:
        srv.set_fault("401", after=1, times=1)  # the decode cell's request: its body echoes the key presented
        done = toolkit("matrix", "--base-url", srv.base_url, "--contexts", "64", "--concurrency", "1", "--duration",
                       "0.5", "--max-output", "8", "--api-key-env", KEY_ENVS[which], "--control-window", "0",
                       "--out", out)  # fmt: skip
        assert srv.fault is not None and srv.fault.hit == 1
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Error" in done.stdout and "HTTP 401" in (out / "results.jsonl").read_text()
    assert leaks(done, out) == []


@pytest.mark.process
@pytest.mark.parametrize("command", ["matrix", "run", "batch"])
def test_a_key_with_a_control_character_is_refused_in_one_line(command: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with FaultServer(api_key=CONTROL) as srv:
        if command == "matrix":
            done = toolkit("matrix", "--base-url", srv.base_url, "--api-key-env", KEY_ENVS["control"], "--out", out)
        else:
            extra = {"variants": [{"label": "a"}]} if command == "batch" else {}
            done = toolkit(command, params_file(tmp_path, srv, api_key_env=KEY_ENVS["control"], **extra), "--out", out)
        assert srv.log == []  # nothing was sent
    where = "variant a: " if command == "batch" else ""
    one_line_refusal(done, f"{where}api_key_env: {KEY_ENVS['control']} holds a control character 0x07; allowed: ")
    assert not out.exists()
    assert leaks(done, tmp_path) == []


@pytest.mark.process
@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("command", ["run", "batch"])
def test_a_secret_flag_in_server_command_is_refused_in_one_line(command: str, flag: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    server = {"command": f"{sys.executable} -m tests.fake_vllm --port {closed_port()} {flag} {KEY}"}
    extra: dict[str, Any] = {"variants": [{"label": "a"}]} if command == "batch" else {}
    done = toolkit(command, params_file(tmp_path, None, server=server, **extra), "--out", out)
    canonical = "--hf-token" if flag == "--hf-token" else "--api-key"
    where = "sweep: variant a: " if command == "batch" else ""
    one_line_refusal(done, f"{where}server.command: {canonical}, however spelled (_ for -, a prefix, =VALUE), has no")
    assert not out.exists()
    assert leaks(done, out) == []


@pytest.mark.process
def test_no_proxy_from_the_environment_sees_our_traffic(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`/v1/models`, `/metrics`, `/tokenize` and a launched server's `/health` go direct, like the streams."""
    for name, value in env().items():
        if name in PROXY_VARIABLES or name == "PYTHONPATH":
            monkeypatch.setenv(name, value)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    async def ask(api: ServerAPI) -> tuple[list[dict[str, Any]], MetricsSnapshot | None, int]:
        async with api:
            return await api.models(), await api.metrics_or_none(), await api.count_tokens(MODEL, "a b", chat=False)

    with FaultServer(api_key=KEY) as srv:
        models, metrics, count = run_sync(lambda: ask(ServerAPI(srv.base_url, api_key=KEY)))
    assert [m["id"] for m in models] == [MODEL] and metrics is not None and count == 10
    port = free_port()
    command = [sys.executable, "-m", "tests.fake_vllm", "--port", str(port)]
    with ManagedServer(command, base_url=f"http://127.0.0.1:{port}", env=dict(os.environ), log_path=tmp_path / "log",
                       health_timeout_s=20) as server:  # fmt: skip
        assert server.exit_code is None  # healthy: /health answered through no proxy


def test_an_error_event_in_a_stream_is_redacted() -> None:
    async def one(client: StreamClient) -> StreamResult:
        async with client:
            return await client.stream(*build_request("completions", MODEL, "a b c", 8))

    with FaultServer(api_key=KEY) as srv:
        srv.set_fault("error-event")
        result = run_sync(lambda: one(StreamClient(srv.base_url, api_key=KEY)))
    assert result.error == "server error in stream: engine failed for key <redacted>"
