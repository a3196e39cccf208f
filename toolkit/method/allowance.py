"""A between-run allowance measured by repeated A/A runs (pure): how far two runs of one configuration, measured
apart, can differ by the machine's change alone.

k runs of one configuration, each with its overall value of a quantity (the geometric mean over the cells the
runs share), spread by `s`, the sample standard deviation of their logs (k − 1 degrees of freedom). Two new runs
measured apart differ on the log scale by `x₁ − x₂`, of variance 2σ²; `(x₁ − x₂) / (s √2)` follows Student's t
with k − 1 degrees of freedom, so the 95 % prediction bound of their log ratio is

    |log(x₁ / x₂)| ≤ t(k − 1, 97.5 %) · s · √2

and the allowance, as a fraction, `exp(bound) − 1`: the gate widens an apart interval by it
(toolkit.method.gate.widened). Example (tests/unit/test_gate_allowance.py): four runs 100, 104, 98, 102.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from toolkit.method.spread import t_quantile

MIN_RUNS = 3  # two runs give one degree of freedom: t(1, 97.5 %) = 12.7, an allowance of no use
ALLOWANCE_LEVEL = 0.95  # of the prediction bound, two-sided


@dataclass(frozen=True)
class RunsSpread:
    """One quantity over k A/A runs: the sample sd of the runs' log values, k, and the allowance between two runs
    measured apart (a fraction) at `level`."""

    sd: float
    runs: int
    allowance: float
    level: float = ALLOWANCE_LEVEL


def log_bound(sd: float, runs: int, level: float = ALLOWANCE_LEVEL) -> float:
    """The prediction bound of the log ratio of two new independent runs: t(runs − 1, level) · sd · √2."""
    if runs < 2:
        raise ValueError(f"runs: {runs}; allowed: 2 or more")
    return t_quantile(runs - 1, level) * sd * math.sqrt(2)


def runs_spread(values: Sequence[float], level: float = ALLOWANCE_LEVEL) -> RunsSpread:
    """The spread and the allowance of `values`, one positive finite value per run; ValueError with fewer than
    MIN_RUNS or a value that is not positive and finite."""
    if len(values) < MIN_RUNS:
        raise ValueError(f"values: {len(values)} run(s); allowed: {MIN_RUNS} or more")
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"values: {list(values)}; allowed: positive finite numbers")
    sd = statistics.stdev(math.log(v) for v in values)
    return RunsSpread(sd, len(values), math.expm1(log_bound(sd, len(values), level)), level)
