"""A server that misbehaves in every way we know (issue 28), against `matrix`, `rates`, `run`, `batch` and `compare`.

The fault server (tests/faultserver.py) echoes the key in long error bodies, whole, masked and cut; ends streams
in error events that quote it; keeps streams open with keep-alive comments or with events that carry no token;
reports more tokens than were asked for; serves a model id holding HTML and a terminal escape; and answers
`/metrics` with a gateway's own metrics. For keys of 12, 64 and 1,000 characters, no 8-character piece of the key
may show in any file written or any line printed; each misbehaviour costs only its cell or step, which says in
one line what the server did, and every command ends within its planned time plus the deadlines.
"""

from __future__ import annotations

import json
import os
import re
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.loadgen.client import reply_deadline_s

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "HOSTILE_TEST_KEY"
MODEL = "<img src=x onerror=alert(1)>\x1b[31m-model"  # HTML for the reports, an escape sequence for the terminal
READ_TIMEOUT_S = 2.0
MAX_OUTPUT = 4

pytestmark = [pytest.mark.process, pytest.mark.timeout(240)]


def make_key(length: int) -> str:
    """A key whose 8-character pieces are all distinct and found nowhere else in our outputs."""
    alphabet = string.ascii_letters + string.digits
    body = "".join(alphabet[(i * 7 + i // len(alphabet)) % len(alphabet)] for i in range(length - 4))
    return "sk-Q" + body


KEYS = {length: make_key(length) for length in (12, 64, 1000)}


def pieces(key: str) -> set[bytes]:
    return {key[i : i + 8].encode() for i in range(len(key) - 7)}


def leaks(key: str, done: subprocess.CompletedProcess[str], *roots: Path) -> list[str]:
    """Where a piece of `key` shows: stdout, stderr, or any file under `roots`."""
    found = set(pieces(key))
    printed = [name for name, text in (("stdout", done.stdout), ("stderr", done.stderr))
               if any(p in text.encode() for p in found)]  # fmt: skip
    files = [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]
    return printed + [str(p) for p in files if any(piece in p.read_bytes() for piece in found)]


def toolkit(keys: dict[str, str], *args: str | Path, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    """`python -m toolkit ARGS` with `keys` (variable -> key) in its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(KEY_ENV)}
    env |= {"PYTHONPATH": str(REPO), "MPLBACKEND": "Agg", **keys}
    cmd = [sys.executable, "-m", "toolkit", *map(str, args)]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


def no_escapes(done: subprocess.CompletedProcess[str], *roots: Path) -> None:
    """The model id's escape sequence is neither printed nor written (the progress bars' own cursor moves are)."""
    assert "\x1b[31m" not in done.stdout + done.stderr
    for path in (p for root in roots for p in root.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl")):
        assert b"\x1b" not in path.read_bytes() and b"\\u001b" not in path.read_bytes(), path


# kind -> (completion requests that pass first: 0 is the prefill's, 1 the decode cell's first; the error it leaves).
# The keep-alive and trickling streams go to the prefill: in a decode cell, the window's end cancels them first.
MISBEHAVIOURS = {
    "echo-500": (1, r"^HTTP 500: \.+ bad gateway for <redacted>; masked <redacted>; head <redacted>$"),
    "401": (1, "^HTTP 401: Incorrect API key provided: <redacted>"),
    "error-event": (1, "^server error in stream: engine failed for key <redacted>"),
    "keepalive": (0, f"^read timeout: no data for {READ_TIMEOUT_S:g} s$"),
    "trickle": (0, rf"^deadline: the reply went on past {reply_deadline_s(READ_TIMEOUT_S, 1):g} s"),
    "absurd-usage": (1, rf"usage.completion_tokens is {2**63 - 1}, more than the {MAX_OUTPUT} asked for"),
}
CASES = [
    (kind, length)
    for kind in MISBEHAVIOURS
    for length in KEYS
    if length == 64 or kind in ("echo-500", "401", "error-event")
]


@pytest.mark.parametrize(("kind", "length"), CASES)
def test_matrix_loses_only_the_cell_a_misbehaviour_hit(kind: str, length: int, tmp_path: Path) -> None:
    after, error = MISBEHAVIOURS[kind]
    key, out = KEYS[length], tmp_path / "out"
    with FaultServer(api_key=key, model=MODEL) as srv:
        srv.set_fault(kind, after=after, times=1)
        started = time.monotonic()
        done = toolkit({KEY_ENV: key}, "matrix", "--base-url", srv.base_url, "--contexts", "64", "--concurrency", "1",
                       "--duration", "0.5", "--max-output", str(MAX_OUTPUT), "--read-timeout", str(READ_TIMEOUT_S),
                       "--api-key-env", KEY_ENV, "--control-window", "0", "--out", out)  # fmt: skip
        took = time.monotonic() - started
        assert srv.fault is not None and srv.fault.hit == 1
    assert done.returncode == 0, done.stderr[-3000:]
    statuses = {(r["phase"], r["status"]) for r in records(out)}
    hit, spared = ("prefill", "decode") if after == 0 else ("decode", "prefill")
    assert statuses == {(hit, "Error"), (spared, "Valid")}, records(out)
    failed = next(r for r in records(out) if r["status"] == "Error")
    assert re.search(error, failed["error"]), failed
    assert [line for line in done.stdout.splitlines() if line.startswith(f"{hit} 64 ×1: ")] != []
    # planned: two half-second cells and start-up; plus at most one reply's deadline
    assert took < 30 + reply_deadline_s(READ_TIMEOUT_S, MAX_OUTPUT), took
    assert leaks(key, done, out) == []
    no_escapes(done, out)


@pytest.mark.parametrize("length", sorted(KEYS))
def test_rates_lose_only_the_requests_a_misbehaviour_hit(length: int, tmp_path: Path) -> None:
    key, out = KEYS[length], tmp_path / "out"
    with FaultServer(api_key=key, model=MODEL) as srv:
        srv.set_metrics_fault("gateway")
        params = tmp_path / "sweep.yaml"
        params.write_text(yaml.safe_dump({"base_url": srv.base_url, "rates": [4, 8], "duration_s": 1,
                                          "input_tokens": 32, "output_tokens": MAX_OUTPUT, "seed": 1,
                                          "read_timeout_s": READ_TIMEOUT_S, "api_key_env": KEY_ENV}))  # fmt: skip
        srv.set_fault("echo-500", after=1, times=2)
        started = time.monotonic()
        done = toolkit({KEY_ENV: key}, "rates", "--params", params, "--out", out)
        took = time.monotonic() - started
        assert srv.fault is not None and srv.fault.hit == 2
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "rates" / "steps.jsonl").read_text().splitlines()]
    assert [s["offered_rate"] for s in steps] == [4, 8] and sum(s["failed"] for s in steps) == 2, steps
    assert all(s["completed"] > 0 for s in steps), steps
    said = [line for line in (done.stdout + done.stderr).splitlines() if " failed; the first: HTTP 500: " in line]
    assert said and all("bad gateway for <redacted>" in line for line in said), done.stderr
    assert took < 40, took
    assert leaks(key, done, out) == []
    no_escapes(done, out)


def params_file(tmp_path: Path, srv: FaultServer, **values: Any) -> Path:
    common = tiny_params(base_url=srv.base_url, duration_s=0.5, max_output=MAX_OUTPUT, read_timeout_s=READ_TIMEOUT_S,
                         api_key_env=KEY_ENV, title=MODEL)  # fmt: skip
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(common | values, sort_keys=False))
    return path


def inert_markdown(*paths: Path, shown: bool = True) -> None:
    """No raw tag in these Markdown files; with `shown`, the model id and title are there, escaped."""
    for path in paths:
        text = path.read_text()
        assert "<img" not in text, path
        assert not shown or "&lt;img src=x onerror=alert(1)&gt;" in text, path


def launch_command(key: str) -> str:
    """A published launch command holding the key under every secret spelling (shown redacted in reports)."""
    return f"HF_TOKEN={key} VLLM_API_KEY={key} vllm serve m --api_key {key} --api-ke={key} --hf-token {key}"


LAUNCH_SHOWN = ("HF_TOKEN=<redacted> VLLM_API_KEY=<redacted> vllm serve m --api_key <redacted> "
                "--api-ke=<redacted> --hf-token <redacted>")  # fmt: skip


def test_run_with_a_1000_character_key_ending_in_cr_behind_a_gateway(tmp_path: Path) -> None:
    """The key as a CRLF `.env` file leaves it (stripped and used); the launch command names it five ways."""
    key, out = KEYS[1000], tmp_path / "out"
    with FaultServer(api_key=key, model=MODEL) as srv:
        srv.set_metrics_fault("gateway")
        srv.set_fault("echo-500", times=1)  # the prefill's request
        path = params_file(tmp_path, srv, launch_command=launch_command(key))
        done = toolkit({KEY_ENV: key + "\r"}, "run", path, "--out", out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert {(r["phase"], r["status"]) for r in records(out)} == {("prefill", "Error"), ("decode", "Valid")}
    assert "prefill 64 ×1: HTTP 500: " in done.stdout + done.stderr
    report = (out / "report.md").read_text()
    assert "Server-side figures were not available" in report and "gateway_requests_total" in report
    assert LAUNCH_SHOWN in report
    assert {"run.json", "report.md", "report.html", "prefill.ipynb", "decode_matrix.ipynb"} <= {
        p.name for p in out.iterdir()
    }
    inert_markdown(out / "report.md")
    assert leaks(key, done, out) == []
    no_escapes(done, out)


def test_batch_and_compare_with_keys_of_12_and_64_characters(tmp_path: Path) -> None:
    """Two variants, each with its own key, one ending in a space (`echo` into a secret), one in a CR; the server
    checks none and echoes the one presented. Then the index, the batch's comparison and `toolkit compare`."""
    out = tmp_path / "batch"
    keys = {KEY_ENV: KEYS[12] + " ", f"{KEY_ENV}_LONG": KEYS[64] + "\r"}
    with FaultServer(model=MODEL) as srv:
        srv.set_metrics_fault("gateway")
        srv.set_fault("echo-500", after=1)  # every request after short's prefill
        variants = [{"label": "short", "api_key_env": KEY_ENV}, {"label": "long", "api_key_env": f"{KEY_ENV}_LONG"}]
        path = params_file(tmp_path, srv, variants=variants, launch_command=launch_command(KEYS[64]))
        done = toolkit(keys, "batch", path, "--out", out)
        compared = toolkit(keys, "compare", out / "short", out / "long", "--out", tmp_path / "cmp")
    assert done.returncode == 0, done.stderr[-3000:]
    assert compared.returncode == 0, compared.stderr[-3000:]
    assert {p.name for p in out.iterdir()} >= {"batch.json", "index.html", "index.md", "short", "long", "compare"}
    assert {(r["phase"], r["status"]) for r in records(out / "long")} == {("prefill", "Error"), ("decode", "Error")}
    assert all("HTTP 500: " in (out / label / "results.jsonl").read_text() for label in ("short", "long"))
    # The index and the comparisons name the variants, not the model (hostile labels: test_markdown_inert.py)
    inert_markdown(out / "index.md", out / "compare" / "compare.md", tmp_path / "cmp" / "compare.md", shown=False)
    inert_markdown(out / "short" / "report.md", out / "long" / "report.md")
    for key in (KEYS[12], KEYS[64]):
        assert leaks(key, done, out) == [] and leaks(key, compared, tmp_path / "cmp") == []
    no_escapes(done, out)
