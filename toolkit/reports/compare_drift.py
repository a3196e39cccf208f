"""Compare's spreads beyond one window: a cell's rounds (toolkit.results.rounds), the machine's change along the
runs' control lines and the runs' drift (toolkit.method.drift). Pure: DataFrames in, DataFrames out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from toolkit.method.drift import (
    CELL_DRIFT_COLUMNS,
    DRIFT_QUANTITIES,
    Correction,
    cell_drift_from,
    corrected_ratio,
    pair_correction,
    pair_drift,
    widened,
    within_drift,
)
from toolkit.method.spread import Interval, t_p_value, t_quantile, window_dof
from toolkit.reports.number_format import as_number
from toolkit.results.runs import RUN_DRIFT

WITHIN_DRIFT = "within drift"
MEDIANS = ("ttft_ms",)  # a window's median over its requests: an order-statistic interval (spread.median_interval)


def _window_dof(quantity: str, sub_windows: Any, recorded: Any) -> float:
    """Degrees of freedom of a window's half-width (`window_dof` of its batches, or as its record says); TTFT's
    order-statistic interval and a record without `sub_windows` count as normal (inf)."""
    batches = as_number(sub_windows)
    if quantity in MEDIANS or batches is None or batches < 2:
        return math.inf
    return window_dof(batches, recorded=as_number(recorded))


def with_round_spreads(frame: pd.DataFrame, quantities: Sequence[str]) -> pd.DataFrame:
    """`<q>_ci` and `<q>_dof`: a cell measured in two or more rounds, the t half-width of its mean across rounds
    at rounds less one degrees of freedom (each round's value holds its window's noise, so the rounds' spread is
    the mean's own), with `<q>_rounds` True; otherwise the window's half-width at its batches' degrees of freedom.
    The larger of the two (before) read one window's half-width as the mean's and covered 0.996-1.000
    (benchmarks/calibration.py)."""
    frame = frame.copy()
    sub_windows = frame["sub_windows"] if "sub_windows" in frame.columns else [None] * len(frame)
    recorded = frame["window_dof"] if "window_dof" in frame.columns else [None] * len(frame)
    repeats = frame["repeats"] if "repeats" in frame.columns else [None] * len(frame)
    for q in quantities:
        inside = frame[f"{q}_ci"] if f"{q}_ci" in frame.columns else [math.nan] * len(frame)
        across = frame[f"{q}_repeat_ci"] if f"{q}_repeat_ci" in frame.columns else [None] * len(frame)
        kept, dofs, of_rounds = [], [], []
        for hw, round_hw, k, d, r in zip(inside, across, sub_windows, recorded, repeats, strict=True):
            rounds, spread = as_number(r), as_number(round_hw)
            if spread is not None and rounds is not None and rounds >= 2:
                kept.append(spread)
                dofs.append(rounds - 1)
                of_rounds.append(True)
            else:
                window = as_number(hw)
                kept.append(math.nan if window is None else window)
                dofs.append(_window_dof(q, k, d))
                of_rounds.append(False)
        frame[f"{q}_ci"], frame[f"{q}_dof"], frame[f"{q}_rounds"] = kept, dofs, of_rounds
    return frame


def pair_drifts(merged: pd.DataFrame) -> list[float | None]:
    """Per row, the drift its two runs are compared under (the larger of theirs; None: neither measured one)."""
    a = merged.get(f"{RUN_DRIFT}_a", pd.Series([None] * len(merged), index=merged.index))
    b = merged.get(f"{RUN_DRIFT}_b", pd.Series([None] * len(merged), index=merged.index))
    return [pair_drift(as_number(x), as_number(y)) for x, y in zip(a, b, strict=True)]


def with_drift(merged: pd.DataFrame, quantities: Sequence[str], drifts: Sequence[float | None]) -> pd.DataFrame:
    """`drift` (a fraction; NaN: neither run measured one) and, for the quantities the control's change moves
    (DRIFT_QUANTITIES), `<q>_within_drift`: True where the ratio differs from 1 by no more than that drift (then it
    is not significant either); None for the others and without a drift."""
    merged["drift"] = [math.nan if d is None else d for d in drifts]
    for q in quantities:
        flags = [
            None if d is None or q not in DRIFT_QUANTITIES or as_number(r) is None else within_drift(float(r), d)
            for r, d in zip(merged[f"{q}_ratio"], drifts, strict=True)
        ]
        merged[f"{q}_within_drift"] = pd.Series(flags, index=merged.index, dtype=object)
        merged[f"{q}_significant"] = pd.Series(
            [False if w else sig for w, sig in zip(flags, merged[f"{q}_significant"], strict=True)],
            index=merged.index,
            dtype=object,
        )
    return merged


def with_corrections(merged: pd.DataFrame) -> list[Correction | None]:
    """Per row, the machine's change from the cell in run A to it in run B along the runs' control lines (None
    unless both rows lie on a line of three readings); also kept as `machine_change` (a fraction),
    `machine_change_se` (log scale) and `machine_change_dof`."""
    sides = [[merged[f"{c}_{run}"] for c in CELL_DRIFT_COLUMNS] for run in "ab"]
    a, b = (list(zip(*columns, strict=True)) for columns in sides)
    found = [pair_correction(cell_drift_from(x), cell_drift_from(y)) for x, y in zip(a, b, strict=True)]
    merged["machine_change"] = [math.nan if c is None else math.expm1(c.change) for c in found]
    merged["machine_change_se"] = [math.nan if c is None else math.sqrt(c.variance) for c in found]
    merged["machine_change_dof"] = [math.nan if c is None else c.dof for c in found]
    return found


def ratio_spread(
    base: Interval | None, other: Interval | None, correction: Correction | None, drift: float | None
) -> tuple[float, float, float | None]:
    """other / base: its 95 % half-width, t degrees of freedom and the p-value of "no difference", for the ratio
    divided by the machine's `correction` when given (toolkit.method.drift.corrected_ratio), else with the runs'
    `drift` added to its spread when given (toolkit.method.drift.widened); (NaN, NaN, None) without both cells'
    intervals."""
    if base is None or other is None:
        return math.nan, math.nan, None
    test = corrected_ratio(base, other, correction)
    ratio, half, dof = test.interval.value, test.interval.half_width, test.interval.dof
    if correction is not None or drift is None or ratio <= 0:
        return half, dof, test.p_value
    wide = widened(ratio, half, dof, drift)
    spread = math.log1p(wide / ratio) / t_quantile(dof)  # the standard error, drift included
    return wide, dof, t_p_value(math.log(ratio) / spread, dof) if spread else test.p_value
