"""A comparison's ratios as numbers and text: the quantities compared, a ratio's display string, and the one
overall ratio per quantity (the geometric mean of the cells' ratios, the machine's change kept whole) (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from toolkit.method.drift import DRIFT_QUANTITIES, widened, within_drift
from toolkit.method.multiplicity import overall_ratio
from toolkit.method.spread import Interval, t_quantile, welch_dof
from toolkit.reports.number_format import MISSING, as_number
from toolkit.reports.tables import QUANTITY_TITLES

RATIO_QUANTITIES: dict[str, str] = {q: QUANTITY_TITLES[q] for q in ("total_tok_s", "per_request_tok_s", "ttft_ms")}


def format_ratio(value: Any) -> str:
    """A ratio with three significant digits: ``0.0253×``, ``1.00×``, ``39.5×``, ``1,234×``; missing: ``—``."""
    number = as_number(value)
    if number is None:
        return MISSING
    text = f"{number:,.0f}" if abs(number) >= 99.95 else f"{number:#.3g}".removesuffix(".")
    return f"{text}×"


def _with_machine(overall: Interval, change_se: Sequence[Any], change_dof: Sequence[Any]) -> Interval:
    """The overall ratio's interval with the uncertainty of the machine's change added whole: one pair of control
    lines corrects every cell, so its error does not average out across cells (the mean of the cells' standard
    errors, at least the shared part's)."""
    known = [
        (float(se), float(dof)) for se, dof in zip(change_se, change_dof, strict=True) if as_number(se) is not None
    ]
    if not known or overall.value <= 0:
        return overall
    shared = math.fsum(se for se, _ in known) / len(known)
    own = overall.relative_se
    parts = [(own * own, overall.dof), (shared * shared, min(dof for _, dof in known))]
    dof = welch_dof(parts)
    spread = t_quantile(dof) * math.sqrt(own**2 + shared**2)
    return Interval(overall.value, overall.value * math.expm1(spread), dof, log_scale=True)


def cells_text(count: int) -> str:
    """``1 cell``, ``3 cells``."""
    return f"{count:,} cell" + ("" if count == 1 else "s")


def overall_ratios(table: pd.DataFrame, quantities: Sequence[str] = tuple(RATIO_QUANTITIES)) -> dict[str, Interval]:
    """Per quantity, the geometric mean of the table's ratios over the cells with an interval, and its 95 %
    interval (toolkit.method.multiplicity); a quantity without any is left out. For throughput the cells' ratios
    are already divided by the machine's change (toolkit.reports.compare.ratio_table), and that change's
    uncertainty is added to the overall interval whole; without control lines, the runs' drift is (widened)."""
    out = {}
    change = [list(table.get(f"machine_change_{c}", [])) for c in ("se", "dof")]
    drift = next((d for d in table.get("drift", []) if as_number(d) is not None), None)
    corrected = any(as_number(se) is not None for se in change[0])
    for q in quantities:
        cells = [
            Interval(r, hw, float(dof), log_scale=True)  # dof may be inf (a spread known only as a half-width)
            for r, hw, dof in zip(table[f"{q}_ratio"], table[f"{q}_ratio_hw"], table[f"{q}_ratio_dof"], strict=True)
            if as_number(r) is not None and as_number(hw) is not None and not pd.isna(dof)
        ]
        overall = overall_ratio(cells)
        if overall is None:
            continue
        if q in DRIFT_QUANTITIES and corrected:
            overall = _with_machine(overall, *change)
        elif q in DRIFT_QUANTITIES and drift is not None:  # no control line: the drift's guard, kept whole
            wide = widened(overall.value, overall.half_width, overall.dof, drift)
            overall = Interval(overall.value, wide, overall.dof, log_scale=True)
        out[q] = overall
    return out


APART_MARK = "†"  # an overall ratio whose interval leaves out 1 between runs measured apart: not a verdict
# What justifies the mark, from benchmarks/calibration.py (seed 1, 40 compares of 12 cells, a machine whose speed
# takes a random walk of 5 % a run; benchmarks/README.md): the share of A/A compares whose overall ratio left out 1,
# plain (one run each) and interleaved (4 rounds A B B A).
APART_AA_PLAIN, APART_AA_INTERLEAVED = 0.55, 0.025


def overall_text(table: pd.DataFrame) -> str | None:
    """One line: each quantity's overall ratio with its interval and over how many cells (within drift when a
    throughput ratio is within the runs' drift of 1; † when its interval leaves out 1, which between runs
    measured apart is not a verdict: the machine's change between them is in no interval); None without any."""
    parts, marked = [], False
    drift = next((d for d in table.get("drift", []) if as_number(d) is not None), None)
    for q, ratio in overall_ratios(table).items():
        cells = int(table[f"{q}_ratio_hw"].notna().sum())
        within = " within drift" if q in DRIFT_QUANTITIES and within_drift(ratio.value, drift) else ""
        apart = not within and ratio.value > 0 and abs(math.log(ratio.value)) > math.log1p(ratio.relative)
        marked |= apart
        parts.append(
            f"{RATIO_QUANTITIES[q]} {format_ratio(ratio.value)} ±{ratio.half_width:.2f}{within} "
            f"({cells_text(cells)}){APART_MARK if apart else ''}"
        )
    if not parts:
        return None
    note = (
        f" {APART_MARK} The interval leaves out 1, but the runs were measured apart: not a verdict. On a machine "
        f"whose speed drifts 5 % from one run to the next, {APART_AA_PLAIN:.0%} of compares of a server with itself "
        f"left out 1 this way, and {APART_AA_INTERLEAVED:.1%} measured interleaved (benchmarks/calibration.py): "
        "`toolkit interleave` separates the change from the machine; `vllm-speedtest gate` calls this inconclusive "
        "unless given a between-run allowance (`--between-runs`)."
        if marked
        else ""
    )
    return (
        "Overall, B / A (geometric mean of the cells' ratios, 95 %): " + "; ".join(parts) + ". A change of the "
        "machine between the two runs moves every cell alike and no control sees it: read a small overall "
        "difference between runs far apart with care (`toolkit interleave` measures two servers so that it cancels)."
        + note
    )
