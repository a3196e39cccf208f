"""Distribution-free bounds of a percentile from a sample: order statistics and the binomial (pure).

Of n independent values, the count B at or below the true q-th percentile is Binomial(n, q/100), whatever the
distribution, so the interval [x_(l), x_(u)] of two order statistics misses it below with probability
P(B <= l - 1) and above with P(B >= u). The ranks are chosen thus (docs/method/rates.md, Percentile bounds):

- the upper rank u is the smallest whose upper miss is at most half the error rate (2.5 % at 95 %): x_(u) is a
  one-sided 97.5 % upper bound, the figure a reader quotes ("p99 at most ..."). None ("unbounded") when even the
  maximum misses too often, (q/100)^n > 2.5 %: p90 needs 36 values, p99 368 (`min_bounded_n`);
- the lower rank l is the largest whose lower miss is at most what the upper left of the error rate (5 % less the
  upper miss; 5 % when unbounded). None when even the minimum misses too often.

The equal-tailed pair (each miss at most 2.5 %) keeps the same upper rank; it is conservative from discreteness,
its coverage up to 0.985 at p99 between 368 and 2,000 values. Giving the lower end the upper end's unused error
keeps every coverage at least 0.95 and at most 0.975 from 36 values at p90 and 368 at p99
(benchmarks/percentile_bounds.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

LEVEL = 0.95
SLACK = 1e-9  # a miss equal to its limit meets it, also where rounding puts it a hair above (1 value, p95: 5 %)


@dataclass(frozen=True)
class QuantileBounds:
    """The `level` interval of the q-th percentile from `n` values (NaN left out); None: no bound at that end."""

    low: float | None
    high: float | None  # None: "unbounded", too few values for an upper bound
    n: int
    q: float


def _check(q: float, level: float) -> None:
    if not 0 < q < 100:
        raise ValueError(f"q: {q} is not a percentile in (0, 100)")
    if not 0 < level < 1:
        raise ValueError(f"level: {level} is not a fraction in (0, 1)")


@lru_cache(maxsize=4096)
def order_ranks(n: int, q: float, level: float = LEVEL) -> tuple[int | None, int | None]:
    """The 1-based ranks (l, u) of the order statistics bounding the q-th percentile of `n` values (module doc);
    None where no rank qualifies."""
    _check(q, level)
    if n < 1:
        return None, None
    import numpy as np
    from scipy.special import bdtr, bdtrc

    p, alpha = q / 100, (1 - level) * (1 + SLACK)
    # Only ranks within a few standard deviations of n p can qualify: a window keeps a million gaps cheap.
    sd = math.sqrt(n * p * (1 - p))
    lo, hi = max(0, math.floor(n * p - 10 * sd - 10)), min(n, math.ceil(n * p + 10 * sd + 10))
    if lo > 0 and float(bdtr(lo, n, p)) > 1e-12:
        lo = 0
    if hi < n and float(bdtrc(hi, n, p)) > 1e-12:
        hi = n
    k = np.arange(lo, hi + 1)
    below = bdtr(k, n, p)  # P(B <= k): x_(k+1) lies above the percentile
    above = bdtrc(k, n, p)  # P(B >= k + 1): x_(k+1) lies below it
    ups = np.nonzero((above <= alpha / 2) & (k < n))[0]
    upper = int(k[ups[0]]) + 1 if len(ups) else None
    missed_above = float(above[ups[0]]) if len(ups) else 0.0
    lows = np.nonzero(below <= alpha - missed_above)[0]
    lower = int(k[lows[-1]]) + 1 if len(lows) else None
    return lower, upper


def quantile_bounds(values: Sequence[float] | pd.Series | np.ndarray, q: float, level: float = LEVEL) -> QuantileBounds:
    """The distribution-free `level` interval of the q-th percentile (q in percent) of `values`, NaN left out."""
    import numpy as np

    data = np.asarray(values, dtype=float).ravel()
    data = data[~np.isnan(data)]
    lower, upper = order_ranks(len(data), float(q), level)
    ranks = [r - 1 for r in (lower, upper) if r is not None]
    data = np.partition(data, ranks) if ranks else data
    return QuantileBounds(
        low=None if lower is None else float(data[lower - 1]),
        high=None if upper is None else float(data[upper - 1]),
        n=len(data),
        q=float(q),
    )


def min_bounded_n(q: float, level: float = LEVEL) -> int:
    """The fewest values from which the q-th percentile has an upper bound: the least n with (q/100)^n at most
    half the error rate (p90: 36, p99: 368 at 95 %); a caption's "p99 bounded from 368 requests"."""
    _check(q, level)
    p, tail = q / 100, (1 - level) / 2 * (1 + SLACK)
    n = max(1, math.ceil(math.log(tail) / math.log(p)))
    while p**n > tail:
        n += 1
    while n > 1 and p ** (n - 1) <= tail:
        n -= 1
    return n
