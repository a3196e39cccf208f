"""A 95 % interval for the ratio of two independent samples' percentiles (pure): the bootstrap's percentile interval
of the log ratio, each sample resampled on its own, seeded (the same samples, the same interval).

Measured on exponential and lognormal samples of 40-300 values at p90 (`benchmarks/percentile_ratio.py`): coverage
0.952-0.970. The product of the two samples' own distribution-free bounds (each at √0.95, toolkit.method.
quantile_bounds) is safe but covered 0.998-1.000 there: far wider than a 95 % interval needs. Below
the fewest values that bound the percentile above (`min_bounded_n`: 36 at p90, 368 at p99) no interval is given:
the resampled percentile would be one of a sample's few largest values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from toolkit.method.quantile_bounds import LEVEL, min_bounded_n

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

RESAMPLES = 2000
SEED = 0


def percentile_ratio_interval(
    first: Sequence[float] | pd.Series | np.ndarray,
    second: Sequence[float] | pd.Series | np.ndarray,
    q: float,
    level: float = LEVEL,
    resamples: int = RESAMPLES,
) -> tuple[float, float] | None:
    """The `level` interval of second's q-th percentile over first's (NaN left out); None when either sample has
    fewer than `min_bounded_n(q)` values or a resampled percentile of `first` is not above 0."""
    import numpy as np

    a, b = (np.asarray(x, dtype=float).ravel() for x in (first, second))
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if min(len(a), len(b)) < min_bounded_n(q):
        return None
    rng = np.random.default_rng(SEED)
    pa = np.percentile(a[rng.integers(0, len(a), (resamples, len(a)))], q, axis=1)
    pb = np.percentile(b[rng.integers(0, len(b), (resamples, len(b)))], q, axis=1)
    if (pa <= 0).any() or (pb <= 0).any():
        return None
    tail = (1 - level) / 2 * 100
    low, high = np.exp(np.percentile(np.log(pb / pa), [tail, 100 - tail]))
    return float(low), float(high)
