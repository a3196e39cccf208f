"""The search's next probe and result (pure), and the sweep's files: strict JSON lines, records, a torn tail."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from toolkit.method.goodput import RECORD_COLUMNS
from toolkit.rates.files import (
    STEPS_FILE,
    json_safe,
    rates_dir,
    read_records,
    read_steps,
    records_frame,
    step_line,
    write_step,
)
from toolkit.rates.search import finite_upper, next_probe, requests_to_show, search_result


def steps(*pairs: tuple[float, bool | float], served: float = 0.0, requests: int = 400) -> list[dict]:
    """Step rows: (rate, met) with every or no request meeting the level, or (rate, fraction meeting it)."""
    fraction = lambda met: float(met) if isinstance(met, bool) else met  # noqa: E731
    return [{"offered_rate": r, "slo_met": fraction(met) >= 0.99, "slo_fraction": fraction(met), "requests": requests,
             "request_throughput": served} for r, met in pairs]  # fmt: skip


def probe(rows: list[dict], precision: float = 0.1) -> float | None:
    return next_probe(rows, precision, 0.99)


def test_the_probe_is_the_bracket_midpoint_until_narrow_enough() -> None:
    assert probe(steps((1, True), (2, True), (2, True), (4, False), (8, False))) == 3.0
    assert probe(steps((1, True), (2, True), (2, True), (2.15, False))) is None  # within 10 % of 2
    assert probe(steps((1, True), (2, True), (2, True), (2.15, False)), 0.05) == pytest.approx(2.075)


def test_the_highest_rate_meeting_below_a_failure_is_run_again_before_it_ends_the_bracket() -> None:
    """One step that met the level can be one without a burst (benchmarks/slo_search.py): a second, pooled with
    it, must meet too before the rate is the bracket's lower end."""
    once = steps((1, True), (2, True), (4, False))
    assert probe(once) == 2 and search_result(once, 0.99)["bracket"] == [None, 4]
    burst = once + steps((2, 0.9))  # the second step at 2 had a burst: pooled (0.95), 2 fails
    assert probe(burst) == 1 and search_result(burst, 0.99)["bracket"] == [None, 2]
    assert search_result(burst + steps((1, True)), 0.99)["bracket"] == [1, 2]


def test_no_probe_without_a_bracket() -> None:
    assert probe(steps((1, False), (2, False))) is None  # nothing met the level
    assert probe(steps((1, True), (2, True))) is None  # nothing failed it


def test_a_pass_above_a_failure_does_not_widen_the_bracket() -> None:
    """A noisy pass above the first failing rate is not trusted: the bracket stays below the failure."""
    assert probe(steps((1, True), (1, True), (2, False), (4, True))) == 1.5
    assert search_result(steps((1, True), (1, True), (2, False), (4, True)), 0.99) == {
        "highest_rate": 1, "bracket": [1, 2], "undecided": [], "requests_to_show": 368, "too_few": []}  # fmt: skip


def test_a_point_fraction_is_not_a_verdict_and_an_undecided_rate_is_run_again() -> None:
    """60 of 60 meeting the level show at least 0.94, not 0.99: undecided. Inside the bracket such a rate is
    probed again (pooled), up to `repeats` more times; then the search bisects around it and reports it."""
    few = steps((1, True), (1, True), (4, False), requests=400) + steps((2, True), requests=60)
    assert probe(few) == 2  # the same rate again
    assert next_probe(few + steps((2, True), requests=60), 0.1, 0.99, repeats=1) == 3.0  # the widest gap: 2..4
    pooled = few + steps((2, True), requests=400)  # 460 of 460 meet: low end 0.992
    assert search_result(pooled, 0.99) == {"highest_rate": 2, "bracket": [2, 4], "undecided": [],
                                           "requests_to_show": 368, "too_few": []}  # fmt: skip
    assert search_result(few, 0.99) == {
        "highest_rate": 1,
        "bracket": [1, 4],
        "undecided": [2],
        "requests_to_show": 368,
        "too_few": [2],
    }  # 60 requests at 2 req/s
    assert search_result(steps((1, 0.985)), 0.99)["undecided"] == [1]  # 394 of 400: between 0.97 and 0.995


def test_an_inf_upper_end_is_bisected_below_what_the_flood_achieved() -> None:
    rows = steps((2, True), (2, True), (math.inf, False), served=10.0)
    assert finite_upper(math.inf, rows, 2.0) == 10.0 and probe(rows) == 6.0
    assert finite_upper(math.inf, steps((2, True), (math.inf, False), served=1.0), 2.0) == 4.0
    assert search_result(rows, 0.99) == {"highest_rate": 2, "bracket": [2, "inf"], "undecided": [],
                                         "requests_to_show": 368, "too_few": []}  # fmt: skip
    assert search_result(steps((1, True), (math.inf, True)), 0.99)["bracket"] == ["inf", None]
    assert search_result(steps((1, False)), 0.99) == {"highest_rate": None, "bracket": [None, 1], "undecided": [],
                                                      "requests_to_show": 368, "too_few": []}  # fmt: skip


def test_step_lines_are_strict_json() -> None:
    line = step_line({"step": 3, "offered_rate": math.inf, "ttft_p50_ms": math.nan, "lag_max_ms": math.inf,
                      "achieved_rate": 4.5, "slo_met": True})  # fmt: skip
    assert json.loads(line) == {"step": 3, "offered_rate": "inf", "ttft_p50_ms": None, "lag_max_ms": None,
                                "achieved_rate": 4.5, "slo_met": True}  # fmt: skip
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    import numpy as np

    assert json_safe(np.int64(3)) == 3 and json_safe(np.float64(math.nan)) is None


def record(i: int, error: str | None = None) -> dict:
    failed = error is not None
    return {"request": i, "scheduled_s": 0.1 * i, "sent_s": 0.1 * i + 0.001, "first_token_s": math.nan if failed
            else 0.1 * i + 0.05, "last_token_s": math.nan if failed else 0.1 * i + 0.2,
            "chunk_times_s": [] if failed else [0.1 * i + 0.05, 0.1 * i + 0.2], "input_tokens": 10,
            "output_tokens": 0 if failed else 2, "error": error}  # fmt: skip


def test_records_round_trip_through_parquet_and_the_lines_decide(tmp_path: Path) -> None:
    frame = records_frame([record(0), record(1, "HTTP 500: boom")], 0, math.inf)
    assert tuple(frame.columns) == RECORD_COLUMNS
    write_step(tmp_path, 0, frame, {"step": 0, "offered_rate": math.inf})
    write_step(tmp_path, 1, records_frame([record(0)], 1, 2.0), {"step": 1, "offered_rate": 2.0})
    back = read_records(tmp_path)
    assert len(back) == 3 and list(back["offered_rate"]) == [math.inf, math.inf, 2.0]
    assert (
        list(back["chunk_times_s"].iloc[0]) == pytest.approx([0.05, 0.2]) and back["error"].iloc[1] == "HTTP 500: boom"
    )
    assert [r["offered_rate"] for r in read_steps(tmp_path)] == [math.inf, 2.0]
    # A step file without its line (stopped between the two writes) is not part of the sweep.
    records_frame([record(0)], 2, 4.0).to_parquet(rates_dir(tmp_path) / "step-002.parquet")
    assert len(read_records(tmp_path)) == 3
    # A torn last line (killed mid-write) is cut before the next append.
    with open(rates_dir(tmp_path) / STEPS_FILE, "ab") as f:
        f.write(b'{"step": 2, "offe')
    write_step(tmp_path, 2, records_frame([record(0)], 2, 4.0), {"step": 2, "offered_rate": 4.0})
    assert [r["step"] for r in read_steps(tmp_path)] == [0, 1, 2]
    assert not list(rates_dir(tmp_path).glob(".*.tmp"))


def test_an_empty_sweep_reads_as_no_records(tmp_path: Path) -> None:
    assert read_steps(tmp_path) == [] and list(read_records(tmp_path).columns) == list(RECORD_COLUMNS)
    assert isinstance(read_records(tmp_path), pd.DataFrame)


def test_a_steps_file_cut_mid_line_keeps_its_whole_lines_and_says_which_was_dropped(tmp_path: Path) -> None:
    rates_dir(tmp_path).mkdir(parents=True)
    whole = step_line({"step": 0, "offered_rate": 2.0, "slo_met": True})
    (rates_dir(tmp_path) / STEPS_FILE).write_bytes(whole + step_line({"step": 1, "offered_rate": 4.0})[:12])
    with pytest.warns(UserWarning, match=rf"{STEPS_FILE}:2: truncated last line ignored"):
        assert read_steps(tmp_path) == [{"step": 0, "offered_rate": 2.0, "slo_met": True}]


@pytest.mark.parametrize(("target", "needed"), [(0.99, 368), (0.95, 72), (0.9, 36), (0.5, 6)])
def test_the_requests_a_rate_needs_to_be_shown_to_meet_its_target(target: float, needed: int) -> None:
    """All of n meeting the level: the Clopper–Pearson low end 0.025^(1/n) reaches the target first at n."""
    from toolkit.method.slo_fraction import fraction_interval

    assert requests_to_show(target) == needed
    assert fraction_interval(needed, needed)[0] >= target > fraction_interval(needed - 1, needed - 1)[0]


def test_rates_whose_steps_held_too_few_requests_are_named_in_the_search_and_its_line() -> None:
    """60 requests at 2 req/s, even twice (120), cannot show 0.99: the search names the rate, and the report's line
    says so after the bracket; a search recorded before these keys reads as it did."""
    from toolkit.reports.rate_tables import search_line, too_few_text

    rows = steps((1, True), (1, True), (4, False), requests=400) + steps((2, True), (2, True), requests=60)
    result = search_result(rows, 0.99)
    assert result["requests_to_show"] == 368 and result["too_few"] == [2]
    sentence = too_few_text(result, 0.99)
    assert sentence == (
        "Showing 99 % takes at least 368 steady requests at a rate (95 %); at 2.00 req/s the steps held fewer, so "
        "those rates could only fail or stay undecided: longer steps (duration_s or requests_per_step) would decide "
        "them."
    )
    line = search_line(pd.DataFrame(rows), result, 0.1, 0.99)
    assert line.startswith("Highest rate meeting the service level: 1.00 req/s (searched to 10 %") and line.endswith(
        " " + sentence
    )
    old = {key: result[key] for key in ("highest_rate", "bracket", "undecided")}
    assert search_line(pd.DataFrame(rows), old, 0.1, 0.99) == line.removesuffix(" " + sentence)
    assert too_few_text(search_result(steps((1, True), requests=400), 0.99), 0.99) == ""
