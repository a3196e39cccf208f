"""The between-run allowance measured by repeated A/A runs (`gate allowance`) and `gate --between-runs FILE`: the
arithmetic by hand, the file's round trip, the widening per quantity, the bad inputs (one line, exit 2)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.gate_folders import write_gate_run, write_gate_sweep
from toolkit.base.errors import ResultsError
from toolkit.base.schema import SCHEMA_VERSION
from toolkit.cli.entry import main
from toolkit.method.allowance import log_bound, runs_spread
from toolkit.method.gate import QUANTITIES, RatioInterval, Verdict
from toolkit.reports.gate_allowance import AllowanceDocument, allowance_lines, between_runs
from toolkit.reports.gate_document import gate_document
from toolkit.reports.gate_ratios import APART_REASON, BetweenRuns, judge
from toolkit.reports.gate_text import GateContext, gate_line, summary_markdown
from toolkit.reports.gate_view import gate_folders

pytestmark = pytest.mark.unit

TOTALS = (100.0, 104.0, 98.0, 102.0)  # the four A/A runs' total tok/s at one request at once
PER_REQUEST = (50.0, 50.5, 49.5, 50.0)
SD_TOTAL = 0.0255721  # by hand below
FINGERPRINT = {"model": None, "contexts": [1024], "prefill_only_contexts": None, "concurrency": [1, 2],
               "duration_s": 10.0, "max_output": 4096, "endpoint": "chat", "kv_budget_tokens": None,
               "per_stream_prompts": False}  # fmt: skip


def write_run(folder: Path, cells: dict[int, tuple[float, float]], *, run_id: str | None = None,
              fingerprint: dict[str, object] | None = None, started_at: str = "2026-12-03T10:00:00+00:00",
              ) -> Path:  # fmt: skip
    """A gate run folder (tests/gate_folders.py) whose run.json has a run id and its fingerprint."""
    return write_gate_run(folder, cells, run_id=run_id, fingerprint=fingerprint or FINGERPRINT, started_at=started_at)


def aa_runs(root: Path) -> list[Path]:
    """Four A/A runs: cell 1 at (total, per-request), cell 2 at (1.9 total, 0.95 per-request); TTFT unchanged."""
    return [write_run(root / f"aa{i}", {1: (t, p), 2: (1.9 * t, 0.95 * p)}, run_id=f"r{i}",
                      started_at=f"2026-12-0{i}T10:00:00+00:00")
            for i, (t, p) in enumerate(zip(TOTALS, PER_REQUEST, strict=True), start=1)]  # fmt: skip


def test_the_allowance_by_hand() -> None:
    """Runs 100, 104, 98, 102: logs about their mean −0.0097052, 0.0295156, −0.0299079, 0.0100975; squares sum
    0.0019618, / 3 = 0.00065393, sd 0.0255721; t(3, 97.5 %) = 3.182446; bound 3.182446 × 0.0255721 × √2 =
    0.1150913; allowance exp(0.1150913) − 1 = 0.1219759."""
    found = runs_spread(TOTALS)
    assert found.sd == pytest.approx(SD_TOTAL, abs=1e-7) and found.runs == 4 and found.level == 0.95
    assert log_bound(found.sd, 4) == pytest.approx(0.1150913, abs=1e-7)
    assert found.allowance == pytest.approx(0.1219759, abs=1e-7)
    assert runs_spread([100.0, 100.0, 100.0]).allowance == 0.0  # no spread, no allowance
    three = runs_spread(TOTALS[:3])  # t(2, 97.5 %) = 4.302653: fewer runs, a wider bound
    assert three.allowance == pytest.approx(math.expm1(4.302653 * three.sd * math.sqrt(2)), rel=1e-6)
    with pytest.raises(ValueError, match="2 run"):
        runs_spread(TOTALS[:2])
    with pytest.raises(ValueError, match="positive finite"):
        runs_spread([100.0, 0.0, 98.0])


def test_the_command_prints_each_quantity_and_saves_a_file_that_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each run's overall value is the geometric mean over its two cells: total √1.9 × 100, 104, 98, 102, whose
    log sd is that of the runs; per-request 50, 50.5, 49.5, 50 (× √0.95): logs about their mean 0.000025,
    0.0099753, −0.0100253, 0.000025, squares sum 0.00020002, sd 0.0081653, allowance
    exp(3.182446 × 0.0081653 × √2) − 1 = exp(0.0367492) − 1 = 0.0374328; TPOT its reciprocal, the same; TTFT
    unchanged: 0."""
    runs = aa_runs(tmp_path)
    saved = tmp_path / "aa.json"
    assert main(["gate", "allowance", *map(str, runs), "--save", str(saved)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("total tok/s: runs spread 2.6 % (sd of log, 4 runs, 2 cells); allowance ±12.2 % between two "
                        "runs measured apart (95 %)")  # fmt: skip
    assert lines[1].startswith("per-request tok/s: runs spread 0.8 % (sd of log, 4 runs, 2 cells); allowance ±3.7 %")
    assert lines[2].startswith("TTFT: runs spread 0.0 % (sd of log, 4 runs, 2 cells); allowance ±0.0 %")
    assert lines[3].startswith("TPOT: runs spread 0.8 %") and lines[4].startswith(f"saved {saved}: gate ")
    back = AllowanceDocument.load(saved)
    assert back.schema_version == SCHEMA_VERSION and back.kind == "gate-allowance" and back.created_at
    assert [(r.path, r.run_id) for r in back.runs] == [(str(r), f"r{i}") for i, r in enumerate(runs, start=1)]
    assert [r.started_at for r in back.runs][::3] == ["2026-12-01T10:00:00+00:00", "2026-12-04T10:00:00+00:00"]
    assert [q.name for q in back.quantities] == list(QUANTITIES)
    total, per, ttft, tpot = back.quantities
    assert (total.sd, total.runs, total.cells) == (pytest.approx(SD_TOTAL, abs=1e-7), 4, 2)
    assert total.allowance == pytest.approx(0.1219759, abs=1e-7)
    assert per.sd == pytest.approx(0.0081653, abs=1e-7) and per.allowance == pytest.approx(0.0374328, abs=1e-7)
    assert tpot.sd == pytest.approx(per.sd)
    assert ttft.sd == pytest.approx(0.0, abs=1e-12)
    assert back.model_dump() == AllowanceDocument.model_validate_json(saved.read_text()).model_dump()
    assert allowance_lines(back) == lines[:4]  # the file says what the command printed


def test_rate_sweeps_give_goodput_an_allowance_that_the_gate_widens_goodput_by(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three A/A rate sweeps whose goodput at 2, 4 and 8 req/s is 100, 104 and 98 % of 1.8, 3.6 and 7.2 req/s: each
    run's overall log goodput is log 3.6 plus the log of its share, so their sd is that of 1, 1.04, 0.98: logs 0,
    0.0392207, −0.0202027 about their mean 0.0063393: −0.0063393, 0.0328814, −0.0265420 (squares sum 0.0018259,
    / 2, sd 0.0302147); t(2, 97.5 %) = 4.302653; allowance exp(4.302653 × 0.0302147 × √2) − 1 = exp(0.1838529) − 1
    = 0.2018383. A sweep pair at
    0.5× then fails at 5 % with goodput widened by it; the search's bracket has no allowance and says so."""
    steps = {2.0: 1.8, 4.0: 3.6, 8.0: 7.2}
    runs = [write_gate_sweep(tmp_path / f"aa{i}", {r: (g * share, 0.9, 0.88, 0.92) for r, g in steps.items()},
                             (8.0, 16.0)) for i, share in enumerate((1.0, 1.04, 0.98), start=1)]  # fmt: skip
    saved = tmp_path / "aa.json"
    assert main(["gate", "allowance", *map(str, runs), "--save", str(saved)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "goodput: runs spread 3.0 % (sd of log, 3 runs, 3 rates); allowance ±20.2 % between two runs measured "
        "apart (95 %)")  # fmt: skip
    (goodput,) = AllowanceDocument.load(saved).quantities
    assert (goodput.name, goodput.runs, goodput.cells) == ("goodput", 3, 3)
    assert goodput.sd == pytest.approx(0.0302147, abs=1e-7) and goodput.allowance == pytest.approx(0.2018383, abs=1e-7)
    a = write_gate_sweep(tmp_path / "a", {r: (g, 0.9, 0.88, 0.92) for r, g in steps.items()}, (8.0, 16.0))
    b = write_gate_sweep(tmp_path / "b", {r: (g / 2, 0.45, 0.43, 0.47) for r, g in steps.items()}, (4.0, 8.0))
    assert main(["gate", str(a), str(b), "--max-regression", "5%", "--between-runs", str(saved)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("FAIL goodput: 0.500× [") and out[0].endswith(
        f"measured apart, widened by ±20.2 % between runs (stored: {saved}, 3 A/A runs)")  # fmt: skip
    assert out[1].startswith("INCONCLUSIVE highest rate meeting the SLO: ")
    assert f"{saved} holds no between-run allowance for" in out[1]


def interval(ratio: float, low: float, high: float) -> RatioInterval:
    return RatioInterval(ratio, low, high, 0.975, 0.01, 1.5, 0)  # rounds 0: measured apart


def test_each_quantity_is_widened_by_its_own_stored_allowance() -> None:
    total, per = QUANTITIES["total_tok_s"], QUANTITIES["per_request_tok_s"]
    found = {"total_tok_s": (interval(0.80, 0.78, 0.82), 2, ()),
             "per_request_tok_s": (interval(1.0, 0.99, 1.01), 2, ())}  # fmt: skip
    stored = BetweenRuns({"total_tok_s": 0.122, "ttft_ms": 0.3}, "aa.json", 4)
    judged = judge(found, [total, per], {"total_tok_s": 0.03, "per_request_tok_s": 0.03}, stored)
    assert judged[0].interval is not None and judged[0].verdict is Verdict.FAIL  # 0.82 × 1.122 = 0.920 < 0.97
    assert (judged[0].interval.low, judged[0].interval.high) == pytest.approx((0.78 / 1.122, 0.82 * 1.122))
    context = GateContext("apart", "a", "b", 0, 0.975)
    assert gate_line(judged[0], context) == (
        "FAIL decode total tok/s: 0.800× [0.695, 0.920], allowed −3 %; measured apart, widened by ±12.2 % between "
        "runs (stored: aa.json, 4 A/A runs)"
    )
    assert judged[1].verdict is Verdict.INCONCLUSIVE and judged[1].allowance is None  # not in the file
    assert judged[1].reason == "measured apart: aa.json holds no between-run allowance for per-request tok/s"
    assert judged[1].interval is not None and judged[1].interval.low == 0.99  # not widened
    assert "widened by ±12.2 % (stored: aa.json, 4 A/A runs)" in summary_markdown(judged, context)
    by_hand = judge(found, [total], {"total_tok_s": 0.03}, 0.10)[0]  # a percentage: as before, every quantity
    assert gate_line(by_hand, context).endswith("allowed −3 %; measured apart, widened by ±10 % between runs")
    assert judge(found, [per], {"per_request_tok_s": 0.03}, None)[0].reason == APART_REASON


def test_the_gate_reads_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "aa.json"
    assert main(["gate", "allowance", *map(str, aa_runs(tmp_path / "aa")), "--save", str(saved)]) == 0
    document = json.loads(saved.read_text())
    document["quantities"] = [q for q in document["quantities"] if q["name"] == "total_tok_s"]
    only_total = tmp_path / "total-only.json"
    only_total.write_text(json.dumps(document))
    a = write_run(tmp_path / "a", {1: (100.0, 100.0), 2: (190.0, 95.0)})
    b = write_run(tmp_path / "b", {1: (82.0, 82.0), 2: (155.8, 77.9)})  # 0.82×: total inconclusive when widened
    capsys.readouterr()
    plain, _ = gate_folders([str(a), str(b)], "3%")
    stored, context = gate_folders([str(a), str(b)], "3%", between_runs=str(only_total))
    assert plain[0].interval is not None and stored[0].interval is not None
    assert stored[0].interval.low == pytest.approx(plain[0].interval.low / 1.1219759, rel=1e-6)
    assert stored[0].allowance_stored == str(only_total) and stored[0].allowance_runs == 4
    line = gate_line(stored[0], context)
    assert line.endswith(f"widened by ±12.2 % between runs (stored: {only_total}, 4 A/A runs)")
    assert stored[1].verdict is Verdict.INCONCLUSIVE
    assert main(["gate", str(a), str(b), "--max-regression", "3%", "--between-runs", str(only_total)]) == 3
    out = capsys.readouterr().out.splitlines()
    assert out[0] == line and out[0].startswith("INCONCLUSIVE decode total tok/s: 0.820× [0.677, 0.994]")
    assert out[1].startswith("INCONCLUSIVE decode per-request tok/s: 0.820× [")
    assert f"measured apart: {only_total} holds no between-run allowance for per-request tok/s; to settle" in out[1]
    # The whole file: per-request tok/s moves less between runs (±3.7 %) and its 0.820× now fails.
    assert main(["gate", str(a), str(b), "--max-regression", "3%", "--between-runs", str(saved)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1] == (f"FAIL decode per-request tok/s: 0.820× [0.732, 0.919], allowed −3 %; measured apart, widened "
                      f"by ±3.7 % between runs (stored: {saved}, 4 A/A runs)")  # fmt: skip
    assert gate_document(stored, context).quantities[0].between_runs_file == str(only_total)
    found = between_runs(str(saved))
    assert found is not None and found.stored == str(saved) and found.allowances["tbt_ms"] == pytest.approx(0.0374328)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d.pop("runs"), "aa.json: runs: missing"),
        (lambda d: d["quantities"][0].update(sd=-0.1), "aa.json: quantities[0].sd: -0.1 should be greater than"),
        (lambda d: d["quantities"][0].update(name="slo_rate"), "quantities[0].name: 'slo_rate' should be one of"),
        (lambda d: d.update(kind="gate"), "aa.json: kind: 'gate' should be 'gate-allowance'"),
        (lambda d: d["quantities"][0].update(runs=3), "a quantity's runs differ from the 4 runs listed"),
        (lambda d: d.update(schema_version=99), "aa.json: schema_version 99 is newer than this toolkit reads"),
    ],
)
def test_a_damaged_or_newer_file_is_one_line(change: object, said: str, tmp_path: Path) -> None:
    quantity = {"name": "total_tok_s", "title": "total tok/s", "sd": 0.02, "runs": 4, "cells": 2, "level": 0.95,
                "allowance": 0.1}  # fmt: skip
    document = {"kind": "gate-allowance", "toolkit_version": "0.1.0", "created_at": "2026-12-04T10:00:00+00:00",
                "runs": [{"path": f"r{i}"} for i in range(4)], "quantities": [quantity],
                "schema_version": 1}  # fmt: skip
    AllowanceDocument.model_validate(document)  # whole, it reads
    change(document)  # type: ignore[operator]
    path = tmp_path / "aa.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ResultsError) as caught:
        between_runs(str(path))
    assert said in caught.value.line and caught.value.line.startswith("between-runs: ") and caught.value.exit_code == 2


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = aa_runs(tmp_path)
    other = write_run(tmp_path / "other", {1: (100.0, 50.0), 2: (190.0, 47.5)},
                      fingerprint={**FINGERPRINT, "concurrency": [1, 4]})  # fmt: skip
    apart = write_run(tmp_path / "apart", {4: (300.0, 75.0)})
    (tmp_path / "not.json").write_text("{not json")
    a, b = map(str, runs[:2])
    cases = [
        (["allowance", a, b], "error: gate allowance: 2 run folder(s); give 3 or more of one configuration"),
        (["allowance", *map(str, runs), str(other)],
         f"is another configuration than {runs[0]} (concurrency: [1, 2] -> [1, 4]); give runs of one configuration"),
        (["allowance", a, b, str(apart)], "error: gate: the 3 runs have no decode cell in common"),
        (["allowance", a, b, a], f"error: gate allowance: {a} is the run {a} again; give each run once"),
        (["allowance", a, b, str(tmp_path / "missing")], "missing: not a folder"),
        (["allowance", a, b, str(runs[2]), "--max-regression", "3%"],
         "max-regression: not an option of `gate allowance`"),
        ([a, b, "--max-regression", "3%", "--between-runs", str(tmp_path / "gone.json")], "gone.json: no such file"),
        ([a, b, "--max-regression", "3%", "--between-runs", str(tmp_path / "not.json")], "not a JSON document"),
        ([a, b, "--max-regression", "3%", "--between-runs", "ten"],
         "error: between-runs: 'ten' is not a percentage above 0; e.g. 3%; or the file of `vllm-speedtest gate "
         "allowance RUN RUN RUN --save FILE`"),
        ([a, b, "--max-regression", "3%", "--save", "x.json"], "save: only with `gate allowance"),
    ]  # fmt: skip
    for args, said in cases:
        status = main(["gate", *args])
        captured = capsys.readouterr()
        assert status == 2 and captured.out == "" and said in captured.err, (args, captured.err)
        assert captured.err.count("\n") == 1
    assert not (tmp_path / "x.json").exists()
