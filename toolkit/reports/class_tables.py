"""A class sweep's table: one row per step and traffic class, each against its own service level; a model mix's: one
row per step and served model (display strings; toolkit.rates.classes, toolkit.rates.model_mix,
toolkit.method.class_figures)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from toolkit.reports.markdown_text import inert
from toolkit.reports.number_format import (
    MISSING,
    as_number,
    format_count,
    format_ms,
    format_percent,
    format_rate,
    format_tbt_ms,
)

__all__ = ["CLASSES_CAPTION", "MODELS_CAPTION", "SHARE_COLUMNS", "classes_table", "models_table"]

CLASSES_CAPTION = (
    "A class sweep's steps, class by class · share: of the step's arrivals, with its 95 % interval, beside its "
    "weight's share · TTFT from the scheduled arrival · each class judged against its own service level: the "
    "share of its steady requests meeting it, its 95 % interval and the verdict (meets, fails, undecided)"
)
MODELS_CAPTION = (
    "A model mix's steps, model by model · share: of the step's arrivals, with its 95 % interval, beside its weight's "
    "share · achieved: the model's requests sent per second · TTFT from the scheduled arrival · with a service level, "
    "each model's goodput and the share of its steady requests meeting the sweep's level, with its 95 % interval"
)
_MODEL_COLUMNS = ("Step", "Model", "Share (weight)", "Completed", "Achieved req/s", "TTFT p50", "TTFT p90", "TTFT p99",
                 "TPOT p90")  # fmt: skip
_MODEL_SLO_COLUMNS = ("Goodput req/s", "Meets the SLO", "Verdict")
# Shares of a step's (or a class's) completed replies, shown only when some step (class) has them: a response
# format, tools
SHARE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("schema_valid_share", "Valid replies"),  # kept to the response format (JSON, or valid under the schema)
    ("tool_called_share", "Tool called"),  # called a tool
    ("tool_args_valid_share", "Tool arguments valid"),  # the first call's arguments valid under its parameters
)
_CLASS_COLUMNS = ("Step", "Class", "Share (weight)", "Completed", "TTFT p90", "TPOT p90", "Goodput req/s",
                 "Meets its SLO", "Verdict")  # fmt: skip


def classes_table(steps: pd.DataFrame) -> pd.DataFrame | None:
    """Display strings of a class sweep's steps, one row per step and class; with the shares of its completed
    replies that kept to its response format or called its tools (`SHARE_COLUMNS`) where some class's requests
    carried them (— for a class whose did not); None for another sweep."""
    if "classes" not in steps:
        return None
    found = [(row["step"], name, c) for row in steps.sort_values("step").to_dict("records")
             for name, c in (row["classes"] if isinstance(row["classes"], dict) else {}).items()]  # fmt: skip
    shares = [(key, column) for key, column in SHARE_COLUMNS if any(c.get(key) is not None for _, _, c in found)]
    rows = []
    for step, name, c in found:
        rows.append([str(step), inert(name), _share(c), f"{format_count(c['completed'])}/{format_count(c['requests'])}",
                     format_ms(c.get("ttft_sched_p90_ms")), format_tbt_ms(c.get("tpot_p90_ms")),
                     format_rate(c.get("goodput")), _meets(c), str(c["slo_verdict"]),
                     *(_percent(c.get(key)) for key, _ in shares)])  # fmt: skip
    columns = [*_CLASS_COLUMNS, *(column for _, column in shares)]
    return pd.DataFrame(rows, columns=columns, dtype=object) if rows else None


def _percent(value: Any) -> str:
    share = as_number(value)
    return MISSING if share is None else format_percent(share)


def _share(figures: Mapping[str, Any]) -> str:
    low, high = format_percent(figures["share_low"]), format_percent(figures["share_high"])
    return f"{format_percent(figures['share'])} [{low}, {high}] ({format_percent(figures['weight_share'])})"


def _meets(figures: Mapping[str, Any]) -> str:
    meets = format_percent(figures["slo_fraction"])
    if figures.get("slo_fraction_low") is not None and figures.get("slo_fraction_high") is not None:
        meets += f" [{format_percent(figures['slo_fraction_low'])}, {format_percent(figures['slo_fraction_high'])}]"
    return meets


def models_table(steps: pd.DataFrame) -> pd.DataFrame | None:
    """Display strings of a model mix's steps, one row per step and served model (goodput and the share meeting
    the service level only when the sweep has one); None for a sweep of one model."""
    if "models" not in steps:
        return None
    found = [(row["step"], name, m) for row in steps.sort_values("step").to_dict("records")
             for name, m in (row["models"] if isinstance(row["models"], dict) else {}).items()]  # fmt: skip
    if not found:
        return None
    slo = any(m.get("limit_fractions") for _, _, m in found)  # a level with a limit: {} without one
    rows = []
    for step, name, m in found:
        shown = [str(step), inert(name), _share(m), f"{format_count(m['completed'])}/{format_count(m['requests'])}",
                 format_rate(m.get("achieved_rate")), format_ms(m.get("ttft_sched_p50_ms")),
                 format_ms(m.get("ttft_sched_p90_ms")), format_ms(m.get("ttft_sched_p99_ms")),
                 format_tbt_ms(m.get("tpot_p90_ms"))]  # fmt: skip
        if slo:
            shown += [format_rate(m.get("goodput")), _meets(m), str(m["slo_verdict"])]
        rows.append(shown)
    columns = [*_MODEL_COLUMNS, *(_MODEL_SLO_COLUMNS if slo else ())]
    return pd.DataFrame(rows, columns=columns, dtype=object)
