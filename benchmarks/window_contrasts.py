"""Would a window cut finer, or two windows paired half by half, tell a trend inside the window from a slow wander?

The product reads a window's spread from its two halves (`toolkit.method.spread.window_interval`) and a ratio of two
windows from both windows' halves pooled (`ratio_test`). Under a linear drift inside every window the ratio covers
just over 0.97: the trend widens each window's halves, yet cancels in the ratio. Two alternatives that do remove it,
each judged against the product's estimator on the same windows (calibration's generator, `token_truth.py`):

- a window's total tok/s from its quarters by the contrast (0.5, -1.5, 1.5, -0.5), which is blind to a constant
  and to a linear trend (`trend_free_se`, 1 dof), beside the quarters' plain batch means (3 dof less 0.5);
- a ratio of two windows from its halves paired across the windows (`paired_halves_se`: each half's log ratio,
  their spread at 1 dof), where a trend common to both windows cancels half by half.

    .venv/bin/python benchmarks/window_contrasts.py [--seed 7] [--trials 1500] [--json PATH]

Per level a line of coverage and median half-width (% of the value) per estimator; each window is judged against
the level's truth (calibration's `truth`), each ratio against 1 as compare's table judges it (± its upper side).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import calibration  # noqa: E402
from benchmarks.token_truth import Cell, Noise, window_streams  # noqa: E402
from toolkit.method.spread import RATIO_WINDOW_DOF, WINDOW_DOF, Interval, ratio_test, t_quantile, window_interval  # noqa: E402
from toolkit.method.window import _sub_window_values, summarize_window  # noqa: E402

LEVELS = ("independent", "ar1@0.25", "ar1@0.5", "drift")
TREND_FREE = (0.5, -1.5, 1.5, -0.5)  # orthogonal to a constant and to a linear trend over 4 equal parts
WINDOW_ESTIMATORS = {"halves": WINDOW_DOF, "trend_free_quarters": 1.0, "quarters": 2.5}
RATIO_ESTIMATORS = {"pooled_halves": RATIO_WINDOW_DOF, "paired_halves": 1.0}


def trend_free_se(quarters: Sequence[float]) -> float:
    """The standard error of the mean of four parts from the trend-free contrast: its square over the sum of its
    squared coefficients (5) estimates one part's variance, the mean's is a quarter of that."""
    contrast = math.fsum(c * q for c, q in zip(TREND_FREE, quarters, strict=True))
    return abs(contrast) / math.sqrt(math.fsum(c * c for c in TREND_FREE)) / 2


def paired_halves_se(base: Sequence[float], other: Sequence[float]) -> float:
    """The log ratio's standard error from the two halves' log ratios: half their difference."""
    first, second = (math.log(b / a) for a, b in zip(base, other, strict=True))
    return abs(first - second) / 2


def _window(noise: Noise, cell: Cell, rng: random.Random) -> tuple[float, list[float], list[float]]:
    results = window_streams(noise, cell, rng)
    total = summarize_window(results, 0.0, cell.window_s).total_tok_s or math.nan
    halves = _sub_window_values(results, 0.0, cell.window_s, 2)[0]
    return total, halves, _sub_window_values(results, 0.0, cell.window_s, 4)[0]


def _half_width(halves: Sequence[float]) -> float:
    """The product's window half-width from its halves (`window_interval`); 0 where it gives none."""
    found = window_interval(halves)
    return 0.0 if found is None else found.half_width


def level_coverage(noise: Noise, cell: Cell, trials: int, true: float, rng: random.Random) -> dict[str, list[float]]:
    """Coverage and median half-width (fraction of the value) per estimator over `trials` pairs of windows."""
    hits: dict[str, list[bool]] = {k: [] for k in (*WINDOW_ESTIMATORS, *RATIO_ESTIMATORS)}
    widths: dict[str, list[float]] = {k: [] for k in hits}
    for _ in range(trials):
        pair = [_window(noise, cell, rng) for _ in range(2)]
        shown = [Interval(total, _half_width(halves), WINDOW_DOF) for total, halves, _ in pair]  # as a report shows
        for (total, _, quarters), window in zip(pair, shown, strict=True):
            finer = {"trend_free_quarters": trend_free_se(quarters), "quarters": statistics.stdev(quarters) / 2}
            half_widths = {"halves": window.half_width} | {k: t_quantile(WINDOW_ESTIMATORS[k]) * se
                                                           for k, se in finer.items()}  # fmt: skip
            for k, half_width in half_widths.items():
                hits[k].append(abs(total - true) <= half_width)
                widths[k].append(half_width / total)
        pooled = ratio_test(*shown).interval  # compare's ratio of the two windows
        paired_se = paired_halves_se(pair[0][1], pair[1][1])
        paired = pooled.value * math.expm1(t_quantile(RATIO_ESTIMATORS["paired_halves"]) * paired_se)
        for k, half_width in (("pooled_halves", pooled.half_width), ("paired_halves", paired)):
            hits[k].append(abs(pooled.value - 1) <= half_width)
            widths[k].append(half_width / pooled.value)
    return {k: [statistics.fmean(hits[k]), statistics.median(widths[k])] for k in hits}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--trials", type=int, default=1500)
    ap.add_argument("--truth-trials", type=int, default=300)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    started, rng, rho_map, cell = time.monotonic(), random.Random(args.seed), calibration.rho_map(), Cell()
    levels = {}
    for name in LEVELS:
        kind, target = calibration.level_target(name)
        noise = Noise(kind, rho=calibration.invert(rho_map, target) if target is not None else Noise().rho)
        true = calibration.truth(noise, cell, args.truth_trials, rng)["total_tok_s"]
        levels[name] = level_coverage(noise, cell, args.trials, true, rng)
        print(f"window-contrasts: seed={args.seed} level={name} "
              + " ".join(f"{k}={c:.3f}@{100 * w:.1f}%" for k, (c, w) in levels[name].items()), flush=True)  # fmt: skip
    if args.json:
        calibration.save_results(args, started, levels=levels)


if __name__ == "__main__":
    main()
