"""How far a decode window's numbers can be trusted: 95 % intervals whose coverage is measured (pure).

The kept window is cut into `BATCHES` = 2 halves; each gives its own total tok/s, per-request tok/s and time
between tokens, and the half-width is Student's t over those two values (batch means) with `WINDOW_DOF` = 0.9
degrees of freedom, which each result records (`window_dof`) so that a later choice still reads it as made. Token
rates are autocorrelated (a slow machine stays slow for a while): batches then look more alike than the windows
do, their spread understates the window's, and what no window can see (its own level while the machine wanders
slowly) can be paid for only by a heavy-tailed quantile. Two halves see the least of that correlation as signal,
and t with one degree of freedom (less `WINDOW_DOF_DISCOUNT`) has the heaviest tail; chosen by measuring coverage
on synthetic streams whose truth is known (`benchmarks/calibration.py`, `benchmarks/window_estimators.py`,
`benchmarks/window_dof_sweep.py`, docs/method/spread.md, Spread): 0.93-0.97 with independent gaps, under a drift,
and under a wandering speed up to 0.5 correlation between three batches (0.95 degrees of freedom, before, fell
to 0.929 there on one seed), where three batches at 1.5 degrees of freedom (the previous interval) covered 0.92,
and estimators that learn the correlation from inside the window less (an effective sample size from the lag-1
autocorrelation of 10 or 30 finer batches 0.59-0.85, overlapping batch means 0.80-0.93 at 0.97-1.00 with
independent gaps). The price is width: about twice the previous half-width.

A cell's TTFT is a median over few requests: its interval is distribution-free, from order statistics
(Hettmansperger–Sheather interpolation), and needs at least 6 requests; in a ratio it is read on the log scale
(`Interval.log_scale`), as every ratio's interval is. A ratio of two such numbers gets an interval from both
standard errors at `ratio_dof` degrees of freedom (two windows: pooled, less a measured
discount; otherwise Welch–Satterthwaite), and a p-value for "no difference" that compare corrects for the number
of tests it makes (toolkit.method.multiplicity).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

BATCHES = 2  # a decode window's interval: its halves (see the module's docstring)
WINDOW_DOF_DISCOUNT = 0.1  # degrees of freedom taken off the halves' k - 1 = 1 (measured, see the docstring)
WINDOW_DOF = BATCHES - 1 - WINDOW_DOF_DISCOUNT  # recorded in each result as `window_dof`
UNRECORDED_HALVES_DOF = 0.95  # the halves' dof before results recorded it (`window_dof`)
MIN_RECORDED_DOF = 0.5  # fewer is no dof the toolkit records (a damaged file): read as unrecorded
HALVES_DOFS = (WINDOW_DOF, UNRECORDED_HALVES_DOF)  # a decode window's two-halves interval, either way
RATIO_WINDOW_DOF = 1.65  # a ratio of two such windows (measured, see `ratio_dof`)
LEGACY_BATCHES = 3  # records made before the halves: 3 parts at 1.5 degrees of freedom (`window_dof`)
DOF_DISCOUNT = 0.5  # degrees of freedom taken off other batch means' k - 1 (the SLO fraction's, reconcile's)
LEVEL = 0.95
MIN_MEDIAN_SAMPLES = 6  # the fewest values whose [min, max] holds the median with 95 % (1 - 2 / 2**6 = 0.969)


def t_quantile(dof: float, level: float = LEVEL) -> float:
    """Two-sided `level` quantile of Student's t with `dof` degrees of freedom (inf: the normal)."""
    if not dof > 0:
        raise ValueError(f"dof: {dof}; allowed: > 0")
    from scipy.special import ndtri, stdtrit

    upper = 1 - (1 - level) / 2
    return float(ndtri(upper)) if math.isinf(dof) else float(stdtrit(dof, upper))


def t_p_value(t: float, dof: float) -> float:
    """Two-sided p-value of a t statistic with `dof` degrees of freedom (inf: the normal)."""
    from scipy.special import ndtr, stdtr

    tail = ndtr(-abs(t)) if math.isinf(dof) else stdtr(dof, -abs(t))
    return float(min(1.0, 2 * tail))


@dataclass(frozen=True)
class Interval:
    """A 95 % interval: `value` ± `half_width`; `dof` the degrees of freedom of its t quantile (inf: normal);
    `rounds`: the t interval of a mean over independent rounds (pooled with another such, `ratio_dof`);
    `log_scale`: symmetric on the log scale, `half_width` its upper (larger) side, as a ratio's interval is and a
    median's order-statistic interval of right-skewed latencies about is (see `bounds`, `relative_se`); `ends`: the
    interval's own ends where it is not symmetric (a median's order statistics), which `bounds` returns."""

    value: float
    half_width: float
    dof: float = math.inf
    rounds: bool = False
    log_scale: bool = False
    ends: tuple[float, float] | None = None

    @property
    def relative(self) -> float:
        """Half-width as a fraction of the value (inf for a zero value)."""
        return self.half_width / abs(self.value) if self.value else math.inf

    @property
    def relative_se(self) -> float:
        """The standard error as a fraction of the value (of the log value for a `log_scale` interval: its upper
        side's log1p; read as a linear one, the TTFT ratio of two 8-request medians was ±133-144 % and covered
        0.990-0.996, on the log scale 0.960-0.970, benchmarks/calibration.py): the half-width without its t
        quantile."""
        spread = math.log1p(self.relative) if self.log_scale else self.relative
        return spread / t_quantile(self.dof)

    @property
    def bounds(self) -> tuple[float, float]:
        """The interval's ends: its own `ends` where it has them; else `value` ± `half_width`, and for a
        `log_scale` one (a positive value) `value` divided and multiplied by 1 + `relative`."""
        if self.ends is not None:
            return self.ends
        if self.log_scale and self.value > 0:
            return self.value / (1 + self.relative), self.value + self.half_width
        return self.value - self.half_width, self.value + self.half_width


def batch_means(values: Sequence[float], dof_discount: float = DOF_DISCOUNT) -> Interval | None:
    """Mean of the batch values with its 95 % t interval at k - 1 - `dof_discount` degrees of freedom; None for
    fewer than two values."""
    if len(values) < 2:
        return None
    m = math.fsum(values) / len(values)
    sd = math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))
    dof = len(values) - 1 - dof_discount
    return Interval(m, t_quantile(dof) * sd / math.sqrt(len(values)), dof)


def window_interval(values: Sequence[float]) -> Interval | None:
    """A decode window's 95 % interval from its `BATCHES` halves' values (total tok/s, per-request tok/s or TBT):
    batch means at `WINDOW_DOF` degrees of freedom; None unless there are exactly `BATCHES` values."""
    return batch_means(values, WINDOW_DOF_DISCOUNT) if len(values) == BATCHES else None


def window_dof(sub_windows: float, legacy_discount: float = 0.0, recorded: float | None = None) -> float:
    """The degrees of freedom to read a recorded window half-width with: the record's own `window_dof` where it
    has one (at least `MIN_RECORDED_DOF`); halves recorded without it, `UNRECORDED_HALVES_DOF`; a record made
    before the halves (`LEGACY_BATCHES` parts, built at 1.5) its parts less one less `legacy_discount`, as each
    reader took it then (compare 2, the control line 1.5)."""
    if recorded is not None and recorded >= MIN_RECORDED_DOF:
        return recorded
    return UNRECORDED_HALVES_DOF if sub_windows == BATCHES else sub_windows - 1 - legacy_discount


def edges(start: float, end: float, k: int) -> list[tuple[float, float]]:
    """`k` equal sub-windows of (start, end]."""
    step = (end - start) / k
    return [(start + i * step, start + (i + 1) * step) for i in range(k)]


def _binomial_cdf(k: int, n: int) -> float:
    """P(B <= k) for B ~ Binomial(n, 1/2)."""
    return math.fsum(math.comb(n, i) for i in range(k + 1)) / (1 << n)


def median_interval(values: Sequence[float], level: float = LEVEL) -> Interval | None:
    """The sample median with a distribution-free interval for the true median, by order statistics interpolated to
    `level` (Hettmansperger and Sheather, 1986): its `ends`, and as a half-width the larger side; None for fewer
    than `MIN_MEDIAN_SAMPLES` values. Read as `log_scale` in a ratio (latencies skew right: the larger side is the
    upper one). Shown as ± its larger side, a window's median TTFT held the truth 0.964-0.973 of the time; by its
    ends, as a report shows it, 0.941-0.948 (benchmarks/calibration.py, `ttft_ms`)."""
    data = sorted(values)
    n = len(data)
    if n < MIN_MEDIAN_SAMPLES:
        return None

    def coverage(d: int) -> float:  # of [x_(d), x_(n-d+1)], 1-based
        return 1 - 2 * _binomial_cdf(d - 1, n)

    d = 1
    while d + 1 <= n // 2 and coverage(d + 1) >= level:
        d += 1
    high, low = coverage(d), coverage(d + 1) if d + 1 <= n // 2 else 0.0
    share = (high - level) / (high - low) if high > low else 0.0
    weight = (n - d) * share / (d + (n - 2 * d) * share) if share else 0.0
    lower = (1 - weight) * data[d - 1] + weight * data[d]
    upper = (1 - weight) * data[n - d] + weight * data[n - d - 1]
    middle = data[n // 2] if n % 2 else (data[n // 2 - 1] + data[n // 2]) / 2
    return Interval(middle, max(middle - lower, upper - middle), n - 1, log_scale=middle > 0, ends=(lower, upper))


@dataclass(frozen=True)
class Ratio:
    """other / base with its 95 % interval and the p-value of "no difference" (a ratio of 1)."""

    interval: Interval
    p_value: float


def welch_dof(parts: Sequence[tuple[float, float]]) -> float:
    """Welch–Satterthwaite degrees of freedom of a sum of variances, each (variance, its dof); a part with
    infinite dof adds no uncertainty of its own; inf when every part has infinite dof."""
    uncertain = math.fsum(v * v / dof for v, dof in parts if v > 0 and math.isfinite(dof))
    total = math.fsum(v for v, _ in parts)
    return total**2 / uncertain if uncertain > 0 else math.inf


def ratio_dof(base: Interval, other: Interval) -> float:
    """Degrees of freedom of other / base's log-scale variance (the sum of both relative ones). Two decode windows
    (both read from their halves, `HALVES_DOFS`): `RATIO_WINDOW_DOF`, measured as the pooled 2 × 0.95 less 0.25
    (the ratio's standard error does not depend on the dof a half-width was recorded at). The same cell in two
    runs has alike relative variances, and Welch–Satterthwaite from two 1-dof estimates of them mostly comes out
    near 1 (the larger estimate dominates by chance), which covered 0.976-0.988; the pooled 1.9 covers about 0.91
    at 0.5 correlation between batches; 1.65 covers 0.933-0.968 from independent gaps to 0.5, 0.973-0.977 under a
    drift inside the window (`benchmarks/calibration.py --windows-only`, docs/method/spread.md). Two means over
    as many independent rounds (`rounds`): the pooled t's dof, both sides' summed, exact when the cell's variance is
    alike in both runs (Welch–Satterthwaite from two 2-dof estimates covered 0.964-0.976). Any other pair:
    Welch–Satterthwaite."""
    if base.dof in HALVES_DOFS and other.dof in HALVES_DOFS:
        return RATIO_WINDOW_DOF
    if base.rounds and other.rounds and base.dof == other.dof:
        return base.dof + other.dof
    return welch_dof([(base.relative_se**2, base.dof), (other.relative_se**2, other.dof)])


def ratio_test(base: Interval, other: Interval) -> Ratio:
    """other / base: the log ratio's standard error from both relative standard errors, `ratio_dof` degrees of
    freedom, the interval back on the ratio's scale (`log_scale`, its upper side as the half-width)."""
    ratio = other.value / base.value
    a, b = base.relative_se**2, other.relative_se**2
    se = math.sqrt(a + b)
    dof = ratio_dof(base, other)
    if se == 0:
        return Ratio(Interval(ratio, 0.0, dof, log_scale=True), 0.0 if ratio != 1 else 1.0)
    half_width = abs(ratio) * math.expm1(t_quantile(dof) * se)
    p_value = t_p_value(math.log(ratio) / se, dof) if ratio > 0 else 0.0
    return Ratio(Interval(ratio, half_width, dof, log_scale=True), p_value)


def ratio_interval(base: Interval, other: Interval) -> Interval:
    """other / base with its 95 % interval (see `ratio_test`)."""
    return ratio_test(base, other).interval


def significant(ratio: Interval) -> bool:
    """Whether the ratio's interval leaves out 1 (a difference at 95 %, before any correction for many tests)."""
    return abs(ratio.value - 1) > ratio.half_width
