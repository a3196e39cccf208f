"""Bad parameters: one line on stderr naming the parameter and what is allowed, a non-zero exit, no load.

Each case runs `python -m toolkit matrix` for real against the fault server, whose request log must show
that no completion request was sent: parameters are checked before anything is measured.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faultserver import FaultServer, closed_port
from toolkit.params import ParamsError, RunParams, load_params

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "FAULT_TEST_API_KEY"
KEY = "sk-test-params-0042"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    with FaultServer(max_model_len=4096) as srv:
        yield srv


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[FaultServer]:
    with FaultServer(max_model_len=4096, api_key=KEY) as srv:
        yield srv


def run_cli(base_url: str, out: Path, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop(KEY_ENV, None)
    if key is not None:
        env[KEY_ENV] = key
    cmd = [sys.executable, "-m", "toolkit", "matrix", "--base-url", base_url, "--out", str(out),
           "--api-key-env", KEY_ENV, "--duration", "1", "--max-output", "8", "--contexts", "64",
           "--control-window", "0.5", "--concurrency", "1", *args]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def assert_one_line_error(done: subprocess.CompletedProcess[str], parameter: str, allowed: str) -> str:
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith(f"error: {parameter}: "), line
    assert re.search(allowed, line), line
    return line


# (extra CLI arguments, the parameter named, what the message must say is allowed / wrong)
CASES = {
    "negative-duration": (["--duration", "-1"], "duration_s", r"greater than 0.*-1"),
    "zero-duration": (["--duration", "0"], "duration_s", r"greater than 0"),
    "zero-concurrency": (["--concurrency", "0"], "concurrency", r"allowed: integers >= 1"),
    "zero-in-concurrency-list": (["--concurrency", "1,0,2"], "concurrency", r"allowed: integers >= 1"),
    "zero-max-output": (["--max-output", "0"], "max_output", r"greater than 0"),
    "context-beyond-max-model-len": (
        ["--contexts", "64,4K"], "contexts",
        r"4K does not fit max_model_len 4,096 .*context \+ max_output \+ 64 <= max_model_len",
    ),
    "malformed-context-label": (["--contexts", "8Q"], "contexts", r"'8Q' is not a context; use .*\(8K\)"),
    "wrong-model": (["--model", "no-such-model"], "model", r"'no-such-model' is not served .*served: fault-model"),
    "label": (["--label", "a b"], "run_label", r"should match pattern"),
    # argparse's own checks, in the same one-line form
    "endpoint-choice": (
        ["--endpoint", "foo"], "--endpoint",
        r"invalid choice: 'foo' \(choose from 'chat', 'completions', 'embeddings'\)",
    ),
    "max-output-not-int": (["--max-output", "many"], "--max-output", r"invalid int value: 'many'"),
}  # fmt: skip


@pytest.mark.process
@pytest.mark.parametrize("case", list(CASES))
def test_bad_parameter_is_one_line_and_sends_no_load(case: str, server: FaultServer, tmp_path: Path) -> None:
    args, parameter, allowed = CASES[case]
    before = len(server.log)
    done = run_cli(server.base_url, tmp_path / "out", *args)
    assert_one_line_error(done, parameter, allowed)
    assert not [e for e in server.log[before:] if e["path"].startswith("/v1/") and e["method"] == "POST"]
    assert not (tmp_path / "out" / "results.jsonl").exists()
    assert not (tmp_path / "out" / "run.json").exists()


@pytest.mark.process
def test_unreachable_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    done = run_cli(url, tmp_path / "out")
    assert_one_line_error(done, "base_url", rf"cannot reach {re.escape(url)}/v1/models")
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_bad_url_scheme(tmp_path: Path) -> None:
    done = run_cli("127.0.0.1:8000", tmp_path / "out")
    assert_one_line_error(done, "base_url", r"not an http\(s\) URL; allowed: e\.g\. http://")


@pytest.mark.process
@pytest.mark.parametrize(
    ("key", "state"), [(None, "is unset"), ("sk-wrong-key", "holds a key the server refused")], ids=["unset", "wrong"]
)
def test_api_key_missing_or_wrong(key: str | None, state: str, keyed_server: FaultServer, tmp_path: Path) -> None:
    before = len(keyed_server.log)
    done = run_cli(keyed_server.base_url, tmp_path / "out", key=key)
    line = assert_one_line_error(done, "api_key_env", rf"401 Unauthorized and {KEY_ENV} {state}")
    assert "sk-wrong-key" not in done.stderr + done.stdout
    assert "allowed:" in line
    assert not [e for e in keyed_server.log[before:] if e["path"] in ("/v1/chat/completions", "/v1/completions")]
    # With the key the same command runs: the failure above was the key alone.
    done = run_cli(keyed_server.base_url, tmp_path / "ok", key=KEY)
    assert done.returncode == 0, done.stderr
    assert KEY not in done.stdout + done.stderr


# ---- YAML params files ---------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_yaml_unknown_key_is_named_with_the_allowed_ones(tmp_path: Path) -> None:
    path = write(tmp_path, "base_url: http://127.0.0.1:8000\ndurration_s: 5\n")
    with pytest.raises(ParamsError) as info:
        load_params(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("durration_s: unknown parameter; allowed: ")
    assert all(name in message for name in ("duration_s", "concurrency", "contexts", "api_key_env"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("duration_s: -3\n", r"^duration_s: .*greater than 0"),
        ("concurrency: [1, 0]\n", r"^concurrency: .*allowed: integers >= 1"),
        ("contexts: [8Q]\n", r"^contexts: '8Q' is not a context"),
        ("contexts: 8K, 8K\n", r"^contexts: .*listed twice"),
        ("endpoint: grpc\n", r"^endpoint: .*'chat', 'completions' or 'embeddings'"),
        ("- just\n- a list\n", r"^params file: .* must hold a mapping"),
        ("duration_s: [unclosed\n", r"^params file: .* is not valid YAML"),
        ("duration_s: .inf\n", r"^duration_s: Input should be a finite number \(got inf\)$"),
        ("read_timeout_s: .nan\n", r"^read_timeout_s: Input should be a finite number \(got nan\)$"),
        ("readiness_timeout_s: 1e300\n", r"^readiness_timeout_s: .*less than or equal to 86400"),
        ("concurrency: [1.5, true]\n", r"^concurrency: \[1\.5, True\] is not a list of integers"),
        ("concurrency: [1, 2.0]\n", r"^concurrency: .*is not a list of integers"),
        ("max_output: true\n", r"^max_output: is true or false; allowed: a number"),
        ("duration_s: true\n", r"^duration_s: is true or false; allowed: a number"),
        ("disturbed_retries: 1000000\n", r"^disturbed_retries: .*less than or equal to 10 "),
        (f"run_label: {'r' * 151}\n", r"^run_label: String should have at most 150 characters"),
        ("server: {command: x, health_timeout_s: .inf}\n", r"^server\.health_timeout_s: .*finite number"),
    ],
)
def test_yaml_bad_values_are_one_line(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ParamsError) as info:
        load_params(write(tmp_path, text))
    assert "\n" not in str(info.value)
    assert re.search(expected, str(info.value)), str(info.value)


def test_yaml_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match=r"^params file: cannot read .*nope\.yaml"):
        load_params(tmp_path / "nope.yaml")


def test_yaml_overrides_win_and_good_file_loads(tmp_path: Path) -> None:
    params = load_params(write(tmp_path, "contexts: [1K, 2048]\nconcurrency: '4,1,2'\nduration_s: 5\n"), duration_s=2)
    assert isinstance(params, RunParams)
    assert params.contexts == [1024, 2048] and params.concurrency == [1, 2, 4] and params.duration_s == 2


@pytest.mark.process
def test_an_unwritable_out_folder_is_one_line_before_any_load(server: FaultServer, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    before = len(server.log)
    done = run_cli(server.base_url, tmp_path / "file" / "out")
    assert_one_line_error(done, "out", r"/file/out is not writable: Not a directory$")
    assert not [e for e in server.log[before:] if e["path"].startswith("/v1/") and e["method"] == "POST"]
