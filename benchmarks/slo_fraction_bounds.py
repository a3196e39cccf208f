"""Why the SLO fraction's interval over-covers, and what a less conservative one would cost (issue 42).

`benchmarks/calibration.py` finds `slo_fraction` at 0.990-1.000: a step of 500 steady requests at the default
target 0.99 has about 5 misses, and `toolkit.method.slo_fraction.fraction_bounds` takes the wider of
Clopper-Pearson at the requests' effective count and the t interval of its 5 batches. This measures, on the
calibration's own SLO steps (`calibration.slo_steps`, judged by `goodput.meeting_fraction` as a step row is), the
product's interval beside three others: Clopper-Pearson alone, Jeffreys alone and Jeffreys widened by the batches
as the product widens. Besides two-sided coverage it counts how often the lower bound lies above the truth: that
is a false "meets" when the truth is at the target, and a 95 % interval may do it in at most 2.5 % of steps.

    .venv/bin/python benchmarks/slo_fraction_bounds.py [--seed 1] [--steps 1000] [--requests 500]

One line per interval: `slo_fraction_bounds: <interval> <level>=<coverage>(low>truth <share>) ...`.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.calibration as calibration
import toolkit.method.goodput as goodput
from toolkit.method.slo_fraction import fraction_bounds, fraction_interval
from toolkit.method.spread import t_quantile, welch_dof

Bounds = Callable[[int, int, Sequence[tuple[float, float]], float | None], tuple[float, float]]


def jeffreys(k: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """Jeffreys' interval of `k` of `n` (the beta posterior of a half-count prior; 0 or 1 at the ends)."""
    from scipy.special import betaincinv

    if n <= 0:
        return 0.0, 1.0
    tail = (1 - level) / 2
    low = 0.0 if k <= 0 else float(betaincinv(k + 0.5, n - k + 0.5, tail))
    high = 1.0 if k >= n else float(betaincinv(k + 0.5, n - k + 0.5, 1 - tail))
    return low, high


def _effective(k: int, n: int, n_eff: float | None) -> tuple[float, float]:
    effective = n if n_eff is None else min(float(n), n_eff)
    return (k * effective / n if n else 0.0), effective


def _with_batches(
    low: float, high: float, k: int, n: int, spread: Sequence[tuple[float, float]]
) -> tuple[float, float]:
    """Widened by the batches' t interval as `fraction_bounds` widens."""
    if not spread or not n:
        return low, high
    variance = math.fsum(se * se for se, _ in spread) / len(spread) ** 2
    half = t_quantile(welch_dof([(se * se / len(spread) ** 2, d) for se, d in spread])) * math.sqrt(variance)
    return min(low, max(0.0, k / n - half)), max(high, min(1.0, k / n + half))


VARIANTS: dict[str, Bounds] = {
    "product": fraction_bounds,
    "clopper_pearson": lambda k, n, spread, n_eff: fraction_interval(*_effective(k, n, n_eff)),
    "jeffreys": lambda k, n, spread, n_eff: jeffreys(*_effective(k, n, n_eff)),
    "jeffreys_batches": lambda k, n, spread, n_eff: _with_batches(*jeffreys(*_effective(k, n, n_eff)), k, n, spread),
}


def levels(requests: int) -> dict[str, tuple[float, float]]:
    """The calibration's SLO levels: (the requests' AR(1) φ, the drift across the step)."""
    mapping = calibration.phi_map(requests)
    return {
        "independent": (0.0, 0.0),
        "ar1@0.25": (calibration.invert(mapping, 0.25), 0.0),
        "ar1@0.5": (calibration.invert(mapping, 0.5), 0.0),
        "drift": (0.0, calibration.SLO_DRIFT),
    }


def measure(variant: Bounds, seed: int, steps: int, requests: int) -> dict[str, tuple[float, float]]:
    """Per level: coverage and the share of steps whose lower bound lies above the truth."""
    original, goodput.fraction_bounds = goodput.fraction_bounds, variant  # type: ignore[assignment]
    try:
        out = {}
        for name, (phi, drift) in levels(requests).items():
            margins, true = calibration.slo_steps(np.random.default_rng(seed), steps, requests, phi, drift)
            found = [
                goodput.meeting_fraction(calibration.step_latencies(row), calibration.SLO_LEVEL) for row in margins
            ]
            out[name] = (
                sum(f.low <= true <= f.high for f in found) / steps,
                sum(f.low > true for f in found) / steps,
            )
        return out
    finally:
        goodput.fraction_bounds = original


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args(argv)
    for name, variant in VARIANTS.items():
        found = measure(variant, args.seed, args.steps, args.requests)
        shown = " ".join(f"{level}={cov:.3f}(low>truth {above:.3f})" for level, (cov, above) in found.items())
        print(f"slo_fraction_bounds: {name} seed={args.seed} steps={args.steps} {shown}", flush=True)


if __name__ == "__main__":
    main()
