"""Goodput of rate sweeps measured in interleaved rounds (pure): candidate / baseline paired over the rounds.

A batch with `interleave: R` and a `rate_sweep:` block holds a rate sweep in each round's run folder. Per round,
each side's overall goodput is the geometric mean over the offered rates every round of both sides ran (rates equal
within 10⁻⁶), from each rate's pooled log (toolkit.reports.gate_rates.rate_goodputs); the rounds' ratios are
paired, Student's t over the rounds on the log scale at the family's level (toolkit.method.gate.paired_interval), as
the decode quantities' are: the machine's change between the rounds cancels, and no between-run allowance is needed.
A rate where a side's goodput may be 0 in some round is left out and named, as apart: where only the candidate's
may be 0 the quantity cannot pass, where only the baseline's it cannot fail.

The highest rate meeting the SLO is not gated here: a round's bracket is an interval, not a value, and the search
probes the same rates each round, so the rounds' spread of their brackets would show no uncertainty at all.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from toolkit.method.gate import paired_interval
from toolkit.reports.gate_rates import GoodputRatio, same_rate

Goodputs = Mapping[float, tuple[float, float] | None]  # rate -> (log goodput, its se), None: it may be 0


def paired_goodput(rounds: Sequence[tuple[Goodputs, Goodputs]], level: float) -> GoodputRatio:
    """The rounds' (baseline, candidate) goodputs paired over the rounds at `level`; ValueError when no offered rate
    is in every round of both sides."""
    sides = [side for pair in rounds for side in pair]
    common = sorted(r for r in sides[0] if all(same_rate(r, side) in side for side in sides))
    if not common:
        raise ValueError("no offered rate in common")
    used, cand_zero, base_zero = [], [], []
    for rate in common:
        base = [a[same_rate(rate, a)] for a, _ in rounds]
        cand = [b[same_rate(rate, b)] for _, b in rounds]
        if all(x is not None for x in base + cand):
            used.append(rate)
        elif all(x is not None for x in base):
            cand_zero.append(rate)
        elif all(y is not None for y in cand):
            base_zero.append(rate)
    interval = None
    if used:
        means = [[_overall(side, used) for side in pair] for pair in rounds]
        interval = paired_interval([a for a, _ in means], [b for _, b in means], level)
    return GoodputRatio(interval, tuple(used), tuple(cand_zero), tuple(base_zero))


def _overall(side: Goodputs, rates: Sequence[float]) -> float:
    """A side's geometric mean goodput over `rates` in one round."""
    logs = [found[0] for r in rates if (found := side[same_rate(r, side)]) is not None]
    return math.exp(statistics.fmean(logs))
