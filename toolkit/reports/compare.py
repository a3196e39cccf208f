"""Comparisons of runs held in one tidy DataFrame (schema columns plus ``run``, see :mod:`toolkit.results.runs`).

Cells are matched on (phase, context tokens, concurrency). Everything here is pure: DataFrames in,
DataFrames of numbers or display strings and markdown text out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from toolkit.base.schema import PHASE_TITLES, PHASES
from toolkit.method.disturbed import DISTURBED_MARK, disturbed_mask
from toolkit.method.drift import CELL_DRIFT_COLUMNS, DRIFT_QUANTITIES
from toolkit.method.multiplicity import family_adjusted
from toolkit.method.spread import Interval
from toolkit.reports.compare_drift import (
    MEDIANS,
    WITHIN_DRIFT,
    pair_drifts,
    ratio_spread,
    with_corrections,
    with_drift,
    with_round_spreads,
)
from toolkit.reports.compare_overall import RATIO_QUANTITIES, format_ratio, overall_ratios, overall_text
from toolkit.reports.compare_tradeoff import (
    TRADEOFF_CAPTION,
    frontier_display,
    pareto_frontier,
    pareto_mask,
    tradeoff_points,
)
from toolkit.reports.markdown_text import inert
from toolkit.reports.number_format import MISSING, as_number, format_ms, format_tok_s
from toolkit.reports.tables import markdown_table, summary_line
from toolkit.results.run_frame import run_labels, run_rows
from toolkit.results.runs import RUN_DRIFT

__all__ = [
    "CELL_COLUMNS",
    "COMPARE_TITLE",
    "KEY",
    "MACHINE_COLUMN",
    "NOT_SIGNIFICANT",
    "PREFILL_CAPTION",
    "RATIO_CAPTION",
    "RATIO_QUANTITIES",
    "STATUS_CAPTION",
    "TRADEOFF_CAPTION",
    "compare_markdown",
    "format_ratio",
    "frontier_display",
    "overall_ratios",
    "overall_text",
    "pareto_frontier",
    "pareto_mask",
    "prefill_display",
    "prefill_side_by_side",
    "ratio_display",
    "ratio_key",
    "ratio_table",
    "run_labels",
    "runs_table",
    "status_differences",
    "status_display",
    "tradeoff_points",
]

KEY: tuple[str, ...] = ("phase", "context_tokens", "concurrency")
CELL_COLUMNS: tuple[str, ...] = ("phase", "context_tokens", "context", "concurrency")
COMPARE_TITLE = "Speed test matrix comparison"
RATIO_CAPTION = (
    "B / A per cell: above 1 means the later run is higher (for TTFT: slower); values are A → B. ± is the ratio's "
    "95 % interval from both cells' spreads; TTFT's, a ratio of two medians, is shown by its bounds [low, high] "
    "(the ratio divided and multiplied by one factor: it is far from symmetric); n.s.: no "
    "significant difference once every test of the table is counted (Benjamini–Hochberg at 5 %: a run compared "
    "with itself marks no cell in 95 % of compares). "
    "When both runs measured their control cell three times or more (two rounds or more), each throughput ratio is "
    "divided by the machine's change between the cell's two measurements, read off the runs' control trends "
    "(column Machine), and that estimate's uncertainty is in the ±; with fewer, the larger of the runs' "
    "drifts is added to the throughput ratio's spread instead. A change between the runs themselves no control can "
    "see: a throughput ratio within the larger of the runs' drifts of 1 is marked within drift (it can be the "
    "machine). A cell measured in two rounds or more has its rounds' spread (the t interval of their mean) "
    "(docs/method/spread.md, Spread, Repeats; docs/method/drift.md, Drift)."
)
NOT_SIGNIFICANT = "n.s."
MACHINE_COLUMN = "Machine A → B"
STATUS_CAPTION = "Cells whose status differs between runs (— : not measured in that run)."
PREFILL_CAPTION = "Prompt tok/s and cold TTFT by context length, runs side by side."
_FORMATS = {"total_tok_s": format_tok_s, "per_request_tok_s": format_tok_s, "ttft_ms": format_ms}
_PHASE_ORDER = {phase: i for i, phase in enumerate(PHASES)}


def ratio_key(position: int) -> str:
    """Figure key of the ratio heatmaps of the run at 1-based ``position`` against the first run."""
    return f"ratio-{position}"


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    order = frame["phase"].map(_PHASE_ORDER).fillna(2)
    return frame.assign(_order=order).sort_values(["_order", "context_tokens", "concurrency"]).drop(columns="_order")


def _ratio(b: Any, a: Any) -> float:
    num, den = as_number(b), as_number(a)
    return num / den if num is not None and den else math.nan


def _interval(value: Any, half_width: Any, dof: Any, rounds: Any, *, median: bool = False) -> Interval | None:
    """A cell's interval as `with_round_spreads` left it; a `median`'s window interval (TTFT's order statistics)
    is read on the log scale (toolkit.method.spread.median_interval)."""
    number, width, degrees = as_number(value), as_number(half_width), as_number(dof)
    if number is None or width is None or not number:
        return None
    dof_ = math.inf if degrees is None else degrees
    return Interval(number, width, dof_, rounds is True, log_scale=median and rounds is not True and number > 0)


def ratio_table(
    frame: pd.DataFrame, baseline: str, other: str, quantities: Sequence[str] = tuple(RATIO_QUANTITIES)
) -> pd.DataFrame:
    """Cells present in both runs with B / A of each quantity (default total tok/s, per-request tok/s, TTFT).

    Columns: the cell (phase, context_tokens, context, concurrency), ``status_a``, ``status_b``,
    ``disturbed_a``, ``disturbed_b`` (still disturbed after the retries), ``drift`` (the larger of the runs'),
    ``machine_change``, ``machine_change_se`` and ``machine_change_dof`` (the machine's change from the cell in A
    to it in B along the runs' control lines, a fraction, its log-scale standard error and dof; NaN unless both
    runs' lines have three readings, toolkit.reports.compare_drift.with_corrections),
    then per quantity ``<q>_a``, ``<q>_b``, ``<q>_ratio`` (B / A, for throughput divided by the machine's change;
    NaN when either value is missing, A is zero, or either cell is disturbed), ``<q>_ratio_hw``
    (the ratio's 95 % half-width from the cells' ``<q>_ci``; NaN without them), ``<q>_ratio_dof``, ``<q>_p``
    (the p-value of no difference), ``<q>_p_adjusted`` (Benjamini–Hochberg over every test of the table) and
    ``<q>_significant`` (whether the adjusted p is at most 5 %; None without a test).
    """
    spreads = [f"{q}_{s}" for s in ("ci", "dof", "rounds") for q in quantities]
    columns = [*CELL_COLUMNS, "status", *quantities, *spreads, RUN_DRIFT, *CELL_DRIFT_COLUMNS]

    def cells(label: str) -> pd.DataFrame:
        mine = with_round_spreads(run_rows(frame, label), quantities)
        mine = mine.reindex(columns=list(dict.fromkeys([*mine.columns, *spreads, RUN_DRIFT, *CELL_DRIFT_COLUMNS])))
        return mine[columns].assign(disturbed=disturbed_mask(mine))

    a, b = cells(baseline), cells(other).drop(columns="context")
    merged = a.merge(b, on=list(KEY), how="inner", suffixes=("_a", "_b"))
    unusable = merged["disturbed_a"] | merged["disturbed_b"]
    drifts, corrections = pair_drifts(merged), with_corrections(merged)
    for q in quantities:
        moved = [c if q in DRIFT_QUANTITIES else None for c in corrections]
        guards = [d if q in DRIFT_QUANTITIES else None for d in drifts]
        pairs = zip(merged[f"{q}_b"], merged[f"{q}_a"], moved, unusable, strict=True)
        merged[f"{q}_ratio"] = [
            math.nan if bad else _ratio(vb, va) * (math.exp(-c.change) if c else 1.0) for vb, va, c, bad in pairs
        ]
        sides = {run: list(zip(*(merged[f"{q}_{s}_{run}"] if s else merged[f"{q}_{run}"]
                                 for s in ("", "ci", "dof", "rounds")), strict=True)) for run in "ab"}  # fmt: skip
        spread = [
            ratio_spread(_interval(*a, median=q in MEDIANS), _interval(*b, median=q in MEDIANS), c, d)
            if not bad
            else (math.nan, math.nan, None)
            for a, b, c, d, bad in zip(sides["a"], sides["b"], moved, guards, unusable, strict=True)
        ]
        merged[f"{q}_ratio_hw"] = [hw for hw, _, _ in spread]
        merged[f"{q}_ratio_dof"] = [dof for _, dof, _ in spread]
        merged[f"{q}_p"] = pd.Series([p for _, _, p in spread], index=merged.index, dtype=object)
    merged = family_adjusted(merged, quantities)
    merged = with_drift(merged, quantities, drifts)  # within the runs' drift of 1: not significant
    ordered = [*CELL_COLUMNS, "status_a", "status_b", "disturbed_a", "disturbed_b", "drift", "machine_change"]
    ordered += ["machine_change_se", "machine_change_dof"]
    ordered += [f"{q}_within_drift" for q in quantities]
    ordered += [f"{q}_{s}" for q in quantities
                for s in ("a", "b", "ratio", "ratio_hw", "ratio_dof", "p", "p_adjusted", "significant")]  # fmt: skip
    return _sorted(merged[ordered]).reset_index(drop=True)


def status_differences(frame: pd.DataFrame) -> pd.DataFrame:
    """Cells whose status is not the same in every run; one status column per run (None: not measured)."""
    labels = run_labels(frame)
    cells: dict[tuple[str, int, int], dict[str, Any]] = {}
    for rec in frame[[*CELL_COLUMNS, "status", "run"]].to_dict("records"):
        key = (str(rec["phase"]), int(rec["context_tokens"]), int(rec["concurrency"]))
        cell = cells.setdefault(key, {c: rec[c] for c in CELL_COLUMNS} | dict.fromkeys(labels))
        cell[str(rec["run"])] = rec["status"]
    rows = [cell for cell in cells.values() if len({cell[label] for label in labels}) > 1]
    return _sorted(pd.DataFrame(rows, columns=[*CELL_COLUMNS, *labels], dtype=object)).reset_index(drop=True)


def prefill_side_by_side(frame: pd.DataFrame) -> pd.DataFrame:
    """Prefill runs side by side: rows (context_tokens, context) by tokens, columns (run, status/total_tok_s/ttft_ms).

    A run without a measurement at a context has None there.
    """
    columns = pd.MultiIndex.from_product([run_labels(frame), ["status", "total_tok_s", "ttft_ms"]])
    rows: dict[tuple[int, str], dict[tuple[str, str], Any]] = {}
    for rec in frame[frame["phase"] == "prefill"].to_dict("records"):
        row = rows.setdefault((int(rec["context_tokens"]), str(rec["context"])), {})
        row[(rec["run"], "status")] = rec["status"]
        row |= {(rec["run"], q): as_number(rec[q]) for q in ("total_tok_s", "ttft_ms")}
    keys = sorted(rows)
    index = pd.MultiIndex.from_arrays([[k[0] for k in keys], [k[1] for k in keys]], names=["context_tokens", "context"])
    data = [[rows[key].get(column) for column in columns] for key in keys]
    return pd.DataFrame(data, index=index, columns=columns, dtype=object)


# ---- display strings -------------------------------------------------------------------------------


def _phase_title(phase: Any) -> str:
    return PHASE_TITLES.get(str(phase), str(phase))


def _disturbed_in(row: Mapping[str, Any]) -> str | None:
    """``A``, ``B`` or ``A and B``: the runs whose cell stayed disturbed after its retries; None if neither."""
    runs = [name for name in ("a", "b") if row.get(f"disturbed_{name}")]
    return " and ".join(name.upper() for name in runs) or None


def _ratio_interval_text(quantity: str, ratio: float, half_width: float) -> str:
    """A cell's ratio interval as compare shows it: a median's (TTFT, `MEDIANS`) by its bounds, `[0.61, 1.65]`,
    the ratio divided and multiplied by one factor, as far below as above in proportion; the others as ± their
    upper side, `±0.07` (throughput ratios are within a few per cent of symmetric, and their calibrated coverage
    is of this display: benchmarks/calibration.py)."""
    if quantity in MEDIANS:
        low, high = Interval(ratio, half_width, log_scale=True).bounds
        return f"[{low:.2f}, {high:.2f}]"
    return f"±{half_width:.2f}"


def _ratio_cell(row: Mapping[str, Any], quantity: str) -> str:
    a, b = row[f"{quantity}_a"], row[f"{quantity}_b"]
    if as_number(a) is None and as_number(b) is None:
        return MISSING
    if _disturbed_in(row):
        return DISTURBED_MARK
    value, fmt = as_number(row[f"{quantity}_ratio"]), _FORMATS[quantity]
    half_width, within = as_number(row.get(f"{quantity}_ratio_hw")), row.get(f"{quantity}_within_drift") is True
    not_significant = row.get(f"{quantity}_significant") is False and not within
    ratio = format_ratio(value)
    if half_width is not None and value is not None and ratio != MISSING:
        ratio += f" {_ratio_interval_text(quantity, value, half_width)}"
        ratio += f" {NOT_SIGNIFICANT}" if not_significant else ""
    if within and ratio != MISSING:
        ratio += f" {WITHIN_DRIFT}"
    return f"{ratio} ({fmt(a)} → {fmt(b)})"


def ratio_display(table: pd.DataFrame) -> pd.DataFrame:
    """Display strings of a :func:`ratio_table`; cells with no ratio and an unchanged status are left out.

    A cell disturbed in either run shows ``disturbed`` instead of its ratios, and its status says in which run.
    When the runs' control lines placed any cell, a last column gives the machine's change the throughput ratios
    were divided by.
    """
    data, show_machine = [], "machine_change" in table.columns and table["machine_change"].notna().any()
    for record in table.to_dict("records"):
        row = {str(k): v for k, v in record.items()}
        ratios = [as_number(row[f"{q}_ratio"]) for q in RATIO_QUANTITIES]
        same, disturbed = row["status_a"] == row["status_b"], _disturbed_in(row)
        if same and not disturbed and all(r is None for r in ratios):
            continue
        status = str(row["status_a"]) if same else f"{row['status_a']} → {row['status_b']}"
        status += f" · {DISTURBED_MARK} in {disturbed}" if disturbed else ""
        machine = as_number(row.get("machine_change"))
        head = [_phase_title(row["phase"]), row["context"], f"{int(row['concurrency']):,}", status]
        tail = [MISSING if machine is None else f"{100 * machine:+.1f} %"] if show_machine else []
        data.append(head + [_ratio_cell(row, q) for q in RATIO_QUANTITIES] + tail)
    columns = ["Phase", "Context", "Requests at once", "Status", *RATIO_QUANTITIES.values()]
    columns += [MACHINE_COLUMN] if show_machine else []
    return pd.DataFrame(data, columns=columns, dtype=object)


def status_display(differences: pd.DataFrame) -> pd.DataFrame:
    """Display strings of :func:`status_differences` (not measured: ``—``)."""
    labels = [c for c in differences.columns if c not in CELL_COLUMNS]
    data = [
        [_phase_title(row["phase"]), row["context"], f"{int(row['concurrency']):,}"]
        + [MISSING if row[label] is None or pd.isna(row[label]) else str(row[label]) for label in labels]
        for row in differences.to_dict("records")
    ]
    return pd.DataFrame(data, columns=["Phase", "Context", "Requests at once", *labels], dtype=object)


def _prefill_cell(row: pd.Series, label: str, quantity: str) -> str:
    status = row[(label, "status")]
    if not isinstance(status, str):
        return MISSING
    value = row[(label, quantity)]
    if quantity == "ttft_ms":
        return format_ms(value)
    return format_tok_s(value, trim_zero=True) if as_number(value) is not None else status


def prefill_display(frame: pd.DataFrame) -> pd.DataFrame:
    """Prefill side by side as display strings: Context, then ``<run> tok/s`` and ``<run> TTFT`` per run."""
    side, labels = prefill_side_by_side(frame), run_labels(frame)
    quantities = ("total_tok_s", "ttft_ms")
    contexts = side.index.get_level_values(1)  # the index is (context tokens, context label)
    data = [
        [context, *(_prefill_cell(row, label, q) for label in labels for q in quantities)]
        for context, (_, row) in zip(contexts, side.iterrows(), strict=True)
    ]
    columns = ["Context", *(f"{label} {name}" for label in labels for name in ("tok/s", "TTFT"))]
    return pd.DataFrame(data, columns=columns, dtype=object)


def runs_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per run: label, number of measurements, and the report's summary line (with the run's control drift,
    when it measured one)."""
    data = []
    for label in run_labels(frame):
        mine = run_rows(frame, label)
        drift = next((d for d in mine.get(RUN_DRIFT, []) if as_number(d) is not None), None)
        summary = summary_line(mine.drop(columns=["run", RUN_DRIFT], errors="ignore")) or MISSING
        data.append([label, f"{len(mine):,}", summary + (f" · control drift {100 * drift:.1f} %" if drift else "")])
    return pd.DataFrame(data, columns=["Run", "Measurements", "Summary"], dtype=object)


def compare_markdown(frame: pd.DataFrame, images: Mapping[str, str] | None = None) -> str:
    """compare.md: runs, prefill side by side, B / A per later run, trade-off, status differences.

    ``images`` maps figure keys (``prefill``, ``ratio-2`` …, ``tradeoff``) to paths beside the file.
    """
    images = images or {}
    labels = run_labels(frame)
    out = [f"# {COMPARE_TITLE}", markdown_table(runs_table(frame))]
    if (frame["phase"] == "prefill").any():
        out += ["## Prefill", PREFILL_CAPTION, markdown_table(prefill_display(frame))]
        out += [f"![Prefill]({images['prefill']})"] if "prefill" in images else []
    for position, other in enumerate(labels[1:], 2):
        out += [f"## {inert(other)} vs {inert(labels[0])}", RATIO_CAPTION]
        key = ratio_key(position)
        out += [f"![{inert(other)} / {inert(labels[0])}]({images[key]})"] if key in images else []
        table = ratio_table(frame, labels[0], other)
        ratios = ratio_display(table)
        out += [overall] if (overall := overall_text(table)) else []
        out.append(markdown_table(ratios) if len(ratios) else "No cell was measured in both runs.")
    out += ["## Trade-off", TRADEOFF_CAPTION]
    out += [f"![Trade-off]({images['tradeoff']})"] if "tradeoff" in images else []
    frontier = frontier_display(frame)
    out.append(markdown_table(frontier) if len(frontier) else "No decode cell ran.")
    differences = status_display(status_differences(frame))
    out += ["## Status differences", STATUS_CAPTION]
    out.append(markdown_table(differences) if len(differences) else "Every cell has the same status in every run.")
    return "\n\n".join(out) + "\n"
