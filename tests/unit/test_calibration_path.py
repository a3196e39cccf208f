"""benchmarks/calibration.py judges every interval by the product's own function, never a copy (issue 42): each
kind it checks is computed by the function a report, table or step row shows it with."""

from __future__ import annotations

import argparse
import math
import random
import statistics

import numpy as np
import pandas as pd
import pytest

import benchmarks.calibration as calibration
import toolkit.method.goodput as goodput
import toolkit.method.slo_fraction as slo_fraction
import toolkit.method.window as window
import toolkit.reports.compare as compare
import toolkit.reports.compare_drift as compare_drift
import toolkit.reports.interleaved as interleaved
import toolkit.results.rounds as rounds
from benchmarks.token_truth import Cell, Noise, window_streams
from toolkit.method.drift import cell_drift, control_fit
from toolkit.method.effective_n import design_effect
from toolkit.method.spread import BATCHES, WINDOW_DOF, Interval, ratio_test, t_quantile

CELL = Cell(streams=8, window_s=4.0)


def _records(seed: int, count: int) -> list:
    rng = random.Random(seed)
    return [calibration.record(window_streams(Noise("lockstep"), CELL, rng), CELL.window_s, key=1, round_=r + 1,
                               at_s=60.0 * r) for r in range(count)]  # fmt: skip


def test_calibration_calls_the_products_functions_not_copies() -> None:
    assert calibration.summarize_window is window.summarize_window
    assert calibration.window_spread is window.window_spread
    assert calibration.ratio_table is compare.ratio_table
    assert calibration.with_round_spreads is compare_drift.with_round_spreads
    assert calibration.combine is rounds.combine
    assert calibration.paired_table is interleaved.paired_table
    assert calibration.overall is interleaved.overall
    assert calibration.meeting_fraction is goodput.meeting_fraction
    # the re-implementations issue 42 named are gone
    for name in ("_repeat", "ratio_test", "paired_ratio", "t_quantile"):
        assert not hasattr(calibration, name), name


def test_a_window_is_recorded_with_the_window_spreads_half_widths() -> None:
    rng = random.Random(3)
    results = window_streams(Noise("ar1"), CELL, rng)
    m = calibration.record(results, CELL.window_s)
    spread = window.window_spread(results, 0.0, CELL.window_s)
    summary = window.summarize_window(results, 0.0, CELL.window_s)
    assert m.total_tok_s == summary.total_tok_s
    assert spread.total_tok_s is not None and m.total_tok_s_ci == spread.total_tok_s.half_width
    assert spread.ttft_ms is not None and m.ttft_ms_ci == spread.ttft_ms.half_width
    assert (m.ttft_ms_low, m.ttft_ms_high) == spread.ttft_ms.ends  # shown by its ends, as judge_window records it
    assert m.ttft_ms_low is not None and m.ttft_ms_high is not None and m.ttft_ms_low < m.ttft_ms < m.ttft_ms_high
    assert m.sub_windows == spread.sub_windows == BATCHES == 2
    assert m.window_dof == spread.dof == WINDOW_DOF == 0.9  # recorded, as judge_window records it


def test_the_ratio_is_compares_with_the_windows_own_degrees_of_freedom() -> None:
    a, b = _records(5, 2)
    table = calibration.compare_table([a], [b])
    # with_round_spreads: each window's half-width read at the 0.9 degrees of freedom it was built with (its
    # record's `window_dof`), not its 2 halves less one
    by_hand = ratio_test(Interval(a.total_tok_s, a.total_tok_s_ci, 0.9), Interval(b.total_tok_s, b.total_tok_s_ci, 0.9))
    assert table["total_tok_s_ratio_dof"][0] == pytest.approx(by_hand.interval.dof)
    assert table["total_tok_s_ratio"][0] == pytest.approx(by_hand.interval.value)
    assert table["total_tok_s_ratio_hw"][0] == pytest.approx(by_hand.interval.half_width)
    old = ratio_test(Interval(a.total_tok_s, a.total_tok_s_ci, 1.0), Interval(b.total_tok_s, b.total_tok_s_ci, 1.0))
    assert table["total_tok_s_ratio_hw"][0] != pytest.approx(old.interval.half_width, rel=1e-3)


def test_a_compare_ratio_is_judged_by_the_bounds_its_cell_shows_and_ttft_reads_its_median_on_the_log_scale(
) -> None:  # fmt: skip
    a, b = _records(7, 2)
    table = calibration.compare_table([a], [b])
    by_hand = ratio_test(Interval(a.ttft_ms, a.ttft_ms_ci, log_scale=True),
                         Interval(b.ttft_ms, b.ttft_ms_ci, log_scale=True))  # fmt: skip
    assert table["ttft_ms_ratio_hw"][0] == pytest.approx(by_hand.interval.half_width)
    linear = ratio_test(Interval(a.ttft_ms, a.ttft_ms_ci), Interval(b.ttft_ms, b.ttft_ms_ci)).interval
    assert by_hand.interval.half_width < linear.half_width
    low, high = by_hand.interval.bounds
    shown = compare.ratio_display(table)["TTFT"][0]
    assert f"[{low:.2f}, {high:.2f}]" in shown, shown
    tally = calibration.Tally()
    tally.table("ratio_ttft", table, "ttft_ms")
    assert tally.hits["ratio_ttft"] == [low <= 1.0 <= high]
    assert tally.widths["ratio_ttft"] == [pytest.approx(by_hand.interval.relative)]
    ratio, half_width = table["total_tok_s_ratio"][0], table["total_tok_s_ratio_hw"][0]
    assert f"{compare.format_ratio(ratio)} ±{half_width:.2f}" in compare.ratio_display(table)["Total tok/s"][0]
    tally.table("ratio", table, "total_tok_s")  # throughput: shown and judged as ± its upper side
    assert tally.hits["ratio"] == [abs(ratio - 1) <= half_width]


def test_the_repeat_interval_is_combines_t_half_width_across_rounds() -> None:
    triple = _records(7, 3)
    combined = rounds.combine(triple)
    totals = [m.total_tok_s for m in triple]
    assert combined.total_tok_s == pytest.approx(statistics.fmean(totals))
    assert combined.total_tok_s_repeat_ci == pytest.approx(t_quantile(2) * statistics.stdev(totals) / math.sqrt(3))
    tally = calibration.Tally()
    tally.add("repeat", combined.total_tok_s, combined.total_tok_s_repeat_ci, combined.total_tok_s)
    assert tally.hits["repeat"] == [True]


def test_a_repeated_cells_ratio_goes_through_with_round_spreads() -> None:
    first, second = rounds.combine(_records(8, 3)), rounds.combine(_records(9, 3))
    table = calibration.compare_table([first], [second])
    frame = calibration.runs_frame({"A": [(first, None)], "B": [(second, None)]})
    spreads = compare_drift.with_round_spreads(frame, ["total_tok_s"])
    hw = spreads["total_tok_s_ci"].tolist()
    assert hw == [m.total_tok_s_repeat_ci for m in (first, second)]  # the rounds' spread, not a window's
    assert spreads["total_tok_s_dof"].tolist() == [2.0, 2.0]  # 3 rounds less one
    assert spreads["total_tok_s_rounds"].tolist() == [True, True]
    by_hand = ratio_test(Interval(first.total_tok_s, hw[0], 2.0, rounds=True),
                         Interval(second.total_tok_s, hw[1], 2.0, rounds=True))  # fmt: skip
    assert by_hand.interval.dof == table["total_tok_s_ratio_dof"][0] == 4.0  # the pooled t: 2 + 2
    assert table["total_tok_s_ratio_hw"][0] == pytest.approx(by_hand.interval.half_width)


def test_the_drift_ratio_is_divided_by_the_machines_change_along_the_control_lines() -> None:
    a, b = _records(10, 2)
    readings = [calibration._control(Noise("lockstep"), 1.0, 150.0 * k, k, random.Random(k)) for k in range(4)]
    line = control_fit(readings)
    places = [cell_drift(line, "1970-01-01T00:01:40+00:00"), cell_drift(line, "1970-01-01T00:06:40+00:00")]
    assert all(p is not None for p in places)
    corrected = compare.ratio_table(calibration.runs_frame({"A": [(a, places[0])], "B": [(b, places[1])]}), "A", "B")
    plain = calibration.compare_table([a], [b])
    assert not math.isnan(corrected["machine_change"][0])
    assert corrected["total_tok_s_ratio_hw"][0] != pytest.approx(plain["total_tok_s_ratio_hw"][0], rel=1e-6)


def test_two_windows_ratio_reads_ratio_dof_and_the_drift_ratio_adds_the_lines_change_by_welch() -> None:
    a, b = _records(11, 2)
    readings = [calibration._control(Noise("lockstep"), 1.0, 150.0 * k, k, random.Random(k)) for k in range(4)]
    line = control_fit(readings)
    places = [cell_drift(line, "1970-01-01T00:01:40+00:00"), cell_drift(line, "1970-01-01T00:06:40+00:00")]
    plain = calibration.compare_table([a], [b])
    corrected = compare.ratio_table(calibration.runs_frame({"A": [(a, places[0])], "B": [(b, places[1])]}), "A", "B")
    pooled = 2 * 0.95 - 0.25  # two windows' halves, pooled at 0.95 each, less the ratio's discount: 1.65 measured
    assert plain["total_tok_s_ratio_dof"][0] == pytest.approx(pooled)
    assert plain["total_tok_s_ratio_hw"][0] == pytest.approx(ratio_test(
        Interval(a.total_tok_s, a.total_tok_s_ci, 0.9), Interval(b.total_tok_s, b.total_tok_s_ci, 0.9)
    ).interval.half_width)  # fmt: skip
    cells = sum((m.total_tok_s_ci / m.total_tok_s / t_quantile(0.9)) ** 2 for m in (a, b))
    change, change_dof = corrected["machine_change_se"][0] ** 2, corrected["machine_change_dof"][0]
    welch = (cells + change) ** 2 / (cells**2 / pooled + change**2 / change_dof)
    assert corrected["total_tok_s_ratio_dof"][0] == pytest.approx(welch)


def test_windows_only_measures_the_window_compare_and_drift_kinds_alone() -> None:
    args = argparse.Namespace(windows_only=True, slo_only=False, truth_trials=4, machine_drift=0.05,
                              slo_requests=50)  # fmt: skip
    level = calibration.run_level("independent", 2, args, {"rho": [], "phi": []}, random.Random(1),
                                  np.random.default_rng(1))  # fmt: skip
    counts = {k: v["n"] for k, v in level["kinds"].items()}
    assert counts["ratio"] == 3 and counts["drift_ratio"] == 2 and counts["total_tok_s"] == 6
    assert counts["interleaved"] == counts["interleaved_overall"] == counts["slo_fraction"] == 0


def test_interleaved_coverage_counts_paired_table_and_overall() -> None:
    tally = calibration.Tally()
    calibration.interleaved_coverage(Noise("lockstep"), 2, 0.05, random.Random(4), tally)
    shape = (calibration.INTERLEAVED_ROUNDS, calibration.INTERLEAVED_CELLS, 0.05, calibration.INTERLEAVED_CELL)
    rng, cells, overall, held = random.Random(4), calibration.INTERLEAVED_CELLS, [], []
    for j in range(2):  # each compare on its own, as interleaved.md would show it
        a, b = calibration.interleaved_rounds(Noise("lockstep"), rng, 1.0, *shape, first_key=1 + j * cells)
        table, whole = interleaved.paired_table(a, b), interleaved.overall(a, b)["total_tok_s"]
        pairs = zip(table["total_tok_s_ratio"], table["total_tok_s_ratio_hw"], strict=True)
        held += [abs(r - 1) <= hw for r, hw in pairs]
        overall.append(abs(whole[0] - 1) <= whole[1])
    assert len(held) == 2 * cells and tally.hits["interleaved"] == held
    assert tally.hits["interleaved_overall"] == overall


def test_slo_coverage_is_fraction_bounds_of_the_steps_batches_at_their_effective_count() -> None:
    margins, true = calibration.slo_steps(np.random.default_rng(2), 4, 200, 0.9, 0.0)
    assert true == pytest.approx(goodput.ServiceLevel().target)
    tally = calibration.Tally()
    calibration.slo_coverage(np.random.default_rng(2), 4, 200, 0.9, 0.0, tally)
    expected = []
    for row in margins:
        flags = [bool(x) for x in row <= 1]
        batches = slo_fraction.batch_fraction(flags)
        deff = design_effect(row, sum(flags) / len(flags))
        assert deff > 1.0
        spread = [batches] if batches else []
        low, high = slo_fraction.fraction_bounds(sum(flags), len(flags), spread, len(flags) / deff)
        expected.append(low <= true <= high)
    assert tally.hits["slo_fraction"] == expected


def test_a_calibration_step_is_judged_as_summarize_step_judges_a_steps_records() -> None:
    margins = calibration.slo_steps(np.random.default_rng(5), 1, 300, 0.95, 0.0)[0][0]
    sent = np.arange(300) * 0.1  # every request sent when due, its first token `margin` x the limit later
    records = pd.DataFrame({"step": 0, "offered_rate": 10.0, "request": np.arange(300), "scheduled_s": sent,
                            "sent_s": sent, "first_token_s": sent + margins * calibration.SLO_LEVEL.ttft_ms / 1e3,
                            "last_token_s": sent + 1.0, "chunk_times_s": [[t] for t in sent + 1.0],
                            "input_tokens": 10, "output_tokens": 1, "error": None})  # fmt: skip
    row = goodput.summarize_step(goodput.complete_records(records), calibration.SLO_LEVEL, trim=0.0)
    found = goodput.meeting_fraction(calibration.step_latencies(margins), calibration.SLO_LEVEL)
    assert (row.slo_fraction_low, row.slo_fraction_high) == pytest.approx((found.low, found.high))
    assert row.slo_fraction_deff == pytest.approx(found.deff)


def test_the_correlation_levels_are_stated_between_the_intervals_batches() -> None:
    mapping = [(0.5, 0.25), (0.9, 0.7)]
    assert calibration.invert(mapping, 0.25) == pytest.approx(0.5)
    assert calibration.invert(mapping, 0.475) == pytest.approx(0.7)
    assert calibration.level_names(["independent", "ar1"], [0.25, 0.5]) == ["independent", "ar1@0.25", "ar1@0.5"]


def test_slo_only_reports_just_the_kinds_it_measured() -> None:
    def level(slo: float) -> dict:
        kinds = {k: {"coverage": math.nan, "width": math.nan, "n": 0} for k in (*calibration.INTERVALS,
                                                                               *calibration.SHOWN_ONLY)}  # fmt: skip
        return {"kinds": {**kinds, "slo_fraction": {"coverage": slo, "width": 0.01, "n": 100}}}

    levels = {"independent": level(0.99), "ar1@0.25": level(0.95)}
    assert calibration.outside(levels) == ["slo_fraction/independent:0.990"]
    line = calibration.calibration_line(1, 100, levels, {})
    assert "slo_fraction=0.990,0.950 min=0.950 max=0.990" in line and "total_tok_s" not in line
    assert calibration._table(levels).splitlines()[2].startswith("slo_fraction")


def test_the_machine_compares_plain_side_reads_each_rounds_own_intervals() -> None:
    a, b = calibration.interleaved_rounds(Noise("lockstep"), random.Random(6), 1.0, 2, 2, 0.0, Cell(window_s=2.0))
    records = [calibration.Measurement.from_dict(row) for row in b[1].to_dict("records")]
    assert all(m.total_tok_s_ci is not None and m.sub_windows == BATCHES for m in records)
    plain = calibration.compare_table([calibration.Measurement.from_dict(r) for r in a[1].to_dict("records")],
                                      records)  # fmt: skip
    assert plain["total_tok_s_ratio_hw"].notna().all()  # without them compare had no interval and marked nothing


def test_the_slo_bounds_benchmark_judges_the_products_interval_and_puts_it_back() -> None:
    import benchmarks.slo_fraction_bounds as slo_bounds

    assert slo_bounds.VARIANTS["product"] is slo_fraction.fraction_bounds
    assert slo_bounds.jeffreys(0, 10)[0] == 0.0 and slo_bounds.jeffreys(10, 10)[1] == 1.0
    low, high = slo_bounds.jeffreys(5, 500)
    cp_low, cp_high = slo_fraction.fraction_interval(5, 500)
    assert cp_low < low < 0.01 < high < cp_high  # Jeffreys is the narrower, inside Clopper-Pearson
    found = slo_bounds.measure(slo_bounds.VARIANTS["jeffreys"], seed=1, steps=20, requests=100)
    assert goodput.fraction_bounds is slo_fraction.fraction_bounds  # the product's, restored
    assert set(found) == {"independent", "ar1@0.25", "ar1@0.5", "drift"}
    assert all(0 <= above <= 1 - coverage for coverage, above in found.values())
