"""Small statistics without numpy: mean, median and linearly interpolated percentiles."""

from __future__ import annotations

import math
from collections.abc import Iterable


def mean(values: Iterable[float]) -> float | None:
    """Arithmetic mean; None for no values."""
    data = list(values)
    return math.fsum(data) / len(data) if data else None


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation, as numpy's default; None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"q: {q} is not between 0 and 100")
    data = sorted(values)
    if not data:
        return None
    position = (len(data) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(data) - 1)
    fraction = position - low
    return data[low] + (data[high] - data[low]) * fraction


def median(values: Iterable[float]) -> float | None:
    """The median (50th percentile); None for no values."""
    return percentile(values, 50)
