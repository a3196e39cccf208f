"""The rate notebooks under papermill on synthetic sweep folders (no server, no load generator).

rate_sweep.ipynb shows a finished sweep without measuring and judges it again against other limits: the goodputs
it gives equal those computed here straight from the per-request Parquet records. report.ipynb gains its rate
section only when the run holds `rates/`; compare.ipynb overlays the curves only when two runs do. Where the server
timed its replies, both show where the time goes (a sweep without that timing: tests/unit/test_breakdown_views.py,
and the conversation sweep here, whose fake server gives none).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pandas as pd
import pytest

from tests.component.test_notebooks_offline import execute, pngs
from tests.rate_folders import add_matrix_results, write_rate_sweep
from toolkit.jupyter.convert import html_report
from toolkit.jupyter.reports import markdown_report
from toolkit.reports import breakdown_views
from toolkit.results.rate_runs import load_rate_sweep
from toolkit.results.store import RUN_FILE, write_json_atomic

pytestmark = [pytest.mark.process, pytest.mark.timeout(600)]
RATE_CELLS = ("rates", "rate-steps", "rate-knee", "rate-goodput", "rate-queue")
BREAKDOWN_CELLS = ("rate-breakdown", "rate-breakdown-figure")


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_rate_sweep(tmp_path_factory.mktemp("sweep") / "run", searched=(6.5, 5.75), lag_flagged=(2,),
                            server_timing=True, mismatched={3: 2})  # fmt: skip


def direct_goodputs(folder: Path, ttft_ms: float | None, tpot_ms: float | None, target: float) -> list[tuple]:
    """Per step file, straight from the records: (step, goodput, share meeting, met), without toolkit code. TTFT
    counts from the scheduled arrival; goodput over every request, the share over the steady part (the requests
    due outside the first and last 10 % of the step's schedule)."""
    out = []
    for path in sorted((folder / "rates").glob("step-*.parquet")):
        r = pd.read_parquet(path)
        ok = r["error"].isna() & r["first_token_s"].notna()
        ttft = (r["first_token_s"] - r["scheduled_s"]) * 1000
        tpot = (r["last_token_s"] - r["first_token_s"]) / (r["output_tokens"] - 1).clip(lower=1) * 1000
        met = ok & (ttft <= (ttft_ms or np.inf)) & (tpot <= (tpot_ms or np.inf))
        duration = r.loc[ok, "last_token_s"].max() - r["sent_s"].min()
        due, span = r["scheduled_s"], r["scheduled_s"].max() - r["scheduled_s"].min()
        steady = (due >= due.min() + 0.1 * span) & (due <= due.max() - 0.1 * span)
        share = met[steady].mean() if steady.any() else met.mean()
        out.append((int(r["step"].iloc[0]), met.sum() / duration, share, bool(share >= target)))
    return out


def rows(frame: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(zip(frame["columns"], values, strict=True)) for values in frame["data"]]


@pytest.mark.parametrize(
    ("limits", "level"),
    [
        ({"REJUDGE_TTFT_MS": 65, "REJUDGE_TPOT_MS": 25}, (65, 25, 0.9)),  # stricter than the sweep's 200 / 30
        ({"REJUDGE_TTFT_MS": 1500, "REJUDGE_TPOT_MS": 0, "REJUDGE_TARGET": 0.5}, (1500, None, 0.5)),  # 0: no limit
    ],
)
def test_rejudging_gives_the_goodputs_of_the_records(sweep_dir: Path, tmp_path: Path, limits: dict[str, float],
                                                     level: tuple) -> None:  # fmt: skip
    executed, probe = execute("rate_sweep", tmp_path, {"RESULTS_DIR": str(sweep_dir), **limits})  # MEASURE True
    (measure,) = [c for c in executed.cells if c.id == "measure"]
    assert "holds a rate sweep already: shown as it is" in measure.outputs[0].text  # skipped: no toolkit.rates here
    expected = direct_goodputs(sweep_dir, *level)
    judged = rows(probe["rejudge"]["frame"])
    assert [r["step"] for r in judged] == [step for step, *_ in expected] == [0, 1, 2, 3, 4, 5]
    assert [r["goodput"] for r in judged] == pytest.approx([goodput for _, goodput, _, _ in expected])
    assert [r["slo_fraction"] for r in judged] == pytest.approx([share for _, _, share, _ in expected])
    assert [r["slo_met"] for r in judged] == [met for *_, met in expected]
    own = direct_goodputs(sweep_dir, 200, 30, 0.9)  # the sweep's own level gives other goodputs: the test can fail
    assert [g for _, g, _, _ in own] != pytest.approx([g for _, g, _, _ in expected])
    assert all(pngs(executed, cell) == 1 for cell in ("knee", "goodput", "queue"))
    knee = {line["label"]: line["xy"] for line in probe["knee"]["figure"][0]["lines"]}
    assert len(knee["TTFT p99"]) == 6 and len(knee["lag flagged"]) == 2
    assert pngs(executed, "breakdown") == 1  # where the time goes: the server timed every reply
    split = rows(probe["breakdown-numbers"]["frame"])
    assert [(r["step"], r["basis"], r["timing_mismatches"]) for r in split] == [
        (0, "per-request", 0), (1, "per-request", 0), (2, "per-request", 0), (5, "per-request", 0),
        (4, "per-request", 0), (3, "per-request", 2)]  # fmt: skip
    (numbers,) = [c for c in executed.cells if c.id == "breakdown-numbers"]
    assert numbers.outputs[0].text.startswith("Timing cross-check: 2 requests' server timing exceeds the client's")
    picked = rows(probe["breakdown-requests"]["frame"])  # BREAKDOWN_STEP None: the highest rate, 8 req/s
    assert [(r["step"], r["request"], r["mismatch"]) for r in picked][:2] == [(3, 0, True), (3, 2, False)]
    assert len(picked) == 5


def test_the_two_levels_judge_the_records_apart(sweep_dir: Path) -> None:
    strict, loose = direct_goodputs(sweep_dir, 65, 25, 0.9), direct_goodputs(sweep_dir, 1500, None, 0.5)
    # Every fourth request has a TTFT of 70 ms: over each step's steady part, a fifth to a third fail 65 ms. Step
    # 2's sends lagged their schedule: counted from the schedule, none of its requests meets 65 ms.
    shares = [share for _, _, share, _ in strict[:3]]
    assert 0.6 < shares[0] <= 0.8 and 0.6 < shares[1] <= 0.8 and shares[2] == 0.0
    assert [met for *_, met in strict] == [False] * 6
    assert [met for *_, met in loose] == [True] * 6  # past capacity 7 of 12 start within 1.5 s


def test_report_with_a_rate_sweep_and_matrix_results(tmp_path: Path) -> None:
    folder = add_matrix_results(write_rate_sweep(tmp_path / "run", searched=(6.0,), server_timing=True))
    executed, probe = execute("report", tmp_path, {"RESULTS_DIR": str(folder)})
    assert [pngs(executed, cell) for cell in (*RATE_CELLS[2:], "rate-breakdown-figure")] == [1, 1, 1, 1]
    goodput = {line["label"]: line["xy"] for line in probe["rate-goodput"]["figure"][0]["lines"]}
    assert [x for x, _ in goodput["goodput"]] == [1.0, 2.0, 4.0, 6.0, 8.0]
    page = html_report(nbformat.read(tmp_path / "report.ipynb", as_version=4))
    assert "<h2>Open-loop rates</h2>" in page and "Highest rate meeting the service level: 4.00 req/s" in page
    assert "Speed test matrix" in page and ">Sustained decode<" in page and "rate_views." not in page
    assert '<h3 id="where-the-time-goes">Where the time goes</h3>' in page and "Timing cross-check" not in page
    markdown = markdown_report(folder, nbformat.read(tmp_path / "report.ipynb", as_version=4))
    section = markdown[markdown.index("## Open-loop rates") :]
    assert "Highest rate meeting the service level: 4.00 req/s" in section and "## Sustained decode" in markdown
    figures = ["rate-knee", "rate-goodput", "rate-queue"]
    assert [f"![{key}]({key}.png)" in section for key in figures] == [True] * 3
    assert all((folder / f"{key}.png").read_bytes().startswith(b"\x89PNG") for key in figures)
    breakdown = section[section.index("### Where the time goes") :]
    assert "| 3 | 8.00 | per request |" in breakdown and "![rate-breakdown](rate-breakdown.png)" in breakdown
    assert (folder / "rate-breakdown.png").read_bytes().startswith(b"\x89PNG")


def test_report_without_rates_shows_no_rate_section(tmp_path: Path) -> None:
    folder = add_matrix_results(tmp_path / "run")
    write_json_atomic(folder / RUN_FILE, {"source": "toolkit", "run_label": "matrix"})
    executed, _ = execute("report", tmp_path, {"RESULTS_DIR": str(folder)})
    shown = (*RATE_CELLS, *BREAKDOWN_CELLS)
    assert [c.outputs for c in executed.cells if c.id in shown] == [[]] * len(shown)
    assert "Open-loop rates" not in html_report(nbformat.read(tmp_path / "report.ipynb", as_version=4))


def test_compare_overlays_two_runs_curves_only_when_both_have_rates(sweep_dir: Path, tmp_path: Path) -> None:
    other = write_rate_sweep(tmp_path / "other", rates=(2.0, 4.0, 6.0), capacity=3.0)
    parameters = {"RUN_DIRS": [str(sweep_dir), str(other)], "LABELS": ["A", "B"]}
    (tmp_path / "both").mkdir()
    executed, probe = execute("compare", tmp_path / "both", parameters)
    assert pngs(executed, "rate-curves") == 1
    goodput, ttft = probe["rate-curves"]["figure"]
    assert [line["label"] for line in goodput["lines"]] == ["A", "B"]
    assert ttft["title"] == "TTFT p99 from the scheduled arrival (ms)"
    assert [x for x, _ in goodput["lines"][1]["xy"]] == [2.0, 4.0, 6.0]
    page = html_report(nbformat.read(tmp_path / "both" / "compare.ipynb", as_version=4))
    assert "<h2>Open-loop rates</h2>" in page and "<b>B</b>: Service level" in page

    matrix = add_matrix_results(tmp_path / "matrix")
    write_json_atomic(matrix / RUN_FILE, {"source": "toolkit", "run_label": "matrix"})
    (tmp_path / "one").mkdir()
    one, _ = execute("compare", tmp_path / "one", {"RUN_DIRS": [str(sweep_dir), str(matrix)]})
    assert [c.outputs for c in one.cells if c.id in ("rates", "rate-curves")] == [[], []]


def test_a_conversation_sweep_shows_ttft_by_turn_beside_its_cold_control(tmp_path: Path) -> None:
    from tests.faultserver import FaultServer
    from toolkit.rates.params import make_rate_params
    from toolkit.rates.runner import run_rates

    with FaultServer(token_interval_s=0.002) as server:
        folder = run_rates(make_rate_params({
            "base_url": server.base_url, "requests_per_step": 4, "rates": [20], "input_tokens": 30,
            "output_tokens": 5, "workload": "conversation", "turns": 3, "cold_control": True,
            "results_dir": str(tmp_path / "run"),
        }), say=lambda line: None)  # fmt: skip
    executed, probe = execute("rate_sweep", tmp_path, {"RESULTS_DIR": str(folder)})
    turns = rows(probe["workload-turns-table"]["frame"])
    assert [(r["step"], r["turn"], r["requests"]) for r in turns] == [(0, 1, 4), (0, 2, 4), (0, 3, 4)]
    assert all(r["cold TTFT p50 (ms)"] is not None and r["cached / cold"] > 0 for r in turns)
    cache = rows(probe["workload-cache"]["frame"])
    assert [(r["step"], r["workload"], r["warm-up requests"]) for r in cache] == [
        (0, "conversation", 4), (1, "cold-control", 0)]  # fmt: skip
    assert pngs(executed, "workload-turns-figure") == 1 and pngs(executed, "workload-cached-figure") == 1
    knee = {line["label"]: line["xy"] for line in probe["knee"]["figure"][0]["lines"]}
    assert len(knee["TTFT p99"]) == 1  # the cold control is not a step of the sweep's curve
    report, _ = execute("report", tmp_path, {"RESULTS_DIR": str(folder)})
    assert pngs(report, "rate-turns") == 1
    if not breakdown_views.has_breakdown(load_rate_sweep(folder).steps):  # the fake server timed no reply
        assert [c.outputs for c in report.cells if c.id in BREAKDOWN_CELLS] == [[], []]
        assert [c.outputs for c in executed.cells if c.id.startswith("breakdown")] == [[], [], []]
    markdown = markdown_report(folder, nbformat.read(tmp_path / "report.ipynb", as_version=4))
    section = markdown[markdown.index("### The workload and the prefix cache") :]
    assert "cold-control" in section and "![rate-turns](rate-turns.png)" in section


def test_compare_shows_each_class_ttft_run_by_run_with_each_runs_scheduling_policy(tmp_path: Path) -> None:
    """Issue 47's priority comparison in the report: two class sweeps (here the same one twice, one folder's launch
    recorded with --scheduling-policy priority) give a table of each class's TTFT p90 per run, its ratio 1.000x."""
    from tests.faultserver import FaultServer
    from toolkit.rates.params import make_rate_params
    from toolkit.rates.runner import run_rates

    classes = [{"name": "chat", "weight": 1, "input_tokens": 40, "output_tokens": 4, "slo_e2e_ms": 5000,
                "priority": -1}, {"name": "long", "weight": 1, "input_tokens": 150, "output_tokens": 8,
                                  "slo_e2e_ms": 5000}]  # fmt: skip
    with FaultServer(token_interval_s=0.002) as fs:
        params = make_rate_params({"base_url": fs.base_url, "rates": [100], "requests_per_step": 60,
                                   "classes": classes, "seed": 4, "results_dir": str(tmp_path / "fcfs")})  # fmt: skip
        fcfs = run_rates(params, say=lambda _: None)
    priority = tmp_path / "priority"
    shutil.copytree(fcfs, priority)
    write_json_atomic(fcfs / "server.json", {"command": "vllm serve m --port 8000"})
    write_json_atomic(priority / "server.json", {"command": "vllm serve m --scheduling-policy priority"})
    (tmp_path / "out").mkdir()
    executed, _ = execute("compare", tmp_path / "out", {"RUN_DIRS": [str(fcfs), str(priority)], "LABELS": ["A", "B"]})
    (cell,) = [c for c in executed.cells if c.id == "rate-classes"]
    page = cell.outputs[0]["data"]["text/html"]
    assert "Traffic classes, run by run" in page and "TTFT p90 · A (fcfs)" in page and "B (priority)" in page
    assert page.count(">1.000×</td>") == 2 and ">chat</td>" in page and ">-1</td>" in page
    # compare.md's section: each run's level and search line, then the same table
    from toolkit.reports.class_compare import CLASS_BOUNDS_NOTE, rates_markdown
    from toolkit.results.rate_runs import load_rate_sweeps

    text = rates_markdown(load_rate_sweeps([str(fcfs), str(priority)], ["A", "B"]))
    assert text.startswith("## Open-loop rates\n\n- **A**: Service level: each class its own (chat: ")
    assert "### Traffic classes, run by run" in text and "| TTFT p90 · A (fcfs) | TTFT p90 · B (priority) |" in text
    assert text.count(" 1.000× |") == 2 and "| chat | -1 |" in text
    # each p90 with its bounds (about 24 steady requests a class: no upper bound), the note under the table
    assert text.count(", unbounded] |") == 4 and text.rstrip("\n").endswith(CLASS_BOUNDS_NOTE)
    assert rates_markdown(load_rate_sweeps([str(fcfs)], ["A"])) == ""  # one sweep: no section
