"""Drift: how much the machine changed speed during a run, from its control cell (pure).

Each run measures a short control cell (the smallest context at 1 stream) before its first decode cell, after
each round and at its end (toolkit.matrix.control). The machine's change is the trend of the control's readings,
not their range: a straight line through the log of each reading against its start time (`control_fit`), its
slope times the run's span (`change`, e.g. -0.08), with a 95 % interval from the readings' own window intervals
pooled with the line's residual spread (`change_low`, `change_high`). A range (max / min - 1) held the
control's own noise and grew with the number of readings; a trend averages that noise out.

Compare applies the change to the quantities it moves (throughput: total and per-request tok/s; not TTFT, which
the control does not measure): the machine's change between a cell's measurement in run A and in run B is the
line of A from the cell to A's last reading plus the line of B from B's first reading to the cell
(`cell_drift`, `pair_correction`); the ratio is divided by it and its standard error gets the lines' own
uncertainty. A line needs three readings (a run of two rounds or more): through two, the readings' noise cannot
be checked against the line, and on the shared machine a 1-stream reading moves by more than its own interval
says; there compare widens the ratio by the larger of the runs' |change| (`drift`) as a bias spread over ±drift
(`widened`), a guard rather than a calibrated interval. What no control can see is a jump between the runs (B
started on a machine faster or slower than A ended on): against that, a throughput ratio within `drift` of 1 is
marked "within drift" (docs/method/drift.md, Drift). Runs recorded before trends kept the range as `drift`;
it is read as it was written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from toolkit.method.spread import (
    DOF_DISCOUNT,
    LEGACY_BATCHES,
    Interval,
    Ratio,
    ratio_dof,
    ratio_test,
    t_p_value,
    t_quantile,
    welch_dof,
    window_dof,
)

CONTROL_KEY = "control"
DRIFT_QUANTITIES = ("total_tok_s", "per_request_tok_s")  # what the control's change moves


class ControlPoint(Protocol):
    """One control reading as the drift arithmetic reads it: a Measurement, or run.json's ControlReading."""

    @property
    def started_at(self) -> str | None: ...
    @property
    def status(self) -> str | None: ...
    @property
    def total_tok_s(self) -> float | None: ...
    @property
    def total_tok_s_ci(self) -> float | None: ...
    @property
    def sub_windows(self) -> int | None: ...
    @property
    def window_dof(self) -> float | None: ...
    @property
    def disturbed(self) -> str | None: ...


def usable(reading: ControlPoint) -> bool:
    """Whether a control reading counts: Valid, with a throughput, its window undisturbed."""
    return reading.status == "Valid" and bool(reading.total_tok_s) and not reading.disturbed


def _reading_se(reading: ControlPoint) -> tuple[float, float]:
    """A control reading's standard error on the log scale, and its dof (from its window's half-width)."""
    dof = window_dof(reading.sub_windows or LEGACY_BATCHES, DOF_DISCOUNT, reading.window_dof)
    value, half = reading.total_tok_s, reading.total_tok_s_ci
    if not value or half is None:
        return 0.0, math.inf
    return half / value / t_quantile(dof), dof


def _epoch(stamp: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class ControlFit:
    """The line through a run's control readings: log speed per second, its standard error and dof, and when
    (epoch seconds) the first and the last reading started."""

    slope: float
    slope_se: float
    dof: float
    first_s: float
    last_s: float
    readings: int

    @property
    def span_s(self) -> float:
        return self.last_s - self.first_s


def control_fit(readings: Sequence[ControlPoint]) -> ControlFit | None:
    """The least-squares line through the log of each usable reading against its start time, its slope's standard
    error from the readings' own window intervals (Welch–Satterthwaite dof), pooled from three readings on with
    the line's residual spread (n - 2 dof), each weighted by its dof: the calibration benchmark covers 0.93–0.98
    so, where taking the larger of the two covered 0.98–1.00. None with fewer than two usable readings or without
    their start times."""
    good = [r for r in readings if usable(r)]
    stamps = [_epoch(r.started_at) for r in good]
    if len(good) < 2 or any(s is None for s in stamps):
        return None
    times = [float(s) for s in stamps if s is not None]
    logs = [math.log(r.total_tok_s) for r in good if r.total_tok_s]  # every usable one has it
    n, t_mean, y_mean = len(good), math.fsum(times) / len(times), math.fsum(logs) / len(logs)
    sxx = math.fsum((t - t_mean) ** 2 for t in times)
    if sxx == 0:
        return None
    slope = math.fsum((t - t_mean) * (y - y_mean) for t, y in zip(times, logs, strict=True)) / sxx
    measured = [
        (((t - t_mean) / sxx * se) ** 2, dof) for t, (se, dof) in zip(times, map(_reading_se, good), strict=True)
    ]
    variance, dof = math.fsum(v for v, _ in measured), welch_dof(measured)
    if n >= 3:  # the line's residuals are a second, independent estimate of the same spread: pooled by dof
        residual = math.fsum((y - y_mean - slope * (t - t_mean)) ** 2 for t, y in zip(times, logs, strict=True))
        known = dof if math.isfinite(dof) else 0.0  # readings without an interval add nothing to the pool
        variance, dof = (known * variance + residual / sxx) / (known + n - 2), known + n - 2
    return ControlFit(slope, math.sqrt(variance), dof, min(times), max(times), n)


def trend(readings: Sequence[ControlPoint]) -> tuple[float, float, float] | None:
    """The machine's change over the readings (a fraction) with its 95 % interval: the fitted line's slope times
    the readings' span. None with fewer than two usable readings."""
    fit = control_fit(readings)
    if fit is None:
        return None
    change, half = fit.slope * fit.span_s, t_quantile(fit.dof) * fit.slope_se * fit.span_s
    return math.expm1(change), math.expm1(change - half), math.expm1(change + half)


@dataclass(frozen=True)
class CellDrift:
    """The machine's log change along one run's control line: from the run's first reading to a cell (`before`)
    and from the cell to the run's last reading (`after`), each with its standard error, and the line's dof."""

    before: float
    before_se: float
    after: float
    after_se: float
    dof: float


CELL_DRIFT_COLUMNS = ("drift_before", "drift_before_se", "drift_after", "drift_after_se", "drift_dof")


def cell_drift_columns(drift: CellDrift | None) -> dict[str, float | None]:
    """A cell's place on its run's control line as a frame's columns (CELL_DRIFT_COLUMNS; None without one)."""
    values = (None,) * 5 if drift is None else (drift.before, drift.before_se, drift.after, drift.after_se, drift.dof)
    return dict(zip(CELL_DRIFT_COLUMNS, values, strict=True))


def cell_drift_from(values: Sequence[Any]) -> CellDrift | None:
    """The CellDrift of a row's CELL_DRIFT_COLUMNS values, in that order; None when any is missing."""
    numbers = [float(v) if isinstance(v, int | float) and not math.isnan(v) else None for v in values]
    if any(v is None for v in numbers):
        return None
    before, before_se, after, after_se, dof = (float(v) for v in numbers if v is not None)
    return CellDrift(before, before_se, after, after_se, dof)


LINE_READINGS = 3  # a line through two readings cannot check their noise against its residuals: no correction


def cell_drift(fit: ControlFit | None, started_at: Any) -> CellDrift | None:
    """Where a cell measured at `started_at` lies on its run's control line; None without either, or when the line
    has fewer than LINE_READINGS readings (a run of one round: compare then widens by the drift instead)."""
    at = _epoch(started_at)
    if fit is None or at is None or fit.readings < LINE_READINGS:
        return None
    before, after = at - fit.first_s, fit.last_s - at
    return CellDrift(
        fit.slope * before, fit.slope_se * abs(before), fit.slope * after, fit.slope_se * abs(after), fit.dof
    )


@dataclass(frozen=True)
class Correction:
    """The machine's log change from a cell in run A to the same cell in run B, its variance and dof."""

    change: float
    variance: float
    dof: float


def pair_correction(a: CellDrift | None, b: CellDrift | None) -> Correction | None:
    """A's line from the cell to A's end, then B's from B's start to the cell (a jump between the runs is not seen);
    None unless both cells lie on a line."""
    if a is None or b is None:
        return None
    parts = [(a.after_se**2, a.dof), (b.before_se**2, b.dof)]
    return Correction(a.after + b.before, math.fsum(v for v, _ in parts), welch_dof(parts))


def corrected_ratio(base: Interval, other: Interval, correction: Correction | None) -> Ratio:
    """other / base divided by the machine's change between the two measurements, its interval and p-value with
    the change's uncertainty added (Welch–Satterthwaite dof of the cells' `ratio_dof` and the change's); the
    plain ratio_test without a correction."""
    if correction is None or other.value <= 0 or base.value <= 0:
        return ratio_test(base, other)
    cells = base.relative_se**2 + other.relative_se**2
    parts = [(cells, ratio_dof(base, other)), (correction.variance, correction.dof)]
    se, dof = math.sqrt(math.fsum(v for v, _ in parts)), welch_dof(parts)
    log_ratio = math.log(other.value / base.value) - correction.change
    ratio = math.exp(log_ratio)
    if se == 0:
        return Ratio(Interval(ratio, 0.0, dof, log_scale=True), 0.0 if log_ratio else 1.0)
    spread = t_quantile(dof) * se
    return Ratio(Interval(ratio, ratio * math.expm1(spread), dof, log_scale=True), t_p_value(log_ratio / se, dof))


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
    over ±drift (variance drift² / 3, on the log scale): compare's guard where no control line corrects the ratio."""
    if drift is None or ratio <= 0:
        return half_width
    quantile = t_quantile(dof)
    se = math.log1p(half_width / abs(ratio)) / quantile
    spread = quantile * math.sqrt(se * se + math.log1p(drift) ** 2 / 3)
    return abs(ratio) * math.expm1(spread)
