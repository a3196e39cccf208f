"""`python -m toolkit compare`: papermill runs notebooks/compare.ipynb over run folders, then compare.html and .md.

On the two imported reference reports and on two small runs against the fault-injecting test server; on two
tiny runs against the real embedded vLLM in tests/integration/test_compare_vllm.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit import cli
from toolkit.base.schema import Measurement
from toolkit.jupyter.execute import execute_path
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.reports import compare

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "reference-reports"
NOTEBOOK = REPO / "notebooks" / "compare.ipynb"

pytestmark = [pytest.mark.process, pytest.mark.timeout(600)]


def run_compare(run_dirs: list[Path], out: Path, labels: str | None = None) -> str:
    """The compare command; returns compare.md after checking the other outputs exist and hold no errors."""
    argv = ["compare", *map(str, run_dirs), "--out", str(out)] + (["--labels", labels] if labels else [])
    assert cli.main(argv) == 0
    executed = nbformat.read(out / "compare.ipynb", as_version=4)
    outputs = [o for c in executed.cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2  # trade-off and at least one heatmap
    assert executed.metadata.papermill.parameters["RUN_DIRS"] == [str(d.resolve()) for d in run_dirs]
    assert (out / "compare.html").stat().st_size > 10_000 and (out / "tradeoff.png").exists()
    return (out / "compare.md").read_text(encoding="utf-8")


def test_committed_notebook_is_a_document_without_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    cells = notebook.cells
    assert cells[0].cell_type == "markdown" and cells[0].source == f"# {compare.COMPARE_TITLE}"
    (parameters,) = [c for c in cells if c.metadata.get("tags") == ["parameters"]]
    assert parameters.source.startswith("RUN_DIRS = [") and "\nLABELS = None" in parameters.source
    headings = [c.source.splitlines()[0] for c in cells if c.cell_type == "markdown" and c.source.startswith("## ")]
    assert headings == [
        "## Prefill",
        "## Each run against the baseline",
        "## Trade-off",
        "## Status differences",
        "## Regression gate",
    ]
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    for call in ("runs.load_runs(RUN_DIRS, LABELS)", "compare_plots.ratio_heatmaps(", "compare_plots.tradeoff_figure(",
                 "service_level.highest_concurrency(frame, SLO_TTFT_MS, SLO_PER_REQUEST_TOK_S)"):  # fmt: skip
        assert call in code
    for cell in cells:
        assert cell.get("outputs", []) == [] and cell.get("execution_count") is None


# ---- the two reference reports, imported ----------------------------------------------------------


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("imports")
    files = {"lfm": "lfm2.5-350m-h200nvl-vllm-0.26.txt", "kimi": "kimi-k2.7-code-h200sxm-x8-vllm-0.29.txt"}
    for name, file in files.items():
        assert cli.main(["import-report", str(FIXTURES / file), "--out", str(root / name)]) == 0
    return {name: root / name for name in files}


def test_compare_imported_references(references: dict[str, Path], tmp_path: Path) -> None:
    md = run_compare([references["lfm"], references["kimi"]], tmp_path / "cmp", labels="LFM,Kimi")
    # 8K × 1: Kimi 24.3 tok/s / LFM 959.9 tok/s = 0.02531; TTFT 136 ms / 47 ms = 2.894.
    assert (
        "| Sustained decode | 8K | 1 | Valid | 0.0253× (959.9 → 24.3) | 0.0262× (972.0 → 25.5) "
        "| 2.89× (47 ms → 136 ms) |" in md
    )
    # Prefill 8K: 17.7K / 143.1K = 0.1237.
    assert "| Prefill | 8K | 1 | Valid | 0.124× (143.1K → 17.7K) | — | 8.11× (57 ms → 462 ms) |" in md
    status = md[md.index("## Status differences") :]
    assert "| Phase | Context | Requests at once | LFM | Kimi |" in status
    assert "| Sustained decode | 120K | 2 | Requests queued | — |" in status
    assert "| Sustained decode | 32K | 16 | Valid | Over capacity |" in status
    assert "| Prefill | 256K | 1 | — | Valid |" in status
    assert "| Kimi | 16K | 1 | Valid | 32.0 | 31.8 |" in md  # on Kimi's frontier: the fastest per request
    assert "| 251K | — | — | 8,828 | 28,591 ms |" in md
    html = (tmp_path / "cmp" / "compare.html").read_text(encoding="utf-8")
    for text in ("Speed test matrix comparison", "Kimi vs LFM", "0.0253× (959.9 → 24.3)", "Requests queued"):
        assert text in html
    assert "runs.load_runs" not in html  # inputs are hidden


def test_compare_labels_runs_by_title_and_folder(references: dict[str, Path], tmp_path: Path) -> None:
    md = run_compare([references["kimi"], references["lfm"]], tmp_path / "cmp")
    assert "## LFM2.5-350M on H200 NVL 141GB (lfm) vs Kimi-K2.7-Code on H200 SXM 141GB ×8 (kimi)" in md
    assert "| Sustained decode | 8K | 1 | Valid | 39.5× (24.3 → 959.9) |" in md  # 959.9 / 24.3 = 39.50


def test_compare_refuses_bad_input_before_running(references: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "cmp"
    assert cli.main(["compare", str(references["lfm"]), "--out", str(out)]) == 2
    assert cli.main(["compare", str(references["lfm"]), str(tmp_path), "--out", str(out)]) == 2
    assert cli.main(["compare", str(references["lfm"]), str(references["kimi"]), "--out", str(out),
                     "--labels", "A"]) == 2  # fmt: skip
    errors = capsys.readouterr().err.splitlines()
    assert errors == [
        "error: compare: give at least two run folders",
        f"error: {tmp_path}: not a run folder (no run.json)",
        "error: labels: 1 labels for 2 run folders; give one per folder",
    ]
    assert not out.exists()


# ---- two small measured runs -----------------------------------------------------------------------


def latest(folder: Path) -> dict[tuple[str, int, int], Measurement]:
    from toolkit.results.store import latest_by_key, load_measurements

    return latest_by_key(load_measurements(folder / "results.jsonl"))


def assert_ratios_shown(md: str, a: Path, b: Path, cells: list[tuple[int, int]]) -> None:
    """Each decode cell's total tok/s ratio in compare.md is B / A of the two results files."""
    ma, mb = latest(a), latest(b)
    for context, concurrency in cells:
        x, y = ma[("decode", context, concurrency)], mb[("decode", context, concurrency)]
        assert x.total_tok_s and y.total_tok_s
        ratio = compare.format_ratio(y.total_tok_s / x.total_tok_s)
        row = f"| Sustained decode | {x.context} | {concurrency} | "
        ratio_section = md.split("## Status differences", 1)[0]  # a cell whose status differs is listed there too
        (line,) = [line for line in ratio_section.splitlines() if line.startswith(row)]
        assert f" | {ratio} ±" in line, line  # measured cells carry their spread, so each ratio its interval


@pytest.fixture
def fault_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    monkeypatch.delenv("COMPARE_TEST_KEY", raising=False)
    folders = []
    for label, interval in (("slower", 0.03), ("faster", 0.01)):
        with FaultServer(token_interval_s=interval) as server:
            params = make_params(tiny_params(base_url=server.base_url, concurrency=[1, 2], control_window_s=0.5,
                                             api_key_env="COMPARE_TEST_KEY", run_label=label))  # fmt: skip
            folders.append(tmp_path / label / "r1")
            run_matrix(params, folders[-1], progress=False)
    yield folders


def test_compare_two_small_runs(fault_runs: list[Path], tmp_path: Path) -> None:
    slower, faster = fault_runs
    md = run_compare(fault_runs, tmp_path / "cmp")
    assert "## faster (r1) vs slower (r1)" in md
    assert_ratios_shown(md, slower, faster, [(64, 1), (64, 2)])
    ratio = latest(faster)[("decode", 64, 1)].total_tok_s / latest(slower)[("decode", 64, 1)].total_tok_s
    assert ratio > 1.5  # tokens every 10 ms against every 30 ms
    run = json.loads((slower / "run.json").read_text())
    assert run["source"] == "toolkit" and run["run_label"] == "slower"


def test_the_gate_section_shows_the_commands_verdicts_and_their_figure(
    fault_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GATE_MAX_REGRESSION set: each later run's gate lines, the same as `vllm-speedtest gate` prints for the two
    folders, and the figure of the intervals against the allowed band. The candidate streams 3× faster: never FAIL."""
    slower, faster = fault_runs
    limits = ["--max-regression", "5%", "--between-runs", "10%"]
    status = cli.main(["gate", str(slower), str(faster), *limits])
    command_lines = capsys.readouterr().out.strip().splitlines()
    assert status in (0, 3) and len(command_lines) == 2, command_lines
    assert all(line.split()[0] in ("PASS", "INCONCLUSIVE") for line in command_lines), command_lines
    executed = tmp_path / "compare.ipynb"
    execute_path(NOTEBOOK, executed, {"RUN_DIRS": [str(slower), str(faster)], "GATE_MAX_REGRESSION": "5%",
                                      "GATE_BETWEEN_RUNS": "10%"})  # fmt: skip
    (cell,) = [c for c in nbformat.read(executed, as_version=4).cells if c.get("id") == "gate"]
    printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream").splitlines()
    assert printed == ["Regression gate, faster (r1) against slower (r1):", *command_lines]
    assert sum("image/png" in o.get("data", {}) for o in cell.outputs) == 1
