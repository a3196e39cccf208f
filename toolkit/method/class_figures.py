"""A class sweep's step judged class by class: each traffic class's figures against its own service level (pure).

Each class's requests are summarised as `toolkit.method.goodput.summarize_step` summarises a step's, over the
step's own steady part (the same window for every class, so that the classes' steady requests add up to the
step's), with the share of the step's arrivals it drew and that share's 95 % Clopper–Pearson interval, to set
against its weight's share of the mix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toolkit.method.goodput import (
    CLASS_COLUMN,
    PERCENTILES,
    STEADY_TRIM,
    ServiceLevel,
    limited,
    request_latencies,
    steady_mask,
    summarize_step,
)
from toolkit.method.slo_fraction import fraction_interval

if TYPE_CHECKING:
    import pandas as pd

# of a class's summary row, what its figures keep (with its latency percentiles, the scheduling lag's left out)
KEPT: tuple[str, ...] = (
    "requests", "completed", "failed", "steady_requests", "achieved_rate", "request_throughput", "output_tok_s",
    "goodput", "slo_fraction", "slo_met", "slo_fraction_low", "slo_fraction_high", "slo_fraction_se",
    "slo_fraction_dof", "slo_fraction_deff", "slo_verdict",
)  # fmt: skip
LIMIT_NAMES = {"ttft_sched_ms": "ttft", "tpot_ms": "tpot", "e2e_sched_ms": "e2e"}  # `limited`'s columns, shown


def share_interval(k: int, n: int) -> tuple[float, float]:
    """95 % interval of a drawn share, `k` of `n` arrivals (Clopper–Pearson: the draws are independent)."""
    return fraction_interval(k, n)


def class_figures(
    records: pd.DataFrame,
    levels: Mapping[str, ServiceLevel],
    weights: Mapping[str, float],
    trim: float = STEADY_TRIM,
    percentiles: Sequence[float] = PERCENTILES,
    column: str = CLASS_COLUMN,
) -> dict[str, dict[str, Any]]:
    """Per class (in the order of `levels`; a model mix's models, `column` naming its records' model column): its
    drawn share (`share`, `share_low`, `share_high`) beside its weight's (`weight_share`), its summary figures (`KEPT`
    and its latency percentiles) against its own level, and `limit_fractions`: of its steady requests, the share
    within each limit of its level on its own."""
    steady = steady_mask(records, trim)
    total, weight_sum = len(records), sum(weights.values())
    figures: dict[str, dict[str, Any]] = {}
    for name, level in levels.items():
        mine = records[records[column] == name]
        mine = mine.assign(warmup=~steady[mine.index])  # the step's steady part, untrimmed
        summary = summarize_step(mine, level, 0.0, percentiles)
        row = summary.row()
        low, high = share_interval(len(mine), total)
        latencies = request_latencies(mine[steady[mine.index]])
        within = {LIMIT_NAMES[column]: latencies["ok"] & (latencies[column] <= limit) for column, limit in
                  limited(level)}  # fmt: skip
        figures[name] = {
            "weight_share": weights[name] / weight_sum,
            "share": len(mine) / total if total else 0.0,
            "share_low": low,
            "share_high": high,
            **{key: row[key] for key in KEPT},
            "limit_fractions": {k: float(v.mean()) if len(v) else None for k, v in within.items()},
            **{key: value for key, value in summary.percentiles.items() if not key.startswith("lag_")},
        }
    return figures


def mix_total(figures: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The step's own SLO figures in a class sweep, from its classes': goodput summed, the share of the steady
    requests meeting their own class's level, met and its verdict only when every class's are ("fails" when any
    class fails). No interval of its own: each class has its own (its `slo_fraction_low`, `_high`)."""
    counted = sum(int(f["steady_requests"]) for f in figures.values())
    met = sum(round(float(f["slo_fraction"]) * int(f["steady_requests"])) for f in figures.values())
    verdicts = {f["slo_verdict"] for f in figures.values()}
    return {
        "goodput": sum(float(f["goodput"] or 0.0) for f in figures.values()),
        "slo_fraction": met / counted if counted else 0.0,
        "slo_met": all(bool(f["slo_met"]) for f in figures.values()),
        "slo_fraction_low": None, "slo_fraction_high": None, "slo_fraction_se": None, "slo_fraction_dof": None,
        "slo_fraction_deff": None,
        "slo_verdict": "fails" if "fails" in verdicts else "meets" if verdicts == {"meets"} else "undecided",
    }  # fmt: skip
