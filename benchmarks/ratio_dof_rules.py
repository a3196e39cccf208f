"""Can a ratio's degrees of freedom that follow its two windows' agreement bring drift's ratios into 0.93–0.97?

Compare's ratio of two decode windows reads its log standard error (`toolkit.method.spread.ratio_test`) at the
constant `RATIO_WINDOW_DOF` = 1.65. At calibration's levels (seeds 1-3, 2,000 trials) that covers 0.939-0.943 at
0.5 correlation between batches and 0.971-0.976 under a drift inside the window: no constant puts both in the band
(`window_dof_sweep.py`). A drift moves both halves of every window apart by the same amount, so the windows'
half-widths agree more often than chance alone would make them; Welch–Satterthwaite's dof grows with that
agreement. This judges rules of the form `scale × Welch–Satterthwaite` (`spread.welch_dof` of the two windows'
relative variances at their recorded `window_dof`, at most the pooled 1.8) and `low + (high - low) × agreement`
(agreement: where Welch–Satterthwaite lies between one window's 0.9 and the pooled 1.8) beside the constant, on
pairs of calibration's windows (`calibration.record`, so each window is judged as a run judges it), each ratio and
its standard error from `ratio_test`, its interval `r × expm1(t(dof) × se)` judged as calibration judges a ratio
(± that half-width around the ratio, truth 1). `lockstep` (the drift level without its drift) is shown beside the
goal levels, to tell the drift's part from the lockstep streams'.

    .venv/bin/python benchmarks/ratio_dof_rules.py [--seeds 1,2,3] [--pairs 3000] [--json PATH]

Per seed, a table of coverage by rule (rows) and level (columns); the last line per seed:
`ratio-dof-rules: seed=S fitting=<rules inside 0.93–0.97 at every goal level, or none> gap=<drift - ar1@0.5 per rule>`.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import calibration  # noqa: E402
from benchmarks.token_truth import Cell, Noise, window_streams  # noqa: E402
from toolkit.base.schema import Measurement  # noqa: E402
from toolkit.method.spread import RATIO_WINDOW_DOF, Interval, ratio_test, t_quantile, welch_dof  # noqa: E402

LEVELS = ("independent", "ar1@0.25", "ar1@0.5", "drift", "lockstep", "ar1@0.7")
GOAL = ("independent", "ar1@0.25", "ar1@0.5", "drift")  # calibration's goal levels
POOLED = 1.8  # two windows' 0.9 each, pooled: the most Welch–Satterthwaite gives
Rule = Callable[[Interval, Interval], float]


def agreement(a: Interval, b: Interval) -> float:
    """Where the two windows' Welch–Satterthwaite dof lies between one window's dof (0) and the pooled (1)."""
    ws = min(POOLED, welch_dof([(a.relative_se**2, a.dof), (b.relative_se**2, b.dof)]))
    return (ws - a.dof) / (POOLED - a.dof)


def scaled_welch(scale: float) -> Rule:
    """`scale` × the two windows' Welch–Satterthwaite dof, at most the pooled."""
    return lambda a, b: scale * (a.dof + agreement(a, b) * (POOLED - a.dof))


def by_agreement(low: float, high: float) -> Rule:
    """`low` for windows one of which dominates, `high` for windows that agree, linear in `agreement` between."""
    return lambda a, b: low + (high - low) * agreement(a, b)


def rules() -> dict[str, Rule]:
    """The product's constant first, then the rules tried."""
    found: dict[str, Rule] = {"constant 1.65": lambda a, b: RATIO_WINDOW_DOF}
    found |= {f"{scale:g} x Welch": scaled_welch(scale) for scale in (1.0, 1.2, 1.3)}
    found |= {f"{low:g} to {high:g}": by_agreement(low, high) for low, high in ((1.4, 2.0), (1.3, 2.3), (1.5, 2.0))}
    return found


def window(m: Measurement) -> Interval:
    """A window's total tok/s as compare reads it (value, half-width, its recorded dof)."""
    assert m.total_tok_s is not None and m.total_tok_s_ci is not None and m.window_dof is not None
    return Interval(m.total_tok_s, m.total_tok_s_ci, m.window_dof)


def held(a: Interval, b: Interval, dof: float) -> bool | None:
    """Whether b / a's interval at `dof`, from `ratio_test`'s standard error, holds 1 (a zero-width interval
    holds only a ratio of exactly 1, as compare shows it; None: no interval)."""
    test = ratio_test(a, b).interval
    if test.value <= 0:
        return None
    se = math.log1p(test.half_width / test.value) / t_quantile(test.dof)
    return calibration._holds(test.value, test.value * math.expm1(t_quantile(dof) * se), 1.0)


def level_coverage(name: str, pairs: int, rng: random.Random, rho_map: list[tuple[float, float]]) -> dict[str, float]:
    """Each rule's coverage on `pairs` pairs of windows at one level."""
    kind, target = calibration.level_target(name)
    rho = calibration.invert(rho_map, target) if target is not None else Noise().rho
    noise, cell = Noise(kind, rho=rho), Cell()
    found = rules()
    hits: dict[str, list[bool]] = {r: [] for r in found}
    for _ in range(pairs):
        a, b = (window(calibration.record(window_streams(noise, cell, rng), cell.window_s)) for _ in range(2))
        for rule, dof_of in found.items():
            if (h := held(a, b, dof_of(a, b))) is not None:
                hits[rule].append(h)
    return {rule: sum(h) / len(h) for rule, h in hits.items()}


def seed_line(seed: int, levels: dict[str, dict[str, float]]) -> str:
    low, high = calibration.BAND
    fits = [r for r in rules() if all(low <= levels[n][r] <= high for n in GOAL if n in levels)]
    gap = ",".join(f"{r.replace(' ', '_')}:{levels['drift'][r] - levels['ar1@0.5'][r]:.3f}" for r in rules())
    return f"ratio-dof-rules: seed={seed} fitting={'/'.join(fits) or 'none'} gap={gap}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--pairs", type=int, default=3000, help="pairs of windows a level (calibration: 1.5 x trials)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rho_map = calibration.rho_map()
    started, results = time.monotonic(), {}
    for seed in (int(s) for s in args.seeds.split(",")):
        rng = random.Random(seed)
        levels = {name: level_coverage(name, args.pairs, rng, rho_map) for name in LEVELS}
        print(f"seed {seed}: ratio coverage by rule (rows) and level (columns), {args.pairs} pairs a level")
        print(pd.DataFrame(levels).round(3).to_string())
        calibration.keep_seed(args, started, results, seed, {"levels": levels, "line": seed_line(seed, levels)})


if __name__ == "__main__":
    main()
