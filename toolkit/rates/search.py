"""The search for the highest rate meeting the service level, decided by intervals, not point fractions (pure).

Each rate is judged by the 95 % interval of the fraction of its requests meeting the level, pooled over every
step run at that rate (the wider of Clopper–Pearson at the steps' summed effective counts and the steps' batch
means, toolkit.method.goodput): it
*meets* when even the interval's low end reaches the target and each of its steps met it on its own, *fails*
when even the high end stays below, and is *undecided* otherwise (60 of 60 requests meeting the level have a
low end of 0.94: too few to show 0.99). The bracket is the highest rate that meets on CONFIRM_STEPS steps below
every rate that fails, and the lowest rate that fails: a rate that met once is run again before it may end the
bracket below, since one step in which no burst happened can meet the level above capacity. The true highest
rate lies inside the bracket unless one of those verdicts is wrong. An undecided rate inside the bracket is run
again, up to `repeats` more steps, each pooled with the earlier ones; one still undecided after them stays
inside the bracket, and the search bisects the widest gap between the bracket's ends and the undecided rates.
It ends when that gap is within `precision` of its lower end, or after `max_probes`. An upper end of `inf`
(only the all-at-once step failed) is replaced for bisection by the request throughput that step achieved, or
twice the lower end. Measured against a simulated server whose true highest rate is known
(`benchmarks/slo_search.py`, 100 seeded searches), the bracket held it in 0.98 of them (0.96 before the steps'
effective counts) and came within 1 % of it in all (0.70 and 0.94 without the confirming step); decided by point
fractions, 0.54.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from toolkit.method.rate_verdicts import (
    CONFIRM_STEPS,
    bracket,
    class_names,
    class_steps,
    first_fail,
    meeting_rates,
    pooled_verdicts,
    rate_verdicts,
)
from toolkit.method.slo_fraction import requests_to_show
from toolkit.rates.params import rate_text


def _unconfirmed(verdicts: dict[float, tuple[str, int]]) -> float | None:
    """The highest rate that meets below every failing one on fewer than CONFIRM_STEPS steps: run it again."""
    meeting = meeting_rates(verdicts, first_fail(verdicts))
    return meeting[-1] if meeting and verdicts[meeting[-1]][1] < CONFIRM_STEPS else None


def finite_upper(high: float, steps: Sequence[dict[str, Any]], low: float) -> float:
    """The bracket's upper end for bisection (see the module's docstring)."""
    if math.isfinite(high):
        return high
    served = [s["request_throughput"] for s in steps if s["offered_rate"] == math.inf and s["request_throughput"]]
    best = max(served, default=0.0)
    return best if best > low else 2 * low


def next_probe(steps: Sequence[dict[str, Any]], precision: float, target: float, repeats: int = 2) -> float | None:
    """The next rate to run, or None when the bracket is narrow enough or there is none to narrow."""
    verdicts = rate_verdicts(steps, target)
    low, high = bracket(verdicts)
    if high is not None and (again := _unconfirmed(verdicts)) is not None:
        return again
    if low is None or high is None:
        return None
    top = finite_upper(high, steps, low)
    inside = sorted(rate for rate, (v, _) in verdicts.items() if v == "undecided" and low < rate < top)
    for rate in inside:
        if verdicts[rate][1] <= repeats:
            return rate  # near the boundary: another step at the same rate, pooled
    a, b = max(pairwise([low, *inside, top]), key=lambda gap: gap[1] - gap[0])
    if b - a <= precision * a:
        return None
    return (a + b) / 2


def search_result(steps: Sequence[dict[str, Any]], target: float) -> dict[str, Any]:
    """sweep.json's "search": the highest rate shown to meet the level (null: none), the bracket that holds the
    true highest rate, the rates left undecided inside it, the requests a rate needs to be shown to meet the
    target (`requests_to_show`) and the rates whose steps, pooled, held fewer (a class sweep's: whose class with
    the fewest did): those could only fail or stay undecided, however well the server did; a class sweep's
    `binding` class (`binding_class`)."""
    verdicts = rate_verdicts(steps, target)
    low, high = bracket(verdicts)
    undecided = sorted(r for r, (v, _) in verdicts.items() if v == "undecided" and (low is None or r > low)
                       and (high is None or r < high))  # fmt: skip
    low_text = None if low is None else rate_text(low)
    needed, counted = requests_to_show(target), _fewest_counted(steps)
    return {
        "highest_rate": low_text,
        "bracket": [low_text, None if high is None else rate_text(high)],
        "undecided": [rate_text(r) for r in undecided],
        "requests_to_show": needed,
        "too_few": [rate_text(r) for r in sorted(counted) if counted[r] < needed],
        **({"binding": binding_class(steps, target)} if class_names(steps) else {}),
    }


def _fewest_counted(steps: Sequence[dict[str, Any]]) -> dict[float, int]:
    """Per offered rate, the steady requests of its steps pooled: a class sweep's, those of its class that held
    fewest (each class must show the target on its own)."""
    groups = [class_steps(steps, name) for name in class_names(steps)] or [list(steps)]
    counts = []
    for group in groups:
        counted: dict[float, int] = {}
        for s in group:
            rate = float(s["offered_rate"])
            counted[rate] = counted.get(rate, 0) + int(s.get("steady_requests") or s["requests"])
        counts.append(counted)
    return {rate: min(c[rate] for c in counts) for rate in counts[0]}


def binding_class(steps: Sequence[dict[str, Any]], target: float) -> dict[str, Any] | None:
    """A class sweep's binding class: of the classes failing at the lowest rate any fails, the one whose pooled
    fraction meeting its level is the lowest (the first in the sweep's order on a tie), with that rate, that
    fraction and `limit`, the limit of its level its requests there kept least often ("ttft", "tpot", "e2e"; None:
    not recorded); None when no rate fails."""
    first = first_fail(rate_verdicts(steps, target))
    if first is None:
        return None
    failing = []
    for name in class_names(steps):
        mine = [s for s in class_steps(steps, name) if float(s["offered_rate"]) == first]
        if pooled_verdicts(mine, target)[first][0] != "fails":
            continue
        counts = [int(s.get("steady_requests") or s["requests"]) for s in mine]
        met = sum(round(float(s["slo_fraction"]) * n) for s, n in zip(mine, counts, strict=True))
        kept: dict[str, float] = {}
        for s, n in zip(mine, counts, strict=True):
            for limit, share in (s.get("limit_fractions") or {}).items():
                kept[limit] = kept.get(limit, 0.0) + (share or 0.0) * n
        fraction = met / sum(counts) if sum(counts) else 0.0
        failing.append((fraction, name, min(kept, key=kept.__getitem__) if kept else None))
    fraction, name, limit = min(failing, key=lambda found: found[0])
    return {"class": name, "rate": rate_text(first), "slo_fraction": fraction, "limit": limit}
