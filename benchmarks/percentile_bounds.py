"""Do the percentile bounds of a rate step cover the true percentile 95 % of the time? Simulated against a known truth.

For each distribution (log-normal; Pareto, a tail of index 1.5; a log-normal mixture, 5 % of requests ten times
slower), each step size n and each seed: `--trials` simulated steps of n latencies, each given to the toolkit's
`quantile_bounds` (toolkit/method/quantile_bounds.py) for p50, p90 and p99. Per cell: the share of steps with
both bounds, the share "unbounded" (no upper bound), the coverage (the true percentile within the bounds) where
both are given, the exact coverage the ranks imply (1 - both binomial tails), where unbounded how often the lower
bound alone held, and the coverage of the classical equal-tailed ranks (each miss at most 2.5 %) on the same
steps, which the product's ranks replace (toolkit/method/quantile_bounds.py says why).

    .venv/bin/python benchmarks/percentile_bounds.py [--trials 2000] [--seeds 1,2,3] [--n 20,36,400]

Last line: `percentile bounds: <dist>:<n>:p<q>=<coverage>(in|OUT) ... in_range=<k>/<m> exact_in_range=<k>/<m>
unbounded=<held|BROKEN>`: every coverage where both bounds were given and whether it lies in 0.93-0.97 (and how
many of the exact coverages do); `unbounded` says whether the upper bound was missing exactly below n = 36 (p90)
and 368 (p99). Saves benchmarks/results/percentile-bounds.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from toolkit.method.quantile_bounds import LEVEL, min_bounded_n, order_ranks, quantile_bounds  # noqa: E402

OUT = REPO / "benchmarks" / "results" / "percentile-bounds.json"
QS = (50, 90, 99)
RANGE = (0.93, 0.97)

Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


def _lognormal_quantile(mu: float, sigma: float, p: float) -> float:
    from scipy.special import ndtri

    return math.exp(mu + sigma * float(ndtri(p)))


def _mixture_quantile(p: float) -> float:
    from scipy.optimize import brentq
    from scipy.special import ndtr

    def cdf(x: float) -> float:
        z = math.log(x)
        return 0.95 * float(ndtr((z - math.log(200)) / 0.3)) + 0.05 * float(ndtr((z - math.log(2000)) / 0.5))

    return float(brentq(lambda x: cdf(x) - p, 1e-3, 1e6, xtol=1e-9))


# name: (draw of a (trials, n) matrix in ms, true q-th percentile)
DISTRIBUTIONS: dict[str, tuple[Draw, Callable[[float], float]]] = {
    "lognormal": (
        lambda rng, shape: rng.lognormal(math.log(200), 0.6, shape),
        lambda q: _lognormal_quantile(math.log(200), 0.6, q / 100),
    ),
    "pareto": (  # Lomax of index 1.5 (infinite variance), 100 ms scale, from 50 ms
        lambda rng, shape: 50 + 100 * rng.pareto(1.5, shape),
        lambda q: 50 + 100 * ((1 - q / 100) ** (-1 / 1.5) - 1),
    ),
    "mixture": (
        lambda rng, shape: np.where(
            rng.random(shape) < 0.05,
            rng.lognormal(math.log(2000), 0.5, shape),
            rng.lognormal(math.log(200), 0.3, shape),
        ),
        lambda q: _mixture_quantile(q / 100),
    ),
}


def exact_coverage(n: int, q: float) -> float | None:
    """1 - P(miss below) - P(miss above) of the ranks `order_ranks` picks; None without both ranks."""
    from scipy.special import bdtr, bdtrc

    lower, upper = order_ranks(n, q)
    if lower is None or upper is None:
        return None
    return 1 - float(bdtr(lower - 1, n, q / 100)) - float(bdtrc(upper - 1, n, q / 100))


def equal_tailed_ranks(n: int, q: float) -> tuple[int | None, int | None]:
    """The classical pair the product does not use, for comparison: each miss at most 2.5 %."""
    from scipy.special import bdtr, bdtrc

    k = np.arange(n + 1)
    ups = k[(bdtrc(k, n, q / 100) <= 0.025) & (k < n)]
    lows = k[bdtr(k, n, q / 100) <= 0.025]
    return (int(lows[-1]) + 1 if len(lows) else None), (int(ups[0]) + 1 if len(ups) else None)


def exact_grid(q: float, largest: int) -> dict[str, Any]:
    """Exact coverage (1 - both binomial misses) at every n from the least with an upper bound to `largest`: the
    product's ranks and the equal-tailed ones, their range and the share of n above RANGE's top."""
    from scipy.special import bdtr, bdtrc

    def coverage(ranks: tuple[int | None, int | None], n: int) -> float:
        lower, upper = ranks
        assert lower is not None and upper is not None
        return 1 - float(bdtr(lower - 1, n, q / 100)) - float(bdtrc(upper - 1, n, q / 100))

    sizes = range(min_bounded_n(q), largest + 1)
    ours = [coverage(order_ranks(n, q), n) for n in sizes]
    equal = [coverage(equal_tailed_ranks(n, q), n) for n in sizes]
    figures = lambda xs: {"min": min(xs), "max": max(xs), "above": sum(x > RANGE[1] for x in xs) / len(xs)}  # noqa: E731
    return {"q": q, "sizes": [sizes.start, sizes.stop - 1], "ours": figures(ours), "equal_tailed": figures(equal)}


def cell(name: str, n: int, trials: int, seeds: list[int]) -> list[dict[str, Any]]:
    """Every percentile's figures for one distribution and step size, pooled over the seeds."""
    draw, truth = DISTRIBUTIONS[name]
    fresh = {"bounded": 0, "covered": 0, "unbounded": 0, "low_held": 0, "no_low": 0, "equal": 0}
    counts: dict[int, dict[str, Any]] = {q: {**fresh, "per_seed": []} for q in QS}
    for seed in seeds:
        rng = np.random.default_rng([seed, list(DISTRIBUTIONS).index(name), n])
        steps = draw(rng, (trials, n))
        ordered = np.sort(steps, axis=1)
        for q in QS:
            true = truth(q)
            c = counts[q]
            lower, upper = equal_tailed_ranks(n, q)
            if lower is not None and upper is not None:
                c["equal"] += int(((ordered[:, lower - 1] <= true) & (true <= ordered[:, upper - 1])).sum())
            bounded = covered = 0
            for row in steps:
                b = quantile_bounds(row, q)
                if b.high is None:
                    c["unbounded"] += 1
                    c["low_held"] += b.low is not None and b.low <= true
                    continue
                if b.low is None:
                    c["no_low"] += 1
                    continue
                bounded += 1
                covered += b.low <= true <= b.high
            c["bounded"] += bounded
            c["covered"] += covered
            c["per_seed"].append(covered / bounded if bounded else None)
    total = trials * len(seeds)
    rows = []
    for q in QS:
        c = counts[q]
        rows.append({
            "distribution": name, "n": n, "q": q, "steps": total, "true_ms": truth(q),
            "bounded_share": c["bounded"] / total, "unbounded_share": c["unbounded"] / total,
            "no_low_share": c["no_low"] / total,
            "coverage": c["covered"] / c["bounded"] if c["bounded"] else None,
            "coverage_by_seed": c["per_seed"], "exact_coverage": exact_coverage(n, q),
            "equal_tailed_ranks": equal_tailed_ranks(n, q),
            "equal_tailed_coverage": c["equal"] / total if None not in equal_tailed_ranks(n, q) else None,
            "low_alone_held": c["low_held"] / c["unbounded"] if c["unbounded"] else None,
            "ranks": order_ranks(n, q),
        })  # fmt: skip
    return rows


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=2000, help="simulated steps per seed and cell")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--n", default="20,35,36,40,100,367,368,400,1000,2000", help="step sizes (requests per step)")
    ap.add_argument("--json", type=Path, default=OUT)
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    sizes = [int(s) for s in args.n.split(",")]
    start = time.perf_counter()
    rows = [row for name in DISTRIBUTIONS for n in sizes for row in cell(name, n, args.trials, seeds)]
    print(f"{'distribution':<10} {'n':>5} {'q':>3} {'ranks':>11} {'bounded':>8} {'unbounded':>9} {'coverage':>8} "
          f"{'exact':>6} {'by seed':>13} {'low alone':>9} {'equal-tailed':>12}")  # fmt: skip
    for r in rows:
        lower, upper = r["ranks"]
        seeds_cov = [c for c in r["coverage_by_seed"] if c is not None]
        spread = f"{min(seeds_cov):.3f}-{max(seeds_cov):.3f}" if seeds_cov else "-"
        print(f"{r['distribution']:<10} {r['n']:>5} {r['q']:>3} {f'{lower}..{upper}':>11} "
              f"{r['bounded_share']:>8.3f} {r['unbounded_share']:>9.3f} {_f(r['coverage']):>8} "
              f"{_f(r['exact_coverage']):>6} {spread:>13} {_f(r['low_alone_held']):>9} "
              f"{_f(r['equal_tailed_coverage']):>12}")  # fmt: skip
    given = [r for r in rows if r["coverage"] is not None]
    inside = [r for r in given if RANGE[0] <= r["coverage"] <= RANGE[1]]
    exact_inside = [r for r in given if RANGE[0] <= r["exact_coverage"] <= RANGE[1]]
    equal = [r["equal_tailed_coverage"] for r in rows if r["equal_tailed_coverage"] is not None]
    equal_inside = sum(RANGE[0] <= c <= RANGE[1] for c in equal)
    thresholds = {q: min_bounded_n(q) for q in QS}
    held = all(r["unbounded_share"] == (1.0 if r["n"] < thresholds[r["q"]] else 0.0) for r in rows)
    grid = [exact_grid(q, max(sizes)) for q in QS]
    seconds = time.perf_counter() - start
    summary = {
        "trials": args.trials, "seeds": seeds, "sizes": sizes, "level": LEVEL, "range": RANGE,
        "min_bounded_n": thresholds, "unbounded_rule_held": held, "in_range": len(inside), "given": len(given),
        "exact_in_range": len(exact_inside), "equal_tailed_in_range": [equal_inside, len(equal)],
        "seconds": round(seconds, 1), "exact_every_n": grid, "cells": rows,
    }  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    shown = args.json.relative_to(REPO) if args.json.is_relative_to(REPO) else args.json
    minimum = ", ".join(f"p{q} {n}" for q, n in thresholds.items())
    print(f"min n for an upper bound: {minimum}; {seconds:.0f} s; saved {shown}")
    for g in grid:
        mine, classic = g["ours"], g["equal_tailed"]
        print(f"exact, every n {g['sizes'][0]}-{g['sizes'][1]}, p{g['q']}: ours {mine['min']:.3f}-{mine['max']:.3f} "
              f"({100 * mine['above']:.1f} % of n above {RANGE[1]}), equal-tailed {classic['min']:.3f}-"
              f"{classic['max']:.3f} ({100 * classic['above']:.1f} %)")  # fmt: skip
    print(f"equal-tailed ranks (each miss <= 2.5 %), same steps: coverage {min(equal):.3f}-{max(equal):.3f}, "
          f"in {RANGE[0]}-{RANGE[1]}: {equal_inside}/{len(equal)}; ours {min(r['coverage'] for r in given):.3f}-"
          f"{max(r['coverage'] for r in given):.3f}")  # fmt: skip
    entries = " ".join(
        f"{r['distribution']}:{r['n']}:p{r['q']}={r['coverage']:.3f}({'in' if r in inside else 'OUT'})" for r in given
    )
    print(
        f"percentile bounds: {entries} in_range={len(inside)}/{len(given)} "
        f"exact_in_range={len(exact_inside)}/{len(given)} unbounded={'held' if held else 'BROKEN'}"
    )


if __name__ == "__main__":
    main()
