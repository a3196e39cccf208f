"""Compare's spreads beyond one window: a cell's rounds (toolkit.results.rounds) and the runs' drift
(toolkit.method.drift). Pure: DataFrames in, DataFrames out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from toolkit.method.drift import pair_drift, widened, within_drift
from toolkit.method.number_format import as_number
from toolkit.results.runs import RUN_DRIFT

WITHIN_DRIFT = "within drift"


def _larger(a: Any, b: Any) -> float:
    known = [x for x in (as_number(a), as_number(b)) if x is not None]
    return max(known) if known else math.nan


def with_round_spreads(frame: pd.DataFrame, quantities: Sequence[str]) -> pd.DataFrame:
    """`<q>_ci` as the larger of the within-window half-width and the t half-width across rounds (when repeated)."""
    frame = frame.copy()
    for q in quantities:
        if f"{q}_repeat_ci" in frame.columns:
            inside = frame[f"{q}_ci"] if f"{q}_ci" in frame.columns else [math.nan] * len(frame)
            frame[f"{q}_ci"] = [_larger(a, b) for a, b in zip(inside, frame[f"{q}_repeat_ci"], strict=True)]
    return frame


def _judged(ratio: Any, half_width: Any, significant: Any, drift: float | None) -> tuple[float, Any, bool | None]:
    """(half-width, significant, within drift) of one ratio once the pair's drift is taken into account."""
    r, hw = as_number(ratio), as_number(half_width)
    if r is None or drift is None:
        return (math.nan if hw is None else hw), significant, None
    within = within_drift(r, drift)
    if hw is None:
        return math.nan, (False if within else None), within
    wide = widened(r, hw, drift)
    return wide, abs(r - 1) > wide, within


def with_drift(merged: pd.DataFrame, quantities: Sequence[str]) -> pd.DataFrame:
    """Each ratio's interval widened by the larger drift of its two runs (`drift`, a fraction; NaN: neither run
    measured one); `<q>_within_drift` True where the ratio differs from 1 by no more than that drift (then it is
    not significant either)."""
    a = merged.get(f"{RUN_DRIFT}_a", pd.Series([None] * len(merged), index=merged.index))
    b = merged.get(f"{RUN_DRIFT}_b", pd.Series([None] * len(merged), index=merged.index))
    drifts = [pair_drift(as_number(x), as_number(y)) for x, y in zip(a, b, strict=True)]
    merged["drift"] = [math.nan if d is None else d for d in drifts]
    for q in quantities:
        cells = zip(merged[f"{q}_ratio"], merged[f"{q}_ratio_hw"], merged[f"{q}_significant"], drifts, strict=True)
        judged = [_judged(ratio, hw, sig, d) for ratio, hw, sig, d in cells]
        merged[f"{q}_ratio_hw"] = [hw for hw, _, _ in judged]
        merged[f"{q}_significant"] = pd.Series([sig for _, sig, _ in judged], index=merged.index, dtype=object)
        merged[f"{q}_within_drift"] = pd.Series([w for _, _, w in judged], index=merged.index, dtype=object)
    return merged
