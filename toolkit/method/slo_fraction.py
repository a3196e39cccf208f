"""The interval of a fraction of requests meeting a service level, and the verdict it gives (pure arithmetic).

Clopper–Pearson at the requests' effective count, widened where the step's batches spread more
(toolkit.method.goodput gives these the step's requests; docs/method/spread.md, The SLO fraction).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

from toolkit.method.quantile_bounds import min_bounded_n

SLO_BATCHES = 5  # the fraction meeting the level, also over 5 batches of the step's requests in schedule order


def requests_to_show(target: float) -> int:
    """The fewest requests that can show a fraction reaching `target` at 95 %: all of n meeting the level give a
    Clopper–Pearson low end of 0.025^(1/n), which reaches 0.99 from 368 requests, 0.95 from 72, 0.9 from 36."""
    # the same count as a percentile's upper bound needs: target^n at most 2.5 % (toolkit.method.quantile_bounds)
    return min_bounded_n(100 * target) if 0 < target < 1 else 1


def fraction_interval(k: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """Clopper–Pearson interval of a fraction from `k` of `n` (exact binomial, continued to effective, fractional
    counts through the beta distribution; (0, 1) for no trials)."""
    if n <= 0:
        return 0.0, 1.0
    from scipy.special import betaincinv

    tail = (1 - level) / 2
    low = 0.0 if k <= 0 else float(betaincinv(k, n - k + 1, tail))
    high = 1.0 if k >= n else float(betaincinv(k + 1, n - k, 1 - tail))
    return low, high


def batch_fraction(met: Sequence[bool]) -> tuple[float, float] | None:
    """The fraction's standard error from SLO_BATCHES equal batches of the requests in schedule order, and its t
    degrees of freedom (batches less one, less the half degree of toolkit.method.spread); None for too few."""
    from toolkit.method.spread import DOF_DISCOUNT

    n = len(met)
    if n < 2 * SLO_BATCHES:
        return None
    bounds = [round(i * n / SLO_BATCHES) for i in range(SLO_BATCHES + 1)]
    shares = [sum(met[a:b]) / (b - a) for a, b in pairwise(bounds)]
    mean = math.fsum(shares) / SLO_BATCHES
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in shares) / (SLO_BATCHES - 1))
    return sd / math.sqrt(SLO_BATCHES), SLO_BATCHES - 1 - DOF_DISCOUNT


def fraction_bounds(
    k: int, n: int, spread: Sequence[tuple[float, float]] = (), n_eff: float | None = None
) -> tuple[float, float]:
    """95 % interval of a fraction `k` / `n`: the wider of Clopper–Pearson and, given the batches' (standard
    error, dof) of one or more steps (`batch_fraction`), the t interval from them. Requests close in time are not
    independent (a queue that builds delays many at once): Clopper–Pearson counts the `n_eff` independent requests
    they are worth (n over the design effect, toolkit.method.effective_n; at most n), with k scaled alike. Without
    `n_eff` (records or steps that predate it) it counts n, as if the requests were independent: too narrow when
    they are not and misses cluster, where the batches often see no miss at all (docs/method/spread.md)."""
    effective = n if n_eff is None else min(float(n), n_eff)
    low, high = fraction_interval(k * (effective / n) if n else 0.0, effective)  # k itself at n_eff = n
    if spread and n:
        from toolkit.method.spread import t_quantile, welch_dof

        variance = math.fsum(se * se for se, _ in spread) / len(spread) ** 2
        dof = welch_dof([(se * se / len(spread) ** 2, d) for se, d in spread])
        half = t_quantile(dof) * math.sqrt(variance)
        low, high = min(low, max(0.0, k / n - half)), max(high, min(1.0, k / n + half))
    return low, high


def verdict(low: float, high: float, target: float) -> str:
    """ "meets", "fails" or "undecided": whether the fraction's interval lies at or above the target, below it, or
    across it (more requests, or another step at that rate, would tell)."""
    return "meets" if low >= target else "fails" if high < target else "undecided"
