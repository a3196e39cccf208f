"""Drift: how much the machine changed speed during a run, from its control cell (pure).

Each run measures a short control cell (the smallest context at 1 stream) before its first decode cell, after
each round and at its end (toolkit.matrix.control). The machine's change is the trend of the control's readings,
not their range: a straight line through the log of each reading against its start time, its slope times the
run's span (`change`, e.g. -0.08), with a 95 % interval from the larger of the line's residual spread and the
readings' own window intervals (`change_low`, `change_high`). A range (max / min - 1) held the control's own
noise and grew with the number of readings; a trend averages that noise out. The drift compare uses is the size
of that change (`drift` = |change|); it moves throughput (total and per-request tok/s), which the control
measures, and not TTFT, which it does not. Compare adds it to each throughput ratio's standard error as a bias
spread evenly over ±drift (in quadrature, variance drift² / 3), and marks a ratio within it of 1 "within drift"
(docs/METHOD.md, Drift). Runs recorded before this kept the range as `drift`; it is read as it was written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.base.schema import Measurement
from toolkit.method.spread import BATCHES, t_quantile, welch_dof

CONTROL_KEY = "control"
DRIFT_QUANTITIES = ("total_tok_s", "per_request_tok_s")  # what the control's change moves


def usable_control(m: Measurement) -> bool:
    return m.status == "Valid" and bool(m.total_tok_s) and not m.disturbed


def _reading_se(m: Measurement) -> tuple[float, float]:
    """A control reading's standard error on the log scale, and its dof (from its window's half-width)."""
    dof = max(1.0, (m.sub_windows or BATCHES) - 1 - 0.5)
    if not m.total_tok_s or m.total_tok_s_ci is None:
        return 0.0, math.inf
    return m.total_tok_s_ci / m.total_tok_s / t_quantile(dof), dof


def _times(readings: Sequence[Measurement]) -> list[float]:
    """Seconds from the first reading's start; the reading's order when a start time is missing."""
    from datetime import datetime

    try:
        stamps = [datetime.fromisoformat(str(m.started_at)).timestamp() for m in readings]
    except ValueError:
        return [float(i) for i in range(len(readings))]
    return [t - stamps[0] for t in stamps]


def trend(readings: Sequence[Measurement]) -> tuple[float, float, float] | None:
    """The machine's change over the readings (a fraction) with its 95 % interval: a least-squares line through the
    log of each reading against its time, its slope times the span. None with fewer than two readings."""
    if len(readings) < 2:
        return None
    times, logs = _times(readings), [math.log(m.total_tok_s or 1.0) for m in readings]
    n, t_mean, y_mean = len(readings), math.fsum(times) / len(times), math.fsum(logs) / len(logs)
    sxx = math.fsum((t - t_mean) ** 2 for t in times)
    if sxx == 0:
        return None
    slope = math.fsum((t - t_mean) * (y - y_mean) for t, y in zip(times, logs, strict=True)) / sxx
    span = max(times) - min(times)
    errors = [_reading_se(m) for m in readings]
    weights = [(t - t_mean) / sxx for t in times]
    measured = [((w * se) ** 2, dof) for w, (se, dof) in zip(weights, errors, strict=True)]
    variance, dof = math.fsum(v for v, _ in measured), welch_dof(measured)
    if n >= 3:
        residual = math.fsum((y - y_mean - slope * (t - t_mean)) ** 2 for t, y in zip(times, logs, strict=True))
        if (fitted := residual / (n - 2) / sxx) > variance:
            variance, dof = fitted, n - 2
    half = t_quantile(dof) * math.sqrt(variance) * span if variance > 0 else 0.0
    change = slope * span
    return math.expm1(change), math.expm1(change - half), math.expm1(change + half)


def control_summary(records: Sequence[Measurement], window_s: float) -> dict[str, Any]:
    """run.json's `control` block: the cell, its window, every control measurement, and over the usable ones the
    machine's change with its interval and the drift (None with fewer than two)."""
    first = records[0] if records else None
    good = [m for m in records if usable_control(m)]
    shown = [
        {
            "after_round": m.round or 0,
            "started_at": m.started_at,
            "status": m.status,
            "total_tok_s": m.total_tok_s,
            "total_tok_s_ci": m.total_tok_s_ci,
            "disturbed": m.disturbed,
        }
        for m in records
    ]
    change = trend(good)
    return {
        "cell": f"{first.context} × 1" if first else None,
        "context_tokens": first.context_tokens if first else None,
        "window_s": window_s,
        "measurements": shown,
        "change": None if change is None else change[0],
        "change_low": None if change is None else change[1],
        "change_high": None if change is None else change[2],
        "drift": None if change is None else abs(change[0]),
        "drift_basis": "trend",
    }


def run_drift(run_info: Mapping[str, Any] | None) -> float | None:
    """The run's drift (a fraction, e.g. 0.2), or None when it measured no usable control twice."""
    block = (run_info or {}).get(CONTROL_KEY) or {}
    value = block.get("drift")
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def pair_drift(a: float | None, b: float | None) -> float | None:
    """The drift two runs are compared under: the larger of theirs (None when neither measured one)."""
    known = [d for d in (a, b) if d is not None and math.isfinite(d)]
    return max(known) if known else None


def within_drift(ratio: float, drift: float | None) -> bool:
    """Whether a ratio differs from 1 by no more than the drift (on the log scale: |log ratio| <= log(1 + drift))."""
    return drift is not None and ratio > 0 and abs(math.log(ratio)) <= math.log1p(drift)


def widened(ratio: float, half_width: float, dof: float, drift: float | None) -> float:
    """A ratio's 95 % half-width with the drift added to its standard error in quadrature, as a bias spread evenly
    over ±drift (variance drift² / 3, on the log scale)."""
    if drift is None or ratio <= 0:
        return half_width
    quantile = t_quantile(dof)
    se = math.log1p(half_width / abs(ratio)) / quantile
    spread = quantile * math.sqrt(se * se + math.log1p(drift) ** 2 / 3)
    return abs(ratio) * math.expm1(spread)


def drift_note(run_info: Mapping[str, Any] | None) -> str | None:
    """The report's note on the control cell: its values at the start and the end, the machine's change with its
    interval (the range, for a run recorded before trends); None without."""
    block = (run_info or {}).get(CONTROL_KEY) or {}
    values = [
        m["total_tok_s"]
        for m in block.get("measurements", [])
        if m.get("total_tok_s") and m.get("status") == "Valid" and not m.get("disturbed")
    ]
    drift, change = block.get("drift"), block.get("change")
    if drift is None or change is None or len(values) < 2:
        return None
    head = (
        f"Drift: the control cell {block.get('cell')} ({block.get('window_s'):g} s window), measured "
        f"{len(values)} times from the run's start to its end, went {values[0]:,.1f} → {values[-1]:,.1f} tok/s"
    )
    low, high = block.get("change_low"), block.get("change_high")
    if block.get("drift_basis") != "trend" or low is None or high is None:
        return (
            f"{head} ({100 * change:+.1f} %), a range of {100 * drift:.1f} %: the machine changed speed by that much "
            "during the run. The ± intervals do not hold it; differences between runs smaller than it can be the "
            "machine (compare marks them within drift)."
        )
    return (
        f"{head}: a trend of {100 * change:+.1f} % over the run (95 %: {100 * low:+.1f} to {100 * high:+.1f} %), the "
        "machine's change of speed with the control's own noise averaged out. The ± intervals do not hold it; "
        "compare adds it to the throughput ratios' spread and marks a difference smaller than it within drift."
    )
