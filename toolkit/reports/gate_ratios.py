"""A gate's numbers from run frames (pure): each gated quantity's overall ratio, its interval, its verdict.

Interleaved rounds: per round, each side's geometric mean over the decode cells both sides ran undisturbed in
every round; the rounds' ratios paired (toolkit.method.gate.paired_interval). Runs measured apart: compare's
overall ratio (toolkit.reports.compare_overall: the cells' ratios and the runs' control correction), which no
interval holds the machine's change between the runs in; it is judged only with a between-run allowance, added
whole (toolkit.method.gate.widened), and is otherwise inconclusive. The allowance is given by hand
(`--between-runs 10%`, every quantity alike) or measured by repeated A/A runs and stored
(toolkit.reports.gate_allowance: each quantity its own; a quantity the file lacks stays inconclusive).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from toolkit.base.errors import ResultsError
from toolkit.base.schema import RAN_STATUSES
from toolkit.method.disturbed import disturbed_mask
from toolkit.method.gate import (
    QUANTITIES,
    Quantity,
    RatioInterval,
    Verdict,
    allowed_ratio,
    log_interval,
    paired_interval,
    verdict,
    widened,
)
from toolkit.method.gate_plan import more_rounds
from toolkit.method.spread import Interval
from toolkit.reports.number_format import as_number

Cell = tuple[int, str, int]  # context tokens, context, concurrency
Rounds = Mapping[int, pd.DataFrame]  # round -> that round's results frame (load_run)
APART_REASON = "measured apart: the machine's change between the runs is in no interval"
SIDES = "the baseline and the candidate"


@dataclass(frozen=True)
class BetweenRuns:
    """The between-run allowance of runs measured apart: quantity -> the fraction allowed either way; `stored` the
    file it was measured into (None: given by hand, `--between-runs 10%`) and `runs` how many A/A runs measured it."""

    allowances: Mapping[str, float]
    stored: str | None = None
    runs: int = 0


@dataclass(frozen=True)
class CellRatio:
    """One decode cell's ratio candidate / baseline (interleaved: the geometric mean over the rounds)."""

    context: str
    concurrency: int
    ratio: float


@dataclass(frozen=True)
class RateRow:
    """One offered rate both rate sweeps ran: each side's value there (`value`: `goodput` in req/s, or
    `slo_fraction`, of its requests meeting the SLO; the mean of the rate's steps, None where none recorded it)."""

    rate: float
    baseline: float | None
    candidate: float | None
    value: str

    @property
    def ratio(self) -> float | None:
        """candidate / baseline; None where a side has no value or the baseline's is 0."""
        if self.baseline is None or self.candidate is None or not self.baseline > 0:
            return None
        return self.candidate / self.baseline


Found = tuple[RatioInterval | None, int, tuple[CellRatio, ...]]  # a quantity's interval, its cells, each cell's ratio


@dataclass(frozen=True)
class Judged:
    """One gated quantity: its interval (None: not measured), verdict, why inconclusive, the rounds that would
    likely resolve it, and its cells' own ratios (to show the cells that drove a failure)."""

    quantity: Quantity
    limit: float
    interval: RatioInterval | None
    verdict: Verdict
    cells: int
    reason: str | None = None
    allowance: float | None = None
    more_rounds: int | None = None
    cell_ratios: tuple[CellRatio, ...] = ()
    allowance_stored: str | None = None  # the allowance file (None: given by hand)
    allowance_runs: int = 0  # the A/A runs that measured the stored allowance
    basis: str | None = None  # what a rate quantity's ratio is over (`over 3 common rates`)
    rate_rows: tuple[RateRow, ...] = ()  # a rate quantity's values at each common rate (shown under a failure)

    @property
    def bound(self) -> float:
        return allowed_ratio(self.limit, self.quantity.higher_is_better)

    def beyond(self, ratio: float) -> bool:
        """Whether a ratio is worse than allowed."""
        return ratio < self.bound if self.quantity.higher_is_better else ratio > self.bound


def decode_values(frame: pd.DataFrame, quantities: Sequence[str]) -> dict[Cell, dict[str, float]]:
    """The decode cells that ran undisturbed: cell -> quantity -> its positive value."""
    if frame.empty:
        return {}
    usable = frame[(frame["phase"] == "decode") & frame["status"].isin(RAN_STATUSES) & ~disturbed_mask(frame)]
    out: dict[Cell, dict[str, float]] = {}
    for row in usable.to_dict("records"):
        key = (int(row["context_tokens"]), str(row["context"]), int(row["concurrency"]))
        out[key] = {q: v for q in quantities if (v := as_number(row.get(q))) is not None and v > 0}
    return out


def common_cells(sides: Sequence[Mapping[Cell, Mapping[str, float]]], what: str = SIDES) -> list[Cell]:
    """The cells every side measured; ResultsError (exit 2) naming `what` (the sides) when there is none."""
    cells = sorted(set.intersection(*(set(side) for side in sides))) if sides else []
    if not cells:
        raise ResultsError(f"gate: {what} have no decode cell in common (context × requests at once, run "
                           "undisturbed); nothing to compare")  # fmt: skip
    return cells


def interleaved_intervals(a: Rounds, b: Rounds, quantities: Sequence[str], level: float) -> dict[str, Found]:
    """Per quantity: the paired interval of the rounds' overall ratios, how many cells, and each cell's ratio."""
    rounds = sorted(set(a) & set(b))
    sides = [(decode_values(a[r], quantities), decode_values(b[r], quantities)) for r in rounds]
    cells = common_cells([s for pair in sides for s in pair])
    out: dict[str, Found] = {}
    for q in quantities:
        mine = [c for c in cells if all(q in x[c] and q in y[c] for x, y in sides)]
        if not mine:
            out[q] = (None, 0, ())
            continue
        means = [(log_mean(x, mine, q), log_mean(y, mine, q)) for x, y in sides]
        interval = paired_interval([math.exp(u) for u, _ in means], [math.exp(v) for _, v in means], level)
        per_cell = tuple(
            CellRatio(c[1], c[2], math.exp(statistics.fmean(math.log(y[c][q] / x[c][q]) for x, y in sides)))
            for c in mine
        )
        out[q] = (interval, len(mine), per_cell)
    return out


def log_mean(values: Mapping[Cell, Mapping[str, float]], cells: Sequence[Cell], q: str) -> float:
    """The log of one side's geometric mean of `q` over `cells` (its overall value)."""
    return statistics.fmean(math.log(values[c][q]) for c in cells)


def overall_logs(sides: Sequence[Mapping[Cell, Mapping[str, float]]], quantities: Sequence[str],
                 what: str = SIDES) -> dict[str, tuple[list[float], int]]:  # fmt: skip
    """Per quantity measured in a cell every side shares: each side's overall value (the log of its geometric mean
    over those cells, as a round's side is in `interleaved_intervals`) and how many cells; ResultsError naming
    `what` when the sides share no cell."""
    cells = common_cells(sides, what)
    out: dict[str, tuple[list[float], int]] = {}
    for q in quantities:
        mine = [c for c in cells if all(q in side[c] for side in sides)]
        if mine:
            out[q] = ([log_mean(side, mine, q) for side in sides], len(mine))
    return out


def apart_intervals(
    table: pd.DataFrame, overall: Mapping[str, Interval], quantities: Sequence[str], level: float
) -> dict[str, Found]:
    """Per quantity, from compare's decode ratio table and its overall ratios (toolkit.reports.compare_overall,
    Interval: value, the larger side's half-width, dof): the interval at `level` on the log scale."""
    decode = table[table["phase"] == "decode"]
    if decode.empty:
        raise ResultsError("gate: the baseline and the candidate have no decode cell in common (context × requests "
                           "at once); nothing to compare")  # fmt: skip
    out: dict[str, Found] = {}
    for q in quantities:
        found = overall.get(q)
        rows = decode[decode[f"{q}_ratio"].notna()] if f"{q}_ratio" in decode.columns else decode.iloc[0:0]
        per_cell = tuple(CellRatio(str(r["context"]), int(r["concurrency"]), float(r[f"{q}_ratio"]))
                         for r in rows.to_dict("records"))  # fmt: skip
        if found is None or not found.value > 0 or not math.isfinite(found.half_width):
            out[q] = (None, len(per_cell), per_cell)
            continue
        cells = int(rows[f"{q}_ratio_hw"].notna().sum()) if len(rows) else 0
        interval = log_interval(math.log(found.value), found.relative_se, found.dof, level, 0)  # log scale
        out[q] = (interval, cells, per_cell)
    return out


def judge(
    intervals: Mapping[str, Found],
    quantities: Sequence[Quantity],
    limits: Mapping[str, float],
    allowance: float | BetweenRuns | None,
) -> list[Judged]:
    """Each gated quantity's verdict. Apart (rounds 0): widened by `allowance` (a fraction for every quantity, or
    each quantity's stored one), or inconclusive without one."""
    between = BetweenRuns(dict.fromkeys(QUANTITIES, allowance)) if isinstance(allowance, float) else allowance
    out = []
    for q in quantities:
        interval, cells, per_cell = intervals.get(q.name, (None, 0, ()))
        limit = limits[q.name]
        if interval is None:
            out.append(Judged(q, limit, None, Verdict.INCONCLUSIVE, cells, "not measured in enough cells and rounds",
                              cell_ratios=per_cell))  # fmt: skip
            continue
        apart = interval.rounds == 0
        mine = between.allowances.get(q.name) if between is not None else None
        if apart and mine is None:
            reason = APART_REASON
            if between is not None and between.stored is not None:
                reason = f"measured apart: {between.stored} holds no between-run allowance for {q.title}"
            out.append(Judged(q, limit, interval, Verdict.INCONCLUSIVE, cells, reason, cell_ratios=per_cell))
            continue
        shown = widened(interval, mine) if apart and mine is not None else interval
        found = verdict(shown, limit, q.higher_is_better)
        more = None
        if found is Verdict.INCONCLUSIVE and not apart:
            distance = math.log(interval.ratio) - math.log(allowed_ratio(limit, q.higher_is_better))
            more = more_rounds(interval.se, interval.rounds, distance, interval.level)
        stored = between.stored if apart and between is not None else None
        runs = between.runs if stored is not None and between is not None else 0
        out.append(Judged(q, limit, shown, found, cells, None, mine if apart else None, more, per_cell, stored, runs))
    return out
