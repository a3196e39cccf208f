"""The search for the highest rate meeting the service level: bisection inside the listed steps' bracket (pure).

The bracket is `highest_rate_meeting` over every step run so far (the highest passing rate below every failing
one, and the lowest failing rate). Each probe is its midpoint, run as a full step; the search ends when the
bracket's width is within `precision` of its lower end, or after `max_probes`. An upper end of `inf` (only the
all-at-once step failed) is replaced for bisection by the request throughput that step achieved, or twice the
lower end when that is not above it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from toolkit.method.goodput import highest_rate_meeting
from toolkit.rates.params import rate_text


def finite_upper(high: float, steps: Sequence[dict[str, Any]], low: float) -> float:
    """The bracket's upper end for bisection (see the module's docstring)."""
    if math.isfinite(high):
        return high
    served = [s["request_throughput"] for s in steps if s["offered_rate"] == math.inf and s["request_throughput"]]
    best = max(served, default=0.0)
    return best if best > low else 2 * low


def next_probe(steps: Sequence[dict[str, Any]], precision: float) -> float | None:
    """The next rate to run, or None when the bracket is narrow enough or there is none to narrow."""
    low, high = highest_rate_meeting([(s["offered_rate"], bool(s["slo_met"])) for s in steps])
    if low is None or high is None:
        return None
    top = finite_upper(high, steps, low)
    if top - low <= precision * low:
        return None
    return (low + top) / 2


def search_result(steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """sweep.json's "search": the highest rate meeting the level (null: none did) and its bracket."""
    low, high = highest_rate_meeting([(s["offered_rate"], bool(s["slo_met"])) for s in steps])
    low_text = None if low is None else rate_text(low)
    return {"highest_rate": low_text, "bracket": [low_text, None if high is None else rate_text(high)]}
