"""Repeats combined per cell, the control's drift, compare under drift and rounds, a speculative config read."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest

from toolkit.base.schema import COLUMNS, Measurement
from toolkit.matrix.control import control_block
from toolkit.method.drift import (
    CELL_DRIFT_COLUMNS,
    cell_drift,
    cell_drift_columns,
    control_fit,
    run_drift,
    within_drift,
)
from toolkit.method.spread import t_quantile
from toolkit.reports import compare, compare_drift
from toolkit.reports.spread_text import drift_note
from toolkit.reports.tables import TTFT_NOTE, decode_matrix, footnotes
from toolkit.results.documents.run_blocks import ControlReading
from toolkit.results.rounds import combine, combine_rounds, planned_rounds, still_to_do
from toolkit.results.runs import run_control_fit
from toolkit.servers.speculative import speculative_config


def dec(total: float, ci: float | None = None, n: int = 1, round_: int | None = None, **extra: object) -> Measurement:
    return Measurement("decode", 1024, "1K", n, "Valid", total_tok_s=total, per_request_tok_s=total / n,  # type: ignore[arg-type]
                       total_tok_s_ci=ci, round=round_, **extra)  # fmt: skip


def at(seconds: float) -> str:
    return f"2026-12-03T10:{int(seconds) // 60:02d}:{int(seconds) % 60:02d}+00:00"


def runs(drift_a: float | None, drift_b: float | None, **named: list[Measurement]) -> pd.DataFrame:
    drifts = {"A": drift_a, "B": drift_b}
    rows = [{"run": label, **m.to_dict(), "run_drift": drifts[label]} for label, ms in named.items() for m in ms]
    return pd.DataFrame(rows, columns=["run", *COLUMNS, "run_drift"])


def runs_on_lines(controls: dict[str, list[Measurement]], **named: list[Measurement]) -> pd.DataFrame:
    """Runs as load_runs gives them: each row placed on its run's control line (the controls' start times)."""
    rows = []
    for label, ms in named.items():
        info = {"control": control_block(controls[label], 2.0)}
        line = run_control_fit(info)
        rows += [{"run": label, **m.to_dict(), "run_drift": run_drift(info),
                  **cell_drift_columns(cell_drift(line, m.started_at))} for m in ms]  # fmt: skip
    return pd.DataFrame(rows, columns=["run", *COLUMNS, "run_drift", *CELL_DRIFT_COLUMNS])


def test_rounds_are_planned_round_after_round_and_resumed_by_round() -> None:
    keys = [("prefill", 512, 1), ("decode", 512, 1)]
    assert planned_rounds(keys, 2) == [(keys[0], 1), (keys[1], 1), (keys[0], 2), (keys[1], 2)]
    earlier = [dec(100.0, round_=1), replace(dec(0.0, round_=2), status="Error", total_tok_s=None)]
    earlier = [replace(m, phase="decode", context_tokens=512) for m in earlier]
    assert still_to_do(keys, 2, earlier) == [(keys[0], 1), (keys[0], 2), (keys[1], 2)]


def test_a_cell_of_three_rounds_shows_the_median_its_range_and_spread() -> None:
    rows = [dec(300.0, 3.0, round_=1, started_at=at(0)), dec(360.0, 5.0, round_=2, started_at=at(100)),
            dec(330.0, 4.0, round_=3, started_at=at(230)),
            replace(dec(10.0, round_=4), disturbed="client event loop blocked 2.0 s")]  # fmt: skip
    cell = combine(rows)
    assert cell.started_at == at(110)  # the mean of the usable rounds' starts: where the control line places it
    assert (cell.total_tok_s, cell.total_tok_s_ci, cell.repeats) == (330.0, 4.0, 3)
    assert (cell.total_tok_s_repeat_min, cell.total_tok_s_repeat_max, cell.round) == (300.0, 360.0, None)
    assert cell.total_tok_s_repeat_ci == pytest.approx(4.303 * 30.0 / 3**0.5, rel=1e-3)
    assert combine([rows[0]]) is rows[0]  # one round: the record itself
    assert [m.total_tok_s for m in combine_rounds([dec(1.0), dec(2.0)])] == [2.0]  # no rounds: the latest record
    shown = decode_matrix(pd.DataFrame([cell.to_dict()], columns=list(COLUMNS))).iloc[0, 0]
    assert shown.startswith("330.0 ± 4.0 · 3 rounds 300.0–360.0"), shown


def test_the_control_gives_the_runs_drift_and_the_reports_note() -> None:
    controls = [dec(350.0, 5.0, round_=0, started_at=at(0)),
                dec(400.0, round_=1, disturbed="paused", started_at=at(60)),
                dec(280.0, 4.0, round_=1, started_at=at(120))]  # fmt: skip
    block = control_block(controls, 5.0)
    assert block["change"] == pytest.approx(280 / 350 - 1) and block["drift"] == pytest.approx(0.2)
    assert block["change_low"] < -0.2 < block["change_high"] < 0  # the readings' own intervals, not the range
    info = {"control": block}
    assert run_drift(info) == pytest.approx(0.2) and run_drift({}) is None
    note = drift_note(info)
    assert note is not None and "350.0 → 280.0 tok/s: a trend of -20.0 %" in note and "within drift" in note
    assert drift_note({"control": control_block(controls[:1], 5.0)}) is None
    assert footnotes(pd.DataFrame([dec(1.0).to_dict()]), run_info=info)[-2:] == [note, TTFT_NOTE]
    old = {"control": {**block, "drift_basis": None, "drift": 0.25}}  # a run recorded with the range
    assert "a range of 25.0 %" in (drift_note(old) or "") and run_drift(old) == 0.25


def test_drift_is_the_trend_of_the_control_not_its_range() -> None:
    """Five readings that scatter around 310 tok/s without a trend: a range of 14 %, a change near 0 whose interval
    holds 0; a steady decline of 3 % a reading: a change near -12 % whose interval leaves out 0."""
    flat = [dec(v, 10.0, round_=i, started_at=at(60 * i)) for i, v in enumerate([300.0, 330.0, 290.0, 320.0, 305.0])]
    block = control_block(flat, 5.0)
    assert abs(block["change"]) < 0.05 < 330 / 290 - 1 and block["change_low"] < 0 < block["change_high"]
    falling = [dec(300.0 * 0.97**i, 3.0, round_=i, started_at=at(60 * i)) for i in range(5)]
    block = control_block(falling, 5.0)
    assert block["change"] == pytest.approx(0.97**4 - 1, rel=1e-6) and block["change_high"] < 0


@pytest.mark.parametrize(("sub_windows", "recorded", "dof"), [(2, 0.9, 0.9), (2, None, 0.95), (3, None, 1.5),
                                                          (None, None, 1.5)])  # fmt: skip
def test_a_control_readings_half_width_is_read_at_the_dof_it_was_built_with(
    sub_windows: int | None, recorded: float | None, dof: float
) -> None:
    """Two readings 60 s apart, 300 ± 30 and 330 ± 30 tok/s: the slope times the span has the standard error
    sqrt(se_a² + se_b²), each se = 30 / value / t(dof) (as recorded; halves without it: 0.95; 3 parts, or none
    recorded: 1.5), and Welch's dof of the two, 2 dof when the two variances are equal and dof each."""
    readings = [ControlReading(status="Valid", total_tok_s=v, total_tok_s_ci=30.0, sub_windows=sub_windows,
                               window_dof=recorded, started_at=at(60 * i))
                for i, v in enumerate((300.0, 330.0))]  # fmt: skip
    fit = control_fit(readings)
    assert fit is not None and fit.span_s == 60.0
    se_a, se_b = 30 / 300 / t_quantile(dof), 30 / 330 / t_quantile(dof)
    assert fit.slope_se * fit.span_s == pytest.approx(math.sqrt(se_a**2 + se_b**2), rel=1e-9)
    assert fit.dof == pytest.approx((se_a**2 + se_b**2) ** 2 / ((se_a**4 + se_b**4) / dof), rel=1e-9)


def test_compare_reads_each_windows_half_width_at_the_dof_its_record_names() -> None:
    """A folder made before `window_dof` was recorded (halves at 0.95) and one made after (0.9) compare: each
    half-width is taken back to the standard error it was built from, so the same spread gives the same ratio."""
    frame = pd.DataFrame({"total_tok_s": [400.0, 400.0, 400.0], "sub_windows": [2, 2, 3],
                          "total_tok_s_ci": [10 * t_quantile(0.95), 10 * t_quantile(0.9), 10 * t_quantile(2.0)],
                          "window_dof": [math.nan, 0.9, math.nan]})  # fmt: skip
    spreads = compare_drift.with_round_spreads(frame, ["total_tok_s"])
    assert spreads["total_tok_s_dof"].tolist() == [0.95, 0.9, 2.0]  # 3 parts: as compare read them then
    before = [dec(400.0, 10 * t_quantile(0.95), sub_windows=2)]
    after = [dec(400.0, 10 * t_quantile(0.9), sub_windows=2, window_dof=0.9)]
    table = compare.ratio_table(runs(None, None, A=before, B=after), "A", "B")
    alike = compare.ratio_table(runs(None, None, A=before, B=before), "A", "B")
    assert table["total_tok_s_ratio_hw"][0] == pytest.approx(alike["total_tok_s_ratio_hw"][0])
    assert table["total_tok_s_ratio_dof"][0] == pytest.approx(1.65)


def test_a_ten_percent_difference_is_within_a_twenty_percent_drift() -> None:
    a, b = [dec(300.0, 1.0), dec(500.0, 1.0, n=2)], [dec(330.0, 1.0), dec(650.0, 1.0, n=2)]
    plain = compare.ratio_table(runs(None, None, A=a, B=b), "A", "B")
    assert list(plain["total_tok_s_significant"]) == [True, True]  # tight intervals: both significant alone
    table = compare.ratio_table(runs(0.2, 0.05, A=a, B=b), "A", "B")
    assert list(table["drift"]) == [0.2, 0.2]
    assert list(table["total_tok_s_within_drift"]) == [True, False]  # 1.10×: the machine could do it; 1.30×: not
    assert list(table["total_tok_s_significant"]) == [False, True]
    assert table["total_tok_s_ratio_hw"][0] > 0.2 * 1.1  # no control line to correct by: the drift widens it
    shown = list(compare.ratio_display(table)["Total tok/s"])
    assert " within drift (" in shown[0] and "n.s." not in shown[0] and "within drift" not in shown[1]
    assert within_drift(0.9, 0.2) and not within_drift(0.7, 0.2) and not within_drift(0.99, None)
    summaries = list(compare.runs_table(runs(0.2, None, A=a, B=b))["Summary"])
    assert summaries[0].endswith(" · control drift 20.0 %") and "drift" not in summaries[1]


def test_rounds_widen_a_cells_spread_in_compare() -> None:
    a = [replace(dec(300.0, 1.0), repeats=3, total_tok_s_repeat_ci=45.0)]
    b = [dec(330.0, 1.0)]
    table = compare.ratio_table(runs(None, None, A=a, B=b), "A", "B")
    assert table["total_tok_s_significant"].tolist() == [False]  # 15 % across rounds holds a 10 % difference


@pytest.mark.parametrize(
    ("command", "config", "summary"),
    [
        ("vllm serve m --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 2}'",
         {"method": "ngram", "num_speculative_tokens": 2}, "ngram, 2 tokens"),
        ("vllm serve m --speculative_config='{\"method\":\"dflash\"}'", {"method": "dflash"}, "dflash"),
        ("vllm serve m --port 8000", None, None),
        ("vllm serve m --speculative-config notjson", "notjson", "notjson"),
    ],
)  # fmt: skip
def test_speculative_config_is_read_from_the_command(command: str, config: object, summary: str | None) -> None:
    assert speculative_config(command) == (config, summary)


def test_a_scrape_keeps_the_speculative_decoding_counters() -> None:
    """vLLM 0.32's own lines (ngram on CPU): the parser's family filter must let them through."""
    from toolkit.matrix.prometheus import SPEC_ACCEPTED_TOKENS, SPEC_DRAFT_TOKENS, SPEC_DRAFTS, parse_metrics

    labels = '{engine="0",model_name="tiny-llama"}'
    text = "\n".join([
        "# TYPE vllm:spec_decode_num_drafts_total counter", f"vllm:spec_decode_num_drafts_total{labels} 12.0",
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f"vllm:spec_decode_num_draft_tokens_total{labels} 24.0",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f"vllm:spec_decode_num_accepted_tokens_total{labels} 9.0",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny-llama",position="0"} 7.0',
    ]) + "\n"  # fmt: skip
    snapshot = parse_metrics(text)
    assert [snapshot.value(n) for n in (SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED_TOKENS)] == [12.0, 24.0, 9.0]


def test_the_overall_ratio_sums_up_the_cells_and_keeps_the_drift_whole() -> None:
    a, b = [dec(300.0, 3.0), dec(500.0, 5.0, n=2)], [dec(330.0, 3.0), dec(550.0, 5.0, n=2)]
    plain = compare.overall_ratios(compare.ratio_table(runs(None, None, A=a, B=b), "A", "B"))
    assert plain["total_tok_s"].value == pytest.approx(1.1) and plain["total_tok_s"].half_width < 0.05
    text = compare.overall_text(compare.ratio_table(runs(None, None, A=a, B=b), "A", "B"))
    assert text is not None and text.startswith(
        "Overall, B / A (geometric mean of the cells' ratios, 95 %): Total tok/s 1.10× ±0.0"
    )
    drifting = compare.overall_ratios(compare.ratio_table(runs(0.2, 0.05, A=a, B=b), "A", "B"))
    assert drifting["total_tok_s"].half_width > 0.2 * 1.1 / 3**0.5  # a 20 % drift is not averaged away by 2 cells
    shown = compare.overall_text(compare.ratio_table(runs(0.2, 0.05, A=a, B=b), "A", "B")) or ""
    assert "Total tok/s 1.10× ±0.32 within drift (2 cells)" in shown  # 10 % inside a 20 % drift


def test_compare_divides_throughput_by_the_machines_change_between_the_cells() -> None:
    """The machine slows 10 % over each 10-minute run, and run B starts where A ended. The same configuration's
    cells, measured mid-run, read 10 % lower in B: the machine, not the server. Compare reads the change off the
    two control lines (A from its cell to its end, B from its start to its cell), divides the throughput ratios
    by it, and they hold 1; TTFT, which the control does not measure, keeps its plain ratio. Runs of one round
    (two readings each) are not corrected: their drift widens the ratio instead."""
    speed = lambda s: 300.0 * 0.9 ** (s / 600)  # noqa: E731
    controls = {side: [dec(speed(s), 0.01 * speed(s), started_at=at(s)) for s in (start, start + 300, start + 600)]
                for side, start in (("A", 0), ("B", 600))}  # fmt: skip
    a = [dec(speed(300), 3.0, n=4, per_request_tok_s_ci=0.75, ttft_ms=50.0, ttft_ms_ci=1.0, started_at=at(300))]
    b = [dec(speed(900), 3.0, n=4, per_request_tok_s_ci=0.75, ttft_ms=50.0, ttft_ms_ci=1.0, started_at=at(900))]
    plain = compare.ratio_table(runs(None, None, A=a, B=b), "A", "B")
    assert plain["total_tok_s_ratio"][0] == pytest.approx(0.9) and plain["total_tok_s_significant"][0]
    table = compare.ratio_table(runs_on_lines(controls, A=a, B=b), "A", "B")
    assert table["machine_change"][0] == pytest.approx(-0.1, abs=1e-3) and table["drift"][0] == pytest.approx(0.1)
    for q in ("total_tok_s", "per_request_tok_s"):
        assert table[f"{q}_ratio"][0] == pytest.approx(1.0, abs=1e-3) and not table[f"{q}_significant"][0]
        assert table[f"{q}_ratio_hw"][0] > plain[f"{q}_ratio_hw"][0]  # the lines' own uncertainty is added
    assert (
        table["ttft_ms_ratio"][0] == pytest.approx(1.0) and table["ttft_ms_ratio_hw"][0] == plain["ttft_ms_ratio_hw"][0]
    )
    shown = compare.ratio_display(table)
    assert shown[compare.MACHINE_COLUMN].tolist() == ["-10.0 %"] and shown["Total tok/s"][0].startswith("1.00× ±")
    assert compare.MACHINE_COLUMN not in compare.ratio_display(plain).columns
    two = {side: readings[::2] for side, readings in controls.items()}  # one round a run: a line through two
    guarded = compare.ratio_table(runs_on_lines(two, A=a, B=b), "A", "B")
    assert guarded["machine_change"].isna().all() and guarded["total_tok_s_ratio"][0] == pytest.approx(0.9)
    assert guarded["total_tok_s_ratio_hw"][0] > plain["total_tok_s_ratio_hw"][0]  # widened by the drift instead
    overall = compare.overall_ratios(table)["total_tok_s"]
    assert overall.value == pytest.approx(1.0, abs=1e-3) and overall.half_width >= table["total_tok_s_ratio_hw"][0]


@pytest.mark.parametrize(("recorded", "dof"), [(0.9, 0.9), (None, 0.95)])
def test_the_gate_plan_and_the_batch_index_read_a_half_width_at_its_recorded_dof(
    recorded: float | None, dof: float
) -> None:
    from toolkit.batch import index
    from toolkit.reports import gate_planning

    row = {"total_tok_s": 400.0, "total_tok_s_ci": 10 * t_quantile(dof), "sub_windows": 2, "window_dof": recorded}
    assert gate_planning._relative_se(row, "total_tok_s") == pytest.approx(10 / 400)  # the standard error it came from
    assert index._interval(400.0, row["total_tok_s_ci"], row).relative_se == pytest.approx(10 / 400)


def test_a_results_line_holds_a_recorded_dof_the_toolkit_could_write_or_is_refused_in_one_line() -> None:
    from toolkit.base.errors import ResultsError
    from toolkit.results.measurement_row import validated_measurement

    line = {"phase": "decode", "context_tokens": 1024, "context": "1K", "concurrency": 4, "status": "Valid",
            "total_tok_s": 400.0, "total_tok_s_ci": 20.0, "sub_windows": 2}  # fmt: skip
    assert validated_measurement({**line, "window_dof": 0.9}, lambda loc: "results.jsonl:1").window_dof == 0.9
    assert validated_measurement(line, lambda loc: "results.jsonl:1").window_dof is None  # made before: read at 0.95
    with pytest.raises(ResultsError, match=r"^results\.jsonl:1: window_dof: .*greater than or equal to 0\.5"):
        validated_measurement({**line, "window_dof": 1e-9}, lambda loc: f"results.jsonl:1: {loc[0]}")
