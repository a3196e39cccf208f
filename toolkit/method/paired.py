"""Interleaved comparison: two servers measured in alternating rounds (A B B A …), analysed as pairs (pure).

Two runs taken a while apart differ by the machine's change between them, which no interval from inside either
run holds. Measured in alternating rounds, each round's A and B are neighbours in time, so the machine's slow
change moves both alike and cancels in their ratio. Per cell and quantity, the rounds give log ratios
log(B_r / A_r); their mean, with Student's t over the rounds (R - 1 degrees of freedom), is the cell's ratio and
its 95 % interval, and its p-value is that of "no difference". The cells' p-values are then adjusted together
(toolkit.method.multiplicity) as compare does.

What is left inside a round is its order: the second run of a round reads the machine a run later than the first.
A side that went first in more rounds than the other carries that change into the mean, so the rounds are even
(`rounds_problem`) and the order-adjusted estimate (`order_adjusted_ratio`, a crossover design's period effect)
takes it out of the interval too. `minimum_detectable` says what difference the rounds' own spread could have
seen at 80 % power (the inverse of toolkit.method.gate_plan.rounds_needed).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from toolkit.method.gate_plan import POWER, rounds_needed
from toolkit.method.spread import LEVEL, Interval, Ratio, t_p_value, t_quantile

DETECT = (0.05, 0.10)  # the differences whose rounds an interleaved report names
ODD_ROUNDS = (
    "an odd count leaves the order unbalanced: one side goes first once more, and a drift from run to run biases "
    "the ratio"
)


def alternating_order(rounds: int) -> list[tuple[int, str]]:
    """(round, side) in the order measured: A B in odd rounds, B A in even ones (A B B A A B …)."""
    if rounds < 1:
        raise ValueError(f"rounds: {rounds} is not a whole number >= 1")
    return [(r, side) for r in range(1, rounds + 1) for side in (("A", "B") if r % 2 else ("B", "A"))]


def a_first(round_: int) -> bool:
    """Whether A was measured first in `round_` (odd rounds, as `alternating_order` and a batch's rounds)."""
    return round_ % 2 == 1


def rounds_problem(rounds: int) -> str | None:
    """Why `rounds` cannot be an interleaved comparison's count (after "allowed: "), or None when it can."""
    if rounds < 2:
        return "an even number of rounds, 2 or more (one round has no spread across rounds)"
    if rounds % 2:
        return f"an even number of rounds, 2 or more ({ODD_ROUNDS})"
    return None


def _usable(x: float, y: float) -> bool:
    return bool(x and y and x > 0 and y > 0)


def _ratio(mean: float, se: float, dof: int) -> Ratio:
    """exp(`mean`) with its 95 % t interval (as its larger side) and the p-value of "no difference"."""
    ratio = math.exp(mean)
    if se == 0:
        return Ratio(Interval(ratio, 0.0, dof, log_scale=True), 0.0 if mean else 1.0)
    half_width = ratio * math.expm1(t_quantile(dof) * se)
    return Ratio(Interval(ratio, half_width, dof, log_scale=True), t_p_value(mean / se, dof))


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> Ratio | None:
    """B / A from paired rounds (`a[i]`, `b[i]` measured next to each other): the geometric mean of the rounds'
    ratios with its 95 % t interval (as its larger side) and p-value; None with fewer than two usable pairs."""
    logs = [math.log(y / x) for x, y in zip(a, b, strict=True) if _usable(x, y)]
    if len(logs) < 2:
        return None
    return _ratio(statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(len(logs)), len(logs) - 1)


def round_log_sd(a: Sequence[float], b: Sequence[float]) -> float | None:
    """The standard deviation of the usable rounds' log ratios log(B / A) (None with fewer than two)."""
    logs = [math.log(y / x) for x, y in zip(a, b, strict=True) if _usable(x, y)]
    return statistics.stdev(logs) if len(logs) >= 2 else None


@dataclass(frozen=True)
class OrderAdjusted:
    """B / A with the rounds' order taken out (a crossover design's analysis).

    `ratio`: the mean of the A-first rounds' mean log ratio and the B-first rounds', its 95 % t interval from
    the residual spread about those two means (rounds - 2 degrees of freedom); `period`: exp of the period
    effect, half the difference of the two means: how a round's second run reads against its first, whichever
    side it was (1: no change inside a round); `orders`: how many usable rounds went A first, and B first."""

    ratio: Ratio
    period: float
    orders: tuple[int, int]


def order_adjusted_ratio(a: Sequence[float], b: Sequence[float], first: Sequence[bool]) -> OrderAdjusted | None:
    """B / A from paired rounds, `first[i]` whether A went first in round i; None unless both orders have a usable
    round and there are three or more (one degree of freedom for the residual spread)."""
    logs = [(math.log(y / x), f) for x, y, f in zip(a, b, first, strict=True) if _usable(x, y)]
    groups = [d for d, f in logs if f], [d for d, f in logs if not f]
    if not all(groups) or len(logs) < 3:
        return None
    means = [statistics.fmean(group) for group in groups]
    dof = len(logs) - 2
    residual = math.fsum((d - m) ** 2 for group, m in zip(groups, means, strict=True) for d in group) / dof
    se = math.sqrt(residual / 4 * (1 / len(groups[0]) + 1 / len(groups[1])))
    ratio = _ratio((means[0] + means[1]) / 2, se, dof)
    return OrderAdjusted(ratio, math.exp((means[0] - means[1]) / 2), (len(groups[0]), len(groups[1])))


@dataclass(frozen=True)
class Detectable:
    """What `rounds` rounds of a log-ratio spread `sd` can see: `effect` the minimum detectable effect in % (a
    true ratio of 1 + effect / 100, or its inverse, is found significant with POWER at `level`, two-sided), and
    per difference of DETECT the rounds that would find it (even, as interleaving runs them; None: more than
    MAX_ROUNDS)."""

    effect: float
    rounds: int
    sd: float
    needed: tuple[tuple[float, int | None], ...]


def _even(rounds: int | None) -> int | None:
    return None if rounds is None else rounds + rounds % 2


def minimum_detectable(sd: float, rounds: int, detect: Sequence[float] = DETECT, level: float = LEVEL) -> Detectable:
    """The smallest difference `rounds` rounds whose log ratios spread by `sd` detect with POWER: the δ with
    `(t(R-1, level) + t(R-1, POWER one-sided)) sd / sqrt(R) = δ`, as 100 (e^δ - 1) %, the side of a speed-up, whose
    log is the smaller: a slow-down as large is found too. The rounds for each of `detect` are
    toolkit.method.gate_plan.rounds_needed's at the log size ln(1 + d), at `level`, rounded up to even."""
    if rounds < 2 or not sd >= 0:
        raise ValueError(f"minimum_detectable: rounds {rounds} (allowed: >= 2), sd {sd} (allowed: >= 0)")
    dof = rounds - 1
    delta = (t_quantile(dof, level) + t_quantile(dof, 2 * POWER - 1)) * sd / math.sqrt(rounds)
    needed = tuple((d, _even(rounds_needed(sd * sd, math.log1p(d), level))) for d in detect)
    return Detectable(100 * math.expm1(delta), rounds, sd, needed)
