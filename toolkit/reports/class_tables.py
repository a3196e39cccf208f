"""A class sweep's table: one row per step and traffic class, each against its own service level (display
strings; toolkit.rates.classes, toolkit.method.class_figures)."""

from __future__ import annotations

import pandas as pd

from toolkit.method.number_format import format_count, format_ms, format_percent, format_rate, format_tbt_ms
from toolkit.reports.markdown_text import inert

__all__ = ["CLASSES_CAPTION", "classes_table"]

CLASSES_CAPTION = (
    "A class sweep's steps, class by class · share: of the step's arrivals, with its 95 % interval, beside its "
    "weight's share · TTFT from the scheduled arrival · each class judged against its own service level: the "
    "share of its steady requests meeting it, its 95 % interval and the verdict (meets, fails, undecided)"
)
_CLASS_COLUMNS = ("Step", "Class", "Share (weight)", "Completed", "TTFT p90", "TPOT p90", "Goodput req/s",
                 "Meets its SLO", "Verdict")  # fmt: skip


def classes_table(steps: pd.DataFrame) -> pd.DataFrame | None:
    """Display strings of a class sweep's steps, one row per step and class; None for another sweep."""
    if "classes" not in steps:
        return None
    rows = []
    for row in steps.sort_values("step").to_dict("records"):
        for name, c in (row["classes"] if isinstance(row["classes"], dict) else {}).items():
            low, high = format_percent(c["share_low"]), format_percent(c["share_high"])
            share = f"{format_percent(c['share'])} [{low}, {high}]"
            meets = format_percent(c["slo_fraction"])
            if c.get("slo_fraction_low") is not None and c.get("slo_fraction_high") is not None:
                meets += f" [{format_percent(c['slo_fraction_low'])}, {format_percent(c['slo_fraction_high'])}]"
            rows.append([str(row["step"]), inert(name), f"{share} ({format_percent(c['weight_share'])})",
                         f"{format_count(c['completed'])}/{format_count(c['requests'])}",
                         format_ms(c.get("ttft_sched_p90_ms")), format_tbt_ms(c.get("tpot_p90_ms")),
                         format_rate(c.get("goodput")), meets, str(c["slo_verdict"])])  # fmt: skip
    return pd.DataFrame(rows, columns=list(_CLASS_COLUMNS), dtype=object) if rows else None
