"""Why no ratio interval from two windows' halves holds 0.93-0.97 both under a drift inside the windows and under a
slow wander: the two contrasts the halves give, in a Gaussian model of them.

Each window (A, B) is two halves, log rates with variance 1 and correlation `rho` between them (a wander the halves
share), plus a trend common to both windows (`delta`: the second half's log rate less the first's). The log ratio's
error is the difference of the windows' means. Each window's halves differ by d = h1 - h2; of the two windows'
differences, (dA - dB) / 2 is blind to a common trend and (dA + dB) / 2 carries twice it. The product's interval
(`ratio_test` of two windows, `RATIO_WINDOW_DOF`) pools both: its variance is their squares' mean. The estimators
here, each at a t quantile of its own degrees of freedom:

- `pooled`: both contrasts alike (the product's);
- `paired`: the trend-blind one alone (`window_contrasts.py`'s paired halves);
- `smaller`: the trend-blind one and the smaller of the two (drops a trend, and some noise with it);
- `weighted`: 0.8 of the trend-blind one's square and 0.2 of the other's.

    .venv/bin/python benchmarks/ratio_components.py [--pairs 300000] [--seed 2] [--json PATH]

A line per estimator and dof: coverage / median half-width (in the halves' sd) at independent halves, 0.2 and 0.35
between them (0.35 is where the product's pooled 1.65 covers what the calibration's 0.5 level does), and a trend
of 0.75 and 1.0 (0.75: where pooled covers what the calibration's drifting level does). Last line:
`ratio-components: best=<estimator@dof> its coverages, widths` for the narrowest estimator holding 0.93-0.97 at
every level, or `none`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.calibration import save_results  # noqa: E402

LEVELS = {"independent": (0.0, 0.0), "rho0.2": (0.2, 0.0), "rho0.35": (0.35, 0.0), "trend0.75": (0.0, 0.75),
          "trend1.0": (0.0, 1.0)}  # fmt: skip
ESTIMATORS = {"pooled": (1.5, 1.65, 1.8), "paired": (0.8, 0.9, 1.0), "smaller": (0.8, 0.85, 0.9, 1.0),
              "weighted": (1.3, 1.4, 1.5, 1.65)}  # fmt: skip
BAND = (0.93, 0.97)


def windows(rng: np.random.Generator, pairs: int, rho: float, delta: float) -> tuple[np.ndarray, ...]:
    """The log ratio's error and the two contrasts' squares, (dA - dB)² / 4 and (dA + dB)² / 4, of `pairs` pairs."""
    chol = np.linalg.cholesky(np.array([[1.0, rho], [rho, 1.0]]))
    trend = np.array([delta / 2, -delta / 2])
    a, b = (rng.standard_normal((pairs, 2)) @ chol.T + trend for _ in range(2))
    da, db = a[:, 0] - a[:, 1], b[:, 0] - b[:, 1]
    return a.mean(axis=1) - b.mean(axis=1), (da - db) ** 2 / 4, (da + db) ** 2 / 4


def variance(estimator: str, blind: np.ndarray, common: np.ndarray) -> np.ndarray:
    """Each estimator's variance of the log ratio from the trend-blind and the common contrast's squares."""
    if estimator == "pooled":
        return (blind + common) / 2
    if estimator == "paired":
        return blind
    if estimator == "smaller":
        return (blind + np.minimum(blind, common)) / 2
    return 0.8 * blind + 0.2 * common


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--pairs", type=int, default=300_000)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    started, rng = time.monotonic(), np.random.default_rng(args.seed)
    data = {name: windows(rng, args.pairs, *level) for name, level in LEVELS.items()}
    results, fitting = {}, []
    for estimator, dofs in ESTIMATORS.items():
        for dof in dofs:
            quantile, row = float(stats.t.ppf(0.975, dof)), {}
            for name, (error, blind, common) in data.items():
                half = quantile * np.sqrt(variance(estimator, blind, common))
                row[name] = (float(np.mean(np.abs(error) <= half)), float(np.median(half)))
            label = f"{estimator}@{dof:g}"
            results[label] = row
            print(f"{label:>16} " + " ".join(f"{n}={c:.3f}/{w:.2f}" for n, (c, w) in row.items()), flush=True)
            if all(BAND[0] <= c <= BAND[1] for c, _ in row.values()):
                fitting.append((row["independent"][1], label))
    best = min(fitting)[1] if fitting else None
    shown = "none" if best is None else f"{best} " + " ".join(f"{c:.3f}/{w:.2f}" for c, w in results[best].values())
    line = f"ratio-components: pairs={args.pairs} seed={args.seed} best={shown}"
    print(line)
    if args.json:
        save_results(args, started, results=results, line=line)


if __name__ == "__main__":
    main()
