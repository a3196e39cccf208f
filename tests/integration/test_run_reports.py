"""`toolkit run`: both notebooks under papermill against the real vLLM, then the reports (issue 4)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import nbformat
import pandas as pd
import pytest
import yaml

from tests.conftest import TEST_API_KEY
from toolkit.cli import main
from toolkit.method.contexts import format_context
from toolkit.rates.files import read_steps
from toolkit.reports.number_format import format_ms, format_tok_s
from toolkit.results.run_document import RunDocument
from toolkit.servers.embedded.server import EmbeddedServer

SMALL_PARAMS = {
    "run_label": "nbtest",
    "contexts": ["256", "512"],
    "prefill_only_contexts": ["1K"],
    "concurrency": [1, 2],
    "duration_s": 2,
    "max_output": 512,
    # A budget that fits one request of either context but not two: the 2-stream cells are Over capacity.
    "kv_budget_tokens": 1500,
    "readiness_timeout_s": 30,
    "control_window_s": 1,  # the drift control's path, at a fifth of its default window
    "title": "notebook test",
    "launch_command": f"vllm serve tiny --api-key {TEST_API_KEY} --port 8000",
    # The rate sweep `toolkit run` measures after the matrix, into the same folder (rate_sweep.ipynb).
    "rate_sweep": {"rates": [2, 8], "arrival": "constant", "requests_per_step": 6, "input_tokens": 64,
                   "output_tokens": 16, "slo_ttft_ms": 2000},
}  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(vllm_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("run")
    params = tmp / "small.yaml"
    params.write_text(yaml.safe_dump(SMALL_PARAMS))
    out = tmp / "out"
    env = {"VLLM_API_KEY": TEST_API_KEY, "PATH": "/usr/bin:/bin", "HOME": str(tmp), "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "run", str(params), "--base-url", vllm_server.base_url, "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    (tmp / "run.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_notebooks_recorded_the_planned_measurements(run_dir: Path) -> None:
    frame = pd.read_csv(run_dir / "results.csv")
    got = {(r.phase, r.context_tokens, r.concurrency): r.status for r in frame.itertuples()}
    assert got == {
        ("prefill", 256, 1): "Valid", ("prefill", 512, 1): "Valid", ("prefill", 1024, 1): "Valid",
        ("decode", 256, 1): "Valid", ("decode", 512, 1): "Valid",
        ("decode", 256, 2): "Over capacity", ("decode", 512, 2): "Over capacity",
    }  # fmt: skip
    decode = frame[(frame.phase == "decode") & (frame.status == "Valid")]
    assert (decode.total_tok_s > 10).all()
    assert (decode.attempts >= 1).all() and (decode.client_tokens_max > 20).all()
    # The kernels run in this session, as the server does (no autogroup of their own): no pause disturbs them.
    assert decode.disturbed.isna().all(), decode[["context", "concurrency", "disturbed", "attempts"]]
    assert (decode.output_tokens > 20).all() and (decode.longest_silence_s <= 1.0).all()
    for nb in ("prefill", "decode_matrix", "report"):
        executed = nbformat.read(run_dir / f"{nb}.ipynb", as_version=4)
        assert not [o for c in executed.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]


def test_the_rate_sweep_block_is_measured_into_the_run_and_reported(run_dir: Path) -> None:
    steps = read_steps(run_dir)
    assert [r["offered_rate"] for r in steps] == [2.0, 8.0]
    for row in steps:
        assert row["completed"] == 6 and row["failed"] == 0 and row["client_generation_tokens"] == 6 * 16
        assert row["server_generation_tokens"] == row["client_generation_tokens"]  # the server's counters agree
    run = RunDocument.load(run_dir)  # the matrix's run.json, kept: the sweep measured the same server
    assert run.params is not None and run.params["contexts"] == [256, 512]
    executed = nbformat.read(run_dir / "rate_sweep.ipynb", as_version=4)
    assert not [o for c in executed.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    text = (run_dir / "report.md").read_text()
    assert "## Sustained decode" in text and "## Open-loop rates" in text
    assert "(rate-knee.png)" in text and (run_dir / "rate-knee.png").stat().st_size > 5000
    # Where the time went (issue 45): the launched vLLM gave every reply its own timing, drawn step by step.
    assert all(row["breakdown_basis"] == "per-request" and row["timing_mismatches"] == 0 for row in steps), steps
    assert "### Where the time goes" in text and "![rate-breakdown](rate-breakdown.png)" in text
    assert (run_dir / "rate-breakdown.png").stat().st_size > 5000


def test_markdown_matrix_holds_the_numbers_of_results_csv(run_dir: Path) -> None:
    frame = pd.read_csv(run_dir / "results.csv")
    text = (run_dir / "report.md").read_text()
    matrix = text.split("## Sustained decode", 1)[1].split("## All measurements", 1)[0]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in matrix.splitlines() if line.startswith("| ") and not line.startswith("| Context")}  # fmt: skip
    for r in frame[frame.phase == "decode"].itertuples():
        cell = rows[format_context(r.context_tokens)][[1, 2].index(r.concurrency)]
        if r.status == "Over capacity":
            assert cell == "Over capacity"
        else:
            assert format_tok_s(r.total_tok_s) in cell and format_ms(r.ttft_ms) in cell, (cell, r)
    for image in re.findall(r"\]\(([^)]+\.png)\)", text):
        assert (run_dir / image).stat().st_size > 5000


def test_outputs_never_contain_the_api_key(run_dir: Path) -> None:
    leaks = [p for p in run_dir.rglob("*") if p.is_file() and TEST_API_KEY.encode() in p.read_bytes()]
    assert leaks == []
    assert "--api-key <redacted>" in (run_dir / "report.md").read_text()
    log = (run_dir.parent / "run.log").read_text()
    assert TEST_API_KEY not in log


def test_the_run_folder_checks_clean(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`check`: every document parses, the records are the plan's cells, the traces are there, no key anywhere."""
    monkeypatch.setenv("VLLM_API_KEY", TEST_API_KEY)
    assert main(["check", str(run_dir), "--api-key-env", "VLLM_API_KEY"]) == 0
    assert capsys.readouterr().out == f"clean: {run_dir}\n"


def test_html_report_renders_in_headless_chromium(run_dir: Path, tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is needed (make test installs it as root)"
    html = (run_dir / "report.html").read_text()
    # Anything the page would fetch: src/href attributes, CSS url(), JS imports and URL strings in scripts.
    fetched = r"""(?:src|href)=["']https?://|url\(["']?https?://|import\s*\(?\s*["']https?://|=\s*["']https?://"""
    external = re.findall(fetched, html)
    assert external == [], "the report loads external assets"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]  # fmt: skip
    url = (run_dir / "report.html").resolve().as_uri()
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1200,2400", url],
                   capture_output=True, timeout=120, check=True)  # fmt: skip
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] >= 2000 and pixels.std() > 0.05, "screenshot is blank"
    dom = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert "Over capacity" in dom and "Sustained decode" in dom
    assert dom.count("<img") >= 3 and "data:image/png;base64" in dom
    assert '<h3 id="where-the-time-goes">Where the time goes</h3>' in html
    at = dom.index('id="where-the-time-goes"')
    assert dom.index("data:image/png;base64", at) > at  # the stacked figure follows its heading


def test_explore_notebook_on_a_demo_cell(run_dir: Path, tmp_path: Path) -> None:
    """The explore notebook's timeline of a measured cell holds its output_tokens and its measured_s."""
    from tests.component.test_traces_run import explore_check

    frame = pd.read_csv(run_dir / "results.csv")
    cell = frame[(frame.phase == "decode") & (frame.context_tokens == 256) & (frame.concurrency == 1)].iloc[0]
    check = explore_check(run_dir, "256", 1, tmp_path)
    assert check["output_tokens"] == (cell.output_tokens, cell.output_tokens) and cell.output_tokens > 20
    assert check["measured_s"][0] == pytest.approx(cell.measured_s, abs=1e-5)


def test_executed_notebook_renders_in_jupyterlab(run_dir: Path, tmp_path: Path) -> None:
    """A real JupyterLab (127.0.0.1, token set) shows the executed decode notebook in headless Chromium."""
    shot = tmp_path / "lab.png"
    done = subprocess.run([sys.executable, "scripts/screenshot_jupyterlab.py", str(run_dir / "decode_matrix.ipynb"),
                           "--out", str(shot)], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert matplotlib.image.imread(shot).shape[:2] == (1600, 1400)
