"""The regression gate's pure parts: limits, intervals, verdicts, exit status, rounds planning (by hand), text."""

from __future__ import annotations

import json
import math
from pathlib import Path
from xml.etree import ElementTree

import pandas as pd
import pytest

from toolkit.base.errors import ParamsError
from toolkit.method.gate import (
    QUANTITIES,
    RatioInterval,
    Verdict,
    exit_status,
    family_level,
    paired_interval,
    parse_limits,
    verdict,
    widened,
)
from toolkit.method.gate_plan import Spread, more_rounds, plan, rounds_needed
from toolkit.method.spread import t_quantile
from toolkit.reports.compare_overall import overall_text
from toolkit.reports.gate_document import GateDocument, gate_document
from toolkit.reports.gate_planning import interleaved_spreads, run_spreads
from toolkit.reports.gate_plots import VERDICT_COLORS, gate_figure
from toolkit.reports.gate_ratios import APART_REASON, CellRatio, Judged, interleaved_intervals, judge
from toolkit.reports.gate_text import GateContext, figure, gate_line, junit_xml, summary_markdown

pytestmark = pytest.mark.unit

TOTAL, TTFT = QUANTITIES["total_tok_s"], QUANTITIES["ttft_ms"]
CELLS = (CellRatio("8K", 1, 0.99), CellRatio("8K", 4, 0.90), CellRatio("8K", 2, 0.93))


def interval(ratio: float, low: float, high: float, rounds: int = 4) -> RatioInterval:
    return RatioInterval(ratio, low, high, 0.975, 0.01, rounds - 1, rounds)


def test_limits_parse_a_bare_percentage_and_per_quantity_ones() -> None:
    assert parse_limits("3%") == {"total_tok_s": 0.03, "per_request_tok_s": 0.03}
    assert parse_limits("total_tok_s=3%,ttft_ms=10%") == {"total_tok_s": 0.03, "ttft_ms": 0.10}
    assert parse_limits("5 %,tpot_ms=2.5%") == {"total_tok_s": 0.05, "per_request_tok_s": 0.05, "tbt_ms": 0.025}
    assert parse_limits("total_tok_s=1%,3%") == {"total_tok_s": 0.01, "per_request_tok_s": 0.03}  # named wins


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("3", "'3' is not a percentage above 0; write it with %, e.g. 3%"),
        ("−5 %", "'−5 %' is not a percentage above 0"),
        ("-5%", "'-5%' is not a percentage above 0"),
        ("0%", "allowed: a percentage above 0 and below 100 %"),
        ("100%", "allowed: a percentage above 0 and below 100 %"),
        ("speed=3%", "unknown quantity 'speed'; allowed: total_tok_s, per_request_tok_s, ttft_ms, tbt_ms"),
        ("ttft_ms=10%,ttft_ms=5%", "ttft_ms given twice"),
        ("total_tok_s=1%,total_tok_s=2%", "total_tok_s given twice"),
        ("3%,5%", "gives the default quantities two limits; give one"),
        ("", "allowed: 3% or total_tok_s=3%,ttft_ms=10%"),
    ],
)
def test_bad_limits_are_one_line_with_exit_status_2(text: str, said: str) -> None:
    with pytest.raises(ParamsError) as caught:
        parse_limits(text)
    assert said in caught.value.line and "\n" not in caught.value.line and caught.value.exit_code == 2


def test_three_verdicts_by_hand_for_throughput_and_latency() -> None:
    """Total tok/s allowed −3 % (ratio ≥ 0.97); TTFT allowed +10 % (ratio ≤ 1.10)."""
    assert verdict(interval(0.942, 0.925, 0.959), 0.03, True) is Verdict.FAIL
    assert verdict(interval(0.99, 0.975, 1.02), 0.03, True) is Verdict.PASS
    assert verdict(interval(0.975, 0.96, 0.99), 0.03, True) is Verdict.INCONCLUSIVE
    assert verdict(interval(0.99, 0.97, 1.01), 0.03, True) is Verdict.PASS  # on the limit: not beyond it
    assert verdict(interval(1.15, 1.12, 1.20), 0.10, False) is Verdict.FAIL
    assert verdict(interval(0.97, 0.90, 1.05), 0.10, False) is Verdict.PASS
    assert verdict(interval(1.08, 1.05, 1.15), 0.10, False) is Verdict.INCONCLUSIVE
    wide = widened(interval(1.0, 0.99, 1.01), 0.10)  # apart: ±10 % between runs, added whole
    assert (wide.low, wide.high) == pytest.approx((0.99 / 1.1, 1.01 * 1.1))


def test_exit_status_and_how_inconclusive_counts() -> None:
    p, f, i = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE
    assert [exit_status([p, p]), exit_status([p, f, i]), exit_status([p, i])] == [0, 1, 3]
    assert exit_status([p, i], inconclusive=p) == 0 and exit_status([p, i], inconclusive=f) == 1
    assert family_level(1) == 0.95 and family_level(2) == pytest.approx(0.975) and family_level(4) == 0.9875


def test_paired_interval_by_hand() -> None:
    """Rounds' ratios 0.90, 0.95, 0.90, 0.95: logs −0.1053605 and −0.0512933, mean −0.0783269, sample sd
    0.0312157, se 0.0156079; t(3, 97.5 %) = 3.182446: exp(−0.0783269 ∓ 0.0496706) = 0.87986, 0.97175."""
    found = paired_interval([100.0] * 4, [90.0, 95.0, 90.0, 95.0], 0.95)
    assert found is not None and found.rounds == 4 and found.dof == 3
    assert found.ratio == pytest.approx(math.sqrt(0.9 * 0.95))
    assert (found.low, found.high) == pytest.approx((0.87986, 0.97175), abs=1e-5)
    assert found.se == pytest.approx(0.0156079, abs=1e-7)
    assert paired_interval([100.0], [90.0], 0.95) is None
    assert paired_interval([100.0, math.nan, 100.0], [90.0, 90.0, 0.0], 0.95) is None


def test_rounds_and_window_planned_by_hand() -> None:
    """A cell ±2 % (standard error) in 10 s windows, 2 cells, 1 % between rounds: one round's variance at 10 s
    2 × 0.02² / 2 + 0.01² = 0.0005. To detect 3 % (δ = −ln 0.97 = 0.0304592) at 97.5 % with 80 % power:
    7 rounds: (t(6, .9875) 2.96869 + t(6, .80) 0.90570) √(0.0005 / 7) = 0.032745 > δ;
    8 rounds: (2.84124 + 0.89603) √(0.0005 / 8) = 0.029546 <= δ. At 20 s the variance is 0.0003 and 6 rounds
    are needed: 8 × 10 s is the least measuring time (6 × 20 = 120, 5 × 30 = 150)."""
    spread = Spread(within=0.02, window_s=10.0, cells=2, between=0.01)
    assert spread.round_variance(10.0) == pytest.approx(0.0005) and spread.round_variance(20.0) == pytest.approx(3e-4)
    assert rounds_needed(0.0005, -math.log(0.97), level=0.975) == 8
    assert rounds_needed(0.0003, -math.log(0.97), level=0.975) == 6
    found = plan(spread, 0.03, level=0.975)
    assert (found.window_s, found.rounds, found.rounds_at_measured) == (10.0, 8, 8)
    assert plan(spread, 0.10, level=0.975).rounds == 4  # at least 4 rounds (A B B A)
    # With 30 s around each window: 8 × 40 = 320, 7 × 45 = 315, 6 × 50 = 300, 5 × 60 = 300 (the shorter wins)
    slow = Spread(within=0.02, window_s=10.0, cells=2, between=0.01, overhead_s=30.0)
    assert (plan(slow, 0.03, level=0.975).window_s, plan(slow, 0.03, level=0.975).rounds) == (20.0, 6)
    assert rounds_needed(0.0005, 0.0) is None


def test_more_rounds_for_an_inconclusive_gate_by_hand() -> None:
    """se 0.01 over 4 rounds: a round's sd 0.02; 0.02 from the limit: (t1 + t2) / √n <= 1;
    n = 12: (2.59309 + 0.87553) / √12 = 1.0013; n = 13: (2.56003 + 0.87261) / √13 = 0.9520: 9 more."""
    assert more_rounds(0.01, 4, 0.02, 0.975) == 9
    assert more_rounds(0.01, 4, 0.0, 0.975) is None


def frame(total: float, per_request: float, cells: tuple[int, ...] = (1, 2)) -> pd.DataFrame:
    rows = [{"phase": "decode", "context_tokens": 64, "context": "64", "concurrency": n, "status": "Valid",
             "total_tok_s": total * n, "per_request_tok_s": per_request, "ttft_ms": 5.0, "disturbed": None}
            for n in cells]  # fmt: skip
    return pd.DataFrame(rows)


def test_interleaved_intervals_judged_and_shown() -> None:
    a = {r: frame(100, 50) for r in (1, 2, 3, 4)}
    b = {1: frame(90, 45), 2: frame(95, 47.5), 3: frame(90, 45), 4: frame(95, 47.5)}
    found = interleaved_intervals(a, b, ["total_tok_s", "per_request_tok_s"], 0.95)
    total, cells, per_cell = found["total_tok_s"]
    assert total is not None and cells == 2 and (total.low, total.high) == pytest.approx((0.87986, 0.97175), abs=1e-5)
    assert (per_cell[0].context, per_cell[0].concurrency) == ("64", 1)
    assert per_cell[0].ratio == pytest.approx(math.sqrt(0.9 * 0.95))
    judged = judge(found, [TOTAL, QUANTITIES["per_request_tok_s"]], {"total_tok_s": 0.03, "per_request_tok_s": 0.20},
                   allowance=None)  # fmt: skip
    assert [j.verdict for j in judged] == [Verdict.INCONCLUSIVE, Verdict.PASS]
    context = GateContext("interleaved", "base", "cand", 4, 0.95)
    line = gate_line(judged[0], context)
    assert line.startswith("INCONCLUSIVE decode total tok/s: 0.925× [0.880, 0.972], allowed −3 %; about ")
    assert gate_line(judged[1], context) == "PASS decode per-request tok/s: 0.925× [0.880, 0.972], allowed −20 %"
    with pytest.raises(ValueError, match="no decode cell in common"):
        interleaved_intervals(a, {r: frame(90, 45, cells=(4,)) for r in (1, 2, 3, 4)}, ["total_tok_s"], 0.95)


def test_the_line_of_the_issue_and_an_apart_gate() -> None:
    failed = Judged(TOTAL, 0.03, interval(0.942, 0.925, 0.959), Verdict.FAIL, 2, cell_ratios=CELLS)
    context = GateContext("interleaved", "base", "cand", 4, 0.975)
    assert gate_line(failed, context) == "FAIL decode total tok/s: 0.942× [0.925, 0.959], allowed −3 %"
    apart = RatioInterval(1.55, 1.3, 2.0, 0.975, 0.1, 1.5, 0)
    found = {"total_tok_s": (apart, 3, ()), "ttft_ms": (apart, 3, ())}
    unjudged = judge(found, [TOTAL], {"total_tok_s": 0.03}, allowance=None)[0]
    assert unjudged.verdict is Verdict.INCONCLUSIVE and unjudged.reason == APART_REASON
    command = "vllm-speedtest interleave --a-url http://a --b-url http://b --rounds 4 --out OUT"
    text = gate_line(unjudged, GateContext("apart", "a", "b", 0, 0.975, interleave_command=command))
    assert text.endswith(f"{APART_REASON}; to settle it, measure them interleaved: {command}")
    allowed = judge(found, [TTFT], {"ttft_ms": 0.10}, allowance=0.10)[0]  # latency 1.55× even after ±10 %
    assert allowed.verdict is Verdict.FAIL and allowed.interval is not None
    assert allowed.interval.low == pytest.approx(1.3 / 1.1)
    assert gate_line(allowed, context).endswith("allowed +10 %; measured apart, widened by ±10 % between runs")


def test_junit_summary_figure_and_json(tmp_path: Path) -> None:
    failed = Judged(TOTAL, 0.03, interval(0.942, 0.925, 0.959), Verdict.FAIL, 3, cell_ratios=CELLS)
    unsure = Judged(TTFT, 0.10, interval(1.08, 1.05, 1.15), Verdict.INCONCLUSIVE, 3, more_rounds=5)
    context = GateContext("interleaved", "base <b>", "cand", 4, 0.975)
    root = ElementTree.fromstring(junit_xml([failed, unsure], context))
    cases = root.findall("testsuite/testcase")
    assert [c.get("name") for c in cases] == ["decode total tok/s", "decode TTFT"]
    assert cases[0].find("failure").get("message") == gate_line(failed, context)  # type: ignore[union-attr]
    assert cases[1].find("skipped") is not None and root.find("testsuite").get("failures") == "1"  # type: ignore[union-attr]
    strict = GateContext("interleaved", "b", "c", 4, 0.975, inconclusive=Verdict.FAIL)
    assert ElementTree.fromstring(junit_xml([unsure], strict)).find("testsuite/testcase/failure") is not None
    text = summary_markdown([failed, unsure], context)
    assert text.startswith(
        "# Regression gate: cand / base &lt;b&gt;\n\n**FAIL** (exit 1): 1 fail, 0 pass, 1 inconclusive"
    )
    assert "| FAIL | decode total tok/s | 0.942× | [0.925, 0.959] | −3 % (0.970×) | 3 |  |" in text
    assert "each interval at 97.5 % (95 % over the 2 quantities gated together, Bonferroni)" in text
    assert "| decode total tok/s | 8K | 4 | 0.900× |\n| decode total tok/s | 8K | 2 | 0.930× |" in text
    assert "8K | 1 |" not in text  # 0.99× is within the limit: not a cell that drove the failure
    drawn = figure([failed]).splitlines()
    row = drawn[0]
    assert row.startswith("decode total tok/s ") and row.endswith("  fail")
    assert row.index("[") < row.index("●") < row.index("]") < row.index("|") < row.index(":")
    path = tmp_path / "gate.json"
    gate_document([failed, unsure], context).save(path)
    back = GateDocument.load(path)
    assert back.exit_status == 1 and back.schema_version is not None and back.quantities[0].verdict is Verdict.FAIL
    assert [c.ratio for c in back.quantities[0].failing_cells] == [0.90, 0.93]
    assert json.loads(path.read_text())["quantities"][1]["more_rounds"] == 5


def test_compares_overall_line_marks_a_ratio_off_1_between_runs_measured_apart() -> None:
    row: dict[str, object] = {"phase": "decode", "drift": None}
    for q, (ratio, hw) in {
        "total_tok_s": (1.55, 0.44),
        "per_request_tok_s": (1.02, 0.10),
        "ttft_ms": (1.0, 0.1),
    }.items():
        row |= {f"{q}_ratio": ratio, f"{q}_ratio_hw": hw, f"{q}_ratio_dof": 4.0}
    text = overall_text(pd.DataFrame([row])) or ""
    # One cell: the overall ratio is the cell's own, interval and all (its upper side read on the log scale).
    assert "Total tok/s 1.55× ±0.44 (1 cell)†;" in text and "Per request tok/s 1.02× ±0.10 (1 cell);" in text
    assert text.endswith("† The interval leaves out 1, but the runs were measured apart: not a verdict. On a "
                         "machine whose speed drifts 5 % from one run to the next, 55% of compares of a server with "
                         "itself left out 1 this way, and 2.5% measured interleaved (benchmarks/calibration.py): "
                         "`toolkit interleave` separates the change from the machine; `vllm-speedtest gate` calls this "
                         "inconclusive unless given a between-run allowance (`--between-runs`).")  # fmt: skip


def test_the_gate_figure_colours_each_interval_by_its_verdict() -> None:
    failed = Judged(TOTAL, 0.03, interval(0.942, 0.925, 0.959), Verdict.FAIL, 3)
    passed = Judged(TTFT, 0.10, interval(0.98, 0.95, 1.02), Verdict.PASS, 3)
    missing = Judged(QUANTITIES["tbt_ms"], 0.05, None, Verdict.INCONCLUSIVE, 0, "not measured in enough cells")
    axes = gate_figure([failed, passed, missing], title="cand / base").axes[0]
    assert [t.get_text() for t in axes.get_yticklabels()] == ["decode total tok/s", "decode TTFT", "decode TPOT"]
    colours = {line.get_color() for line in axes.get_lines() if line.get_marker() == "o"}
    assert colours == {VERDICT_COLORS[Verdict.FAIL], VERDICT_COLORS[Verdict.PASS]}
    assert any("not measured" in t.get_text() for t in axes.texts)


def cell_row(total: float, **extra: float) -> dict[str, object]:
    return {"phase": "decode", "context_tokens": 64, "context": "64", "concurrency": 1, "status": "Valid",
            "total_tok_s": total, "sub_windows": 3, "measured_s": 10.0, "disturbed": None, **extra}  # fmt: skip


def test_a_runs_spread_read_for_the_plan_by_hand() -> None:
    """A cell ±2 % (standard error: the half-width 2 % × t(1.5 dof)) and, over 4 repeats, a round's sd of 5 %
    (the repeats' half-width 5 % × t(3) / √4): between rounds sqrt(0.05² − 0.02²) = 0.0458258 a side, √2 of it
    for a pair, 0.0648074. Interleaved: 1 % a cell, rounds' log ratios 0, ln 1.04, 0, ln 1.04 (sample variance
    4 × 0.0196104² / 3 = 0.000512755) less the windows' 2 × 0.01² = 0.0002: between sqrt(0.000312755) = 0.0176849."""
    half = 0.02 * 100 * t_quantile(1.5)
    repeat = 0.05 * 100 * t_quantile(3) / 2
    frame = pd.DataFrame([cell_row(100.0, total_tok_s_ci=half, total_tok_s_repeat_ci=repeat, repeats=4)])
    spread, source = run_spreads(frame, drift=None, quantities=["total_tok_s"])["total_tok_s"]
    assert (spread.within, spread.window_s, spread.cells) == (pytest.approx(0.02), 10.0, 1)
    assert spread.between == pytest.approx(0.0648074, abs=1e-6) and source == "the run's repeats"
    drift_only = run_spreads(pd.DataFrame([cell_row(100.0, total_tok_s_ci=half)]), 0.05, ["total_tok_s"])
    assert drift_only["total_tok_s"][0].between == pytest.approx(math.log(1.05))
    one = 0.01 * 100 * t_quantile(1.5)
    a = {r: pd.DataFrame([cell_row(100.0, total_tok_s_ci=one)]) for r in (1, 2, 3, 4)}
    factors = {1: 1.0, 2: 1.04, 3: 1.0, 4: 1.04}
    b = {r: pd.DataFrame([cell_row(100.0 * f, total_tok_s_ci=one * f)]) for r, f in factors.items()}
    spread, source = interleaved_spreads(a, b, ["total_tok_s"])["total_tok_s"]
    assert spread.within == pytest.approx(0.01) and source == "4 interleaved rounds"
    assert spread.between == pytest.approx(0.0176849, abs=1e-6)
