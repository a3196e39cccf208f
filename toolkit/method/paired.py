"""Interleaved comparison: two servers measured in alternating rounds (A B B A …), analysed as pairs (pure).

Two runs taken a while apart differ by the machine's change between them, which no interval from inside either
run holds. Measured in alternating rounds, each round's A and B are neighbours in time, so the machine's slow
change moves both alike and cancels in their ratio. Per cell and quantity, the rounds give log ratios
log(B_r / A_r); their mean, with Student's t over the rounds (R - 1 degrees of freedom), is the cell's ratio and
its 95 % interval, and its p-value is that of "no difference". The cells' p-values are then adjusted together
(toolkit.method.multiplicity) as compare does.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from toolkit.method.spread import Interval, Ratio, t_p_value, t_quantile


def alternating_order(rounds: int) -> list[tuple[int, str]]:
    """(round, side) in the order measured: A B in odd rounds, B A in even ones (A B B A A B …)."""
    if rounds < 1:
        raise ValueError(f"rounds: {rounds} is not a whole number >= 1")
    return [(r, side) for r in range(1, rounds + 1) for side in (("A", "B") if r % 2 else ("B", "A"))]


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> Ratio | None:
    """B / A from paired rounds (`a[i]`, `b[i]` measured next to each other): the geometric mean of the rounds'
    ratios with its 95 % t interval (as its larger side) and p-value; None with fewer than two usable pairs."""
    logs = [math.log(y / x) for x, y in zip(a, b, strict=True) if x and y and x > 0 and y > 0]
    if len(logs) < 2:
        return None
    mean, dof = statistics.fmean(logs), len(logs) - 1
    se = statistics.stdev(logs) / math.sqrt(len(logs))
    ratio = math.exp(mean)
    if se == 0:
        return Ratio(Interval(ratio, 0.0, dof), 0.0 if mean else 1.0)
    spread = t_quantile(dof) * se
    half_width = ratio * max(math.expm1(spread), -math.expm1(-spread))
    return Ratio(Interval(ratio, half_width, dof), t_p_value(mean / se, dof))
