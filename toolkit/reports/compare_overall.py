"""A comparison's ratios as numbers and text: the quantities compared, a ratio's display string, and the one
overall ratio per quantity (the geometric mean of the cells' ratios, the runs' drift kept whole) (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from toolkit.method.drift import DRIFT_QUANTITIES, widened
from toolkit.method.multiplicity import overall_ratio
from toolkit.method.number_format import MISSING, as_number
from toolkit.method.spread import Interval
from toolkit.reports.tables import QUANTITY_TITLES

RATIO_QUANTITIES: dict[str, str] = {q: QUANTITY_TITLES[q] for q in ("total_tok_s", "per_request_tok_s", "ttft_ms")}


def format_ratio(value: Any) -> str:
    """A ratio with three significant digits: ``0.0253×``, ``1.00×``, ``39.5×``, ``1,234×``; missing: ``—``."""
    number = as_number(value)
    if number is None:
        return MISSING
    text = f"{number:,.0f}" if abs(number) >= 99.95 else f"{number:#.3g}".removesuffix(".")
    return f"{text}×"


def overall_ratios(table: pd.DataFrame, quantities: Sequence[str] = tuple(RATIO_QUANTITIES)) -> dict[str, Interval]:
    """Per quantity, the geometric mean of the table's ratios over the cells with an interval, and its 95 %
    interval (toolkit.method.multiplicity); a quantity without any is left out. The machine's change between the
    runs moves every cell alike, so averaging cells does not shrink it: for throughput, the runs' drift is added
    to the overall interval whole (toolkit.method.drift.widened)."""
    out = {}
    drift = next((d for d in table.get("drift", []) if as_number(d) is not None), None)
    for q in quantities:
        cells = [
            Interval(r, hw, float(dof))  # dof may be inf (a spread known only as a half-width)
            for r, hw, dof in zip(table[f"{q}_ratio"], table[f"{q}_ratio_hw"], table[f"{q}_ratio_dof"], strict=True)
            if as_number(r) is not None and as_number(hw) is not None and not pd.isna(dof)
        ]
        overall = overall_ratio(cells)
        if overall is None:
            continue
        if drift is not None and q in DRIFT_QUANTITIES:
            overall = Interval(
                overall.value, widened(overall.value, overall.half_width, overall.dof, drift), overall.dof
            )
        out[q] = overall
    return out


def overall_text(table: pd.DataFrame) -> str | None:
    """One line: each quantity's overall ratio with its interval and over how many cells; None without any."""
    parts = []
    for q, ratio in overall_ratios(table).items():
        cells = int(table[f"{q}_ratio_hw"].notna().sum())
        parts.append(f"{RATIO_QUANTITIES[q]} {format_ratio(ratio.value)} ±{ratio.half_width:.2f} ({cells} cells)")
    if not parts:
        return None
    return (
        "Overall, B / A (geometric mean of the cells' ratios, 95 %): " + "; ".join(parts) + ". The machine's change "
        "between the two runs moves every cell alike; only the runs' control drift (when measured) is in this "
        "interval, so read a small overall difference between runs far apart with care (`toolkit interleave` "
        "measures two servers so that it cancels)."
    )
