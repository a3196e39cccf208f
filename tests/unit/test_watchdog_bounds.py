"""Each cell's bound (toolkit.jupyter.watchdog): from the plan for the cells that measure, fixed for the others,
one value for all when the params set `cell_timeout_s`; checked against hand computations."""

from __future__ import annotations

import io
from pathlib import Path

import nbformat
import pytest

from toolkit.base.api_keys import RedactingWriter
from toolkit.jupyter.watchdog import (
    ANALYSIS_CELL_S,
    MEASURE_TAG,
    MEASURING_FLOOR_S,
    CellBounds,
    Watchdog,
    matrix_expected_s,
    run_bounds,
    sweep_expected_s,
)
from toolkit.matrix.plan import Plan
from toolkit.params import make_params
from toolkit.rates.params import RateParams

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PLAN = Plan(decode_contexts=(1024, 2048, 4096), prefill_only_contexts=(8128,), concurrency=(1, 2, 4, 8))


def test_the_matrix_nominal_time_by_hand() -> None:
    params = make_params({"duration_s": 30, "control_window_s": 5, "disturbed_retries": 2, "repeats": 1})
    # 12 decode cells × 3 attempts × (30 + 5) s, 4 prefills × 3 attempts × 10 s
    assert matrix_expected_s(params, 12, 4) == 12 * 3 * 35 + 4 * 3 * 10 == 1380
    assert matrix_expected_s(params.model_copy(update={"repeats": 2}), 12, 4) == 2760


def test_a_run_bounds_its_measuring_cells_by_its_plan_and_its_analysis_cells_by_a_constant() -> None:
    params = make_params({"duration_s": 30, "control_window_s": 5, "disturbed_retries": 2})
    bounds = run_bounds(params, PLAN)
    assert bounds.measuring_s == 3 * 1380 == 4140  # 12 decode cells, 4 prefills (3 contexts + 1 prefill-only)
    assert bounds.analysis_s == ANALYSIS_CELL_S
    short = make_params({"duration_s": 1, "control_window_s": 0, "contexts": [64], "concurrency": [1]})
    assert run_bounds(short, Plan((64,), (), (1,))).measuring_s == MEASURING_FLOOR_S  # never below the floor


def test_without_a_plan_every_context_the_rules_could_choose_is_counted() -> None:
    params = make_params({"duration_s": 30})
    assert run_bounds(params, None).measuring_s > run_bounds(params, PLAN).measuring_s


def test_a_rate_sweep_bounds_the_run_by_its_steps_when_they_take_longer() -> None:
    sweep = RateParams(rates=[1, 2, 4, 8], duration_s=300, warmup_s=10)
    assert sweep_expected_s(sweep) == 4 * (10 + 300 + 30)  # each step: warm-up, schedule, drain and last replies
    searched = sweep.model_copy(update={"search": True, "search_max_probes": 8, "search_repeats": 2})
    assert sweep_expected_s(searched) == (4 + 8 * 3) * 340
    counted = RateParams(rates=[2, 4, float("inf")], requests_per_step=100)
    assert sweep_expected_s(counted) == 3 * (100 / 2 + 30)  # 100 requests at the slowest finite rate
    talks = RateParams(rates=[1], duration_s=10, workload="conversation", turns=4, think_time_s=2, cold_control=True)
    assert sweep_expected_s(talks) == 2 * (10 + 4 * 2 + 30)
    params = make_params({"duration_s": 1, "control_window_s": 0})
    assert run_bounds(params, PLAN, sweep).measuring_s == 3 * 4 * 340


def test_cell_timeout_s_bounds_every_cell() -> None:
    bounds = run_bounds(make_params({"cell_timeout_s": 20}), PLAN)
    assert bounds == CellBounds(20, 20)


def test_the_watchdog_gives_nbclient_each_cells_bound_and_remembers_the_cell() -> None:
    watchdog = Watchdog(CellBounds(measuring_s=100.2, analysis_s=7))
    measuring = nbformat.v4.new_code_cell("measure()", metadata={"tags": [MEASURE_TAG]})
    analysis = nbformat.v4.new_code_cell("frame.describe()")
    assert watchdog(measuring) == 101 and watchdog.cell is measuring
    assert watchdog(analysis) == 7 and watchdog.cell is analysis


@pytest.mark.parametrize("name", ["prefill", "decode_matrix", "rate_sweep", "report", "compare", "explore"])
def test_the_cells_tagged_measure_are_the_ones_that_send_load(name: str) -> None:
    cells = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).cells
    tagged = [c.source for c in cells if MEASURE_TAG in c.metadata.get("tags", [])]
    if name in ("prefill", "decode_matrix"):
        assert len(tagged) == 1 and "notebook.measure(" in tagged[0]
    elif name == "rate_sweep":
        assert len(tagged) == 1 and "rate_notebook.should_measure(" in tagged[0]
    else:
        assert tagged == []


def test_an_unfinished_line_is_ended_before_a_line_of_ones_own() -> None:
    out = io.StringIO()
    writer = RedactingWriter(out)
    writer.write("run:  50%|#####     | 1/2\r")
    writer.end_line()
    writer.end_line()  # nothing unfinished: no empty line
    assert out.getvalue() == "run:  50%|#####     | 1/2\r\n"
