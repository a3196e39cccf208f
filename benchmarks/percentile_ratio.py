"""Does the interval of a ratio of two percentiles hold the truth 95 % of the time? Coverage on samples whose
percentiles are known: exponential (scales 1 and 0.6) and lognormal (sigma 1 and 0.5), 40, 100 and 300 values a
side, at p90; the bootstrap interval the compare table shows (`toolkit.method.percentile_ratio`) beside the
product of the two samples' own order-statistic bounds at √0.95 (safe by construction, for contrast).

    .venv/bin/python benchmarks/percentile_ratio.py [--trials 1000] [--seed 2] [--q 90]

Last line: `percentile_ratio: trials=N q=Q bootstrap=<coverage per case> bounds=<coverage per case>`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolkit.method.percentile_ratio import percentile_ratio_interval
from toolkit.method.quantile_bounds import quantile_bounds

SIZES = (40, 100, 300)


def draw(kind: str, n: int, rng: np.random.Generator, q: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Two samples and the true ratio of their q-th percentiles."""
    if kind == "exponential":
        return rng.exponential(1.0, n), rng.exponential(0.6, n), 0.6
    from scipy.special import ndtri

    z = float(ndtri(q / 100))
    return rng.lognormal(0, 1, n), rng.lognormal(0, 0.5, n), math.exp(0.5 * z) / math.exp(z)


def product_bounds(a: np.ndarray, b: np.ndarray, q: float) -> tuple[float | None, float | None]:
    each = math.sqrt(0.95)
    x, y = quantile_bounds(a, q, each), quantile_bounds(b, q, each)
    low = y.low / x.high if y.low is not None and x.high else None
    high = y.high / x.low if y.high is not None and x.low else None
    return low, high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--q", type=float, default=90.0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    boot, prod = [], []
    for kind in ("exponential", "lognormal"):
        for n in SIZES:
            hits = [0, 0]
            for _ in range(args.trials):
                a, b, truth = draw(kind, n, rng, args.q)
                found = percentile_ratio_interval(a, b, args.q)
                hits[0] += found is not None and found[0] <= truth <= found[1]
                low, high = product_bounds(a, b, args.q)
                hits[1] += (low is None or low <= truth) and (high is None or truth <= high)
            covered = [h / args.trials for h in hits]
            boot.append(f"{kind[:3]}/{n}:{covered[0]:.3f}")
            prod.append(f"{kind[:3]}/{n}:{covered[1]:.3f}")
            print(f"{kind} n={n}: bootstrap {covered[0]:.3f}, bounds {covered[1]:.3f}", flush=True)
    print(f"percentile_ratio: trials={args.trials} q={args.q:g} bootstrap={','.join(boot)} bounds={','.join(prod)}")


if __name__ == "__main__":
    main()
