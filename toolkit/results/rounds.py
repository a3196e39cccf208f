"""Repeats: the records of a matrix measured in rounds, and one combined row per cell (pure).

A run with `repeats: R` measures every cell once per round (docs/method/spread.md, Repeats); each record carries its
`round`. Resume goes by (cell, round): the latest record of each. The reports go by cell: over the rounds that
ran undisturbed, the mean of each quantity with a 95 % t half-width across rounds (total and per-request tok/s,
TTFT: the number and its interval belong together), the median of the others, how many, and their range.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from toolkit.base.schema import Measurement
from toolkit.method.spread import t_quantile

CellKey = tuple[str, int, int]
RoundKey = tuple[str, int, int, int]
RAN = ("Valid", "Requests queued")
_MEDIAN_FIELDS = ("tbt_ms", "total_tok_s_ci", "per_request_tok_s_ci", "tbt_ms_ci", "ttft_ms_ci")
_REPEAT_CI = {"total_tok_s": "total_tok_s_repeat_ci", "per_request_tok_s": "per_request_tok_s_repeat_ci",
              "ttft_ms": "ttft_ms_repeat_ci"}  # fmt: skip


def round_of(m: Measurement) -> int:
    """The record's round; a record of a run without repeats is round 1."""
    return m.round or 1


def round_key(m: Measurement) -> RoundKey:
    return (*m.key, round_of(m))


def latest_by_round(measurements: Iterable[Measurement]) -> dict[RoundKey, Measurement]:
    """The last record of each (phase, context, concurrency, round): a resumed cell replaces its Error."""
    return {round_key(m): m for m in measurements}


def planned_rounds(keys: Sequence[CellKey], repeats: int) -> list[tuple[CellKey, int]]:
    """Every planned cell once per round, round after round: round 1 the whole matrix, then round 2, …"""
    return [(key, r) for r in range(1, repeats + 1) for key in keys]


def still_to_do(keys: Sequence[CellKey], repeats: int, earlier: Iterable[Measurement]) -> list[tuple[CellKey, int]]:
    """The planned (cell, round)s without a finished record (an Error is measured again)."""
    done = {k for k, m in latest_by_round(earlier).items() if m.status != "Error"}
    return [(key, r) for key, r in planned_rounds(keys, repeats) if (*key, r) not in done]


def usable(m: Measurement) -> bool:
    """A round whose number counts: it ran, undisturbed, with a total tok/s."""
    return m.status in RAN and m.total_tok_s is not None and not m.disturbed


def combine(rounds: Sequence[Measurement]) -> Measurement:
    """One row for a cell measured in `rounds` (in round order).

    One round: that record unchanged. More: the record of the median round (lower middle by total tok/s), its
    total and per-request tok/s and TTFT replaced by their means over the usable rounds beside the t half-widths
    of those means, TBT and the within-window half-widths by their medians, with `repeats` (how many), the
    range of total tok/s, and the mean of their start times (where compare places the mean on the run's control
    line, toolkit.method.drift). No usable round: the last round's record (an Error, or disturbed).
    """
    if len(rounds) == 1:
        return rounds[0]
    good = sorted((m for m in rounds if usable(m)), key=lambda m: m.total_tok_s or 0.0)
    if not good:
        return replace(rounds[-1], round=None)
    base = good[(len(good) - 1) // 2]
    totals = [m.total_tok_s for m in good if m.total_tok_s is not None]
    changes: dict[str, Any] = {name: _median([getattr(m, name) for m in good]) for name in _MEDIAN_FIELDS}
    changes |= {name: _mean([getattr(m, name) for m in good]) for name in _REPEAT_CI}
    changes |= {field: _t_half_width([getattr(m, name) for m in good]) for name, field in _REPEAT_CI.items()}
    changes |= {
        "ttft_ms_low": None,  # one window's order statistics: not an interval of the mean over rounds
        "ttft_ms_high": None,
        "round": None,
        "started_at": _mean_start([m.started_at for m in good]) or base.started_at,
        "repeats": len(good),
        "total_tok_s_repeat_min": min(totals),
        "total_tok_s_repeat_max": max(totals),
    }
    return replace(base, **changes)


def combine_rounds(measurements: Iterable[Measurement]) -> list[Measurement]:
    """One combined row per cell (in the order cells first appear), from the latest record of each round."""
    by_cell: dict[CellKey, list[Measurement]] = {}
    for (phase, ctx, n, _r), m in sorted(latest_by_round(measurements).items(), key=lambda item: item[0][3]):
        by_cell.setdefault((phase, ctx, n), []).append(m)
    return [combine(rounds) for rounds in by_cell.values()]


def _mean_start(stamps: Sequence[str | None]) -> str | None:
    """The mean of ISO start times (None when any is missing or unreadable)."""
    try:
        times = [datetime.fromisoformat(str(s)) for s in stamps if s]
    except ValueError:
        return None
    if not times or len(times) != len(stamps):
        return None
    mean = statistics.fmean(t.timestamp() for t in times)
    return datetime.fromtimestamp(mean, times[0].tzinfo).isoformat(timespec="seconds")


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _t_half_width(values: Sequence[float | None]) -> float | None:
    """95 % Student's t half-width of the mean of the known values; None for fewer than two."""
    known = [v for v in values if v is not None]
    if len(known) < 2:
        return None
    return t_quantile(len(known) - 1) * statistics.stdev(known) / math.sqrt(len(known))
