"""How far a decode window's numbers can be trusted: batch-means intervals from equal sub-windows (pure).

The kept window is cut into `k` equal sub-windows; each gives its own total tok/s, per-request tok/s and
time between tokens, and the interval is Student's t over those k values (batch means). Sub-windows are only
nearly independent when they are long enough: while the lag-1 autocorrelation of the sub-window rates is
above `MAX_LAG1`, neighbours are merged (k halves) down to `MIN_SUB_WINDOWS` (docs/METHOD.md, Spread).
A ratio of two such numbers gets an interval by the delta method; one whose interval holds 1 is no
significant difference.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

SUB_WINDOWS = 10
MIN_SUB_WINDOWS = 4
MAX_LAG1 = 0.3
# Student's t, two-sided 95 %, by degrees of freedom (1..30); beyond, the normal 1.96 is within 4 %.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t95(dof: int) -> float:
    """Two-sided 95 % quantile of Student's t with `dof` degrees of freedom."""
    if dof < 1:
        raise ValueError(f"dof: {dof}; allowed: >= 1")
    return _T95[dof - 1] if dof <= len(_T95) else 1.96


@dataclass(frozen=True)
class Interval:
    """A 95 % interval: `value` ± `half_width` from `n` sub-windows."""

    value: float
    half_width: float
    n: int

    @property
    def relative(self) -> float:
        """Half-width as a fraction of the value (inf for a zero value)."""
        return self.half_width / abs(self.value) if self.value else math.inf


def batch_means(values: Sequence[float]) -> Interval | None:
    """Mean of the sub-window values with its 95 % t interval; None for fewer than two values."""
    if len(values) < 2:
        return None
    m = math.fsum(values) / len(values)
    sd = math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))
    return Interval(m, t95(len(values) - 1) * sd / math.sqrt(len(values)), len(values))


def lag1_autocorrelation(values: Sequence[float]) -> float:
    """Lag-1 autocorrelation of a series (0 for a constant or too short one)."""
    if len(values) < 3:
        return 0.0
    m = math.fsum(values) / len(values)
    denominator = math.fsum((v - m) ** 2 for v in values)
    if denominator == 0:
        return 0.0
    return math.fsum((a - m) * (b - m) for a, b in pairwise(values)) / denominator


def sub_window_count(rates_for: Callable[[int], Sequence[float]], most: int = SUB_WINDOWS) -> int:
    """How many sub-windows: `most`, halved while their rates are autocorrelated above MAX_LAG1."""
    k = most
    while k // 2 >= MIN_SUB_WINDOWS and lag1_autocorrelation(rates_for(k)) > MAX_LAG1:
        k //= 2
    return k


def edges(start: float, end: float, k: int) -> list[tuple[float, float]]:
    """`k` equal sub-windows of (start, end]."""
    step = (end - start) / k
    return [(start + i * step, start + (i + 1) * step) for i in range(k)]


def ratio_interval(base: Interval, other: Interval) -> Interval:
    """other / base with a 95 % interval by the delta method (relative half-widths add in quadrature)."""
    ratio = other.value / base.value
    return Interval(ratio, abs(ratio) * math.hypot(base.relative, other.relative), min(base.n, other.n))


def significant(ratio: Interval) -> bool:
    """Whether the ratio's interval leaves out 1 (a real difference at 95 %)."""
    return abs(ratio.value - 1) > ratio.half_width
