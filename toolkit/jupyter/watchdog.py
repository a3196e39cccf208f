"""A bound on every cell of every kernel the toolkit starts, so that no run waits for ever on one cell.

A cell that measures (tagged `measure`) may take as long as its plan: the matrix's cells or the sweep's steps,
each at its nominal time, times a margin for retries and a slow machine, and never less than a floor. Any other
cell analyses files already written, which takes seconds; it gets a fixed bound. `cell_timeout_s` in the params
sets one bound for every cell instead. nbclient asks :class:`Watchdog` for each cell's bound (its `timeout_func`)
and fails the notebook with `CellTimeoutError` when a cell's execute reply has not come by then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import nbformat

from toolkit.matrix.plan import Plan
from toolkit.params import RunParams
from toolkit.rates.params import RateParams

__all__ = [
    "ANALYSIS_CELL_S",
    "MEASURE_TAG",
    "MEASURING_FLOOR_S",
    "CellBounds",
    "Watchdog",
    "matrix_expected_s",
    "run_bounds",
    "sweep_expected_s",
]

MEASURE_TAG = "measure"  # the notebooks' cells that send load
# The slowest analysis cell seen is under 10 s (report.ipynb over a demo run, beside a busy vLLM): 600 s is a
# bound that no working cell meets and that a hung one reaches before anyone has given up on the run.
ANALYSIS_CELL_S = 600.0
MEASURING_FLOOR_S = 1800.0  # a measuring cell's bound is never shorter: server start-up, discovery, a slow machine
MARGIN = 3.0  # times the plan's nominal time (per attempt: retried windows count once more each)
PREFILL_CELL_S = 10.0  # a prefill measurement's nominal time: a few requests of one prompt
STEP_SLACK_S = 30.0  # a rate step's drain before it and its last replies after its schedule
UNKNOWN_STEP_S = 3600.0  # a step whose length only its file knows (a trace without a window, a replay)
MOST_CONTEXTS = 16  # contexts counted when the plan is not known: more than the rules choose for any length


@dataclass(frozen=True)
class CellBounds:
    """Seconds a cell may run: the measuring cells' bound and every other cell's."""

    measuring_s: float
    analysis_s: float = ANALYSIS_CELL_S

    def for_cell(self, cell: nbformat.NotebookNode) -> float:
        tags = cell.get("metadata", {}).get("tags", [])
        return self.measuring_s if MEASURE_TAG in tags else self.analysis_s


def matrix_expected_s(params: RunParams, decode_cells: int, prefill_cells: int) -> float:
    """The matrix's nominal time: each round's decode windows with their control readings, and its prefills;
    each decode window as often as a disturbed one may be measured again."""
    attempts = params.disturbed_retries + 1
    decode_s = decode_cells * attempts * (params.duration_s + params.control_window_s)
    return params.repeats * (decode_s + prefill_cells * attempts * PREFILL_CELL_S)


def _step_length_s(sweep: RateParams) -> float:
    """One step's scheduled length: its duration, or its requests at the slowest finite rate."""
    if sweep.trace is not None:
        return UNKNOWN_STEP_S if sweep.trace_duration_s is None else sweep.trace_duration_s / (sweep.time_scale or 1)
    if sweep.replay is not None:
        return UNKNOWN_STEP_S
    if sweep.duration_s is not None:
        return sweep.duration_s
    finite = [rate for rate in sweep.rates if math.isfinite(rate)]
    count = sweep.requests_per_step or 0
    return count / min(finite) if finite else float(count)  # all at once: about a second a request at worst


def sweep_expected_s(sweep: RateParams) -> float:
    """The sweep's nominal time: every step (the search's probes and repeats, conversations' cold controls)
    at its scheduled length, its warm-up, its conversations' think times and the drain around it."""
    steps = len(sweep.rates) + (sweep.search_max_probes * (1 + sweep.search_repeats) if sweep.search else 0)
    if sweep.cold_control:
        steps *= 2
    thinking_s = (sweep.turns or 1) * (sweep.think_time_s or 0.0)
    return steps * (sweep.warmup_s + _step_length_s(sweep) + thinking_s + STEP_SLACK_S)


def run_bounds(params: RunParams, plan: Plan | None, sweep: RateParams | None = None) -> CellBounds:
    """The bounds for a run's notebooks: `cell_timeout_s` when the params set it, else from the plan (the
    matrix's cells, the rate sweep's steps; the longer of the two, since each notebook measures one of them).
    Without a plan (the server's length unknown), every context the rules could choose is counted."""
    if params.cell_timeout_s is not None:
        return CellBounds(params.cell_timeout_s, params.cell_timeout_s)
    if plan is None:
        decode, prefill = MOST_CONTEXTS * len(params.concurrency), MOST_CONTEXTS
    else:
        # an embeddings cell is timed as a decode cell: a ramp, a window and the drain
        decode, prefill = len(plan.keys(["decode", "embeddings"])), len(plan.keys(["prefill"]))
    expected = matrix_expected_s(params, decode, prefill)
    if sweep is not None:
        expected = max(expected, sweep_expected_s(sweep))
    return CellBounds(max(MEASURING_FLOOR_S, MARGIN * expected))


class Watchdog:
    """nbclient's `timeout_func`: each cell's bound in whole seconds; remembers the cell it was last asked about,
    which is the cell running when the bound is reached."""

    def __init__(self, bounds: CellBounds) -> None:
        self.bounds = bounds
        self.cell: nbformat.NotebookNode | None = None

    def __call__(self, cell: nbformat.NotebookNode) -> int:
        self.cell = cell
        return math.ceil(self.bounds.for_cell(cell))
