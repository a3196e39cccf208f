"""Which estimator of a window's interval holds under autocorrelation? Candidates side by side on the same windows.

The window interval (`toolkit.method.spread.window_interval`) was chosen from this table: each candidate's
coverage of total tok/s and its median half-width (% of the value), on `--windows` windows a level of
`benchmarks/token_truth.py` (8 streams, 10 s), the levels of `benchmarks/calibration.py` (independent, AR(1) at
0.25, 0.5 and 0.7 between three batches, drifting; the generator's ρ read off `calibration.rho_map`). Every
candidate is computed from the same 30 equal parts of each window (coarser batches are means of them), centred
on the window's total tok/s as `summarize_window` gives it; the truth is the mean over the level's windows.
Candidates: batch means of k batches at a t with d degrees of freedom (`bm k@d`); an effective sample size from
the lag-1 autocorrelation of m parts, n (1 - r) / (1 + r) (`ess m`, `+bc`: r corrected by (1 + 4 r) / m for its
bias); three batches at 2 degrees with an AR(1) correction from the 30 parts' lag-1 (`ar1corr`); overlapping
batch means of b parts at 1.5 (30 / b - 1) degrees (`obm b`).

    .venv/bin/python benchmarks/window_estimators.py [--windows 4000] [--seed 1]

Last line: `window_estimators: windows=N chosen=bm 2@0.95 coverage=<per level> width=<per level>`.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.calibration import invert, rho_map
from benchmarks.token_truth import Cell, Noise, window_streams
from toolkit.loadgen.client import StreamResult
from toolkit.method.spread import t_quantile

PARTS = 30
LEVELS = {"independent": None, "ar1@0.25": 0.25, "ar1@0.5": 0.5, "ar1@0.7": 0.7, "drift": None}
CHOSEN = "bm 2@0.95"
Estimator = Callable[[np.ndarray], np.ndarray]


def parts_and_total(results: list[StreamResult], window_s: float) -> tuple[np.ndarray, float]:
    """Total tok/s of each of PARTS equal parts of (0, window_s], and of the window as `summarize_window` gives it."""
    edges = np.linspace(0.0, window_s, PARTS + 1)
    counts, output, last = np.zeros(PARTS), 0, 0.0
    for r in results:
        times = np.array([t for t, _ in r.token_events])
        cumulative = np.concatenate([[0], [c for _, c in r.token_events]])[np.searchsorted(times, edges, "right")]
        counts += np.diff(cumulative)
        output += cumulative[-1] - cumulative[0]
        inside = times[(times > 0) & (times <= window_s)]
        last = max(last, float(inside[-1])) if len(inside) else last
    return counts / (window_s / PARTS), output / last


def coarse(parts: np.ndarray, k: int) -> np.ndarray:
    return parts.reshape(len(parts), k, PARTS // k).mean(axis=-1)


def lag1(x: np.ndarray) -> np.ndarray:
    c = x - x.mean(axis=-1, keepdims=True)
    return np.asarray((c[:, 1:] * c[:, :-1]).sum(-1) / (c * c).sum(-1))


def quantile(dof: np.ndarray | float) -> np.ndarray:
    return np.vectorize(t_quantile)(np.maximum(dof, 0.5))


def batch_means(k: int, dof: float) -> Estimator:
    return lambda p: quantile(dof) * coarse(p, k).std(axis=-1, ddof=1) / np.sqrt(k)


def ess(m: int, corrected: bool) -> Estimator:
    def estimate(p: np.ndarray) -> np.ndarray:
        x = coarse(p, m)
        r = lag1(x)
        r = np.clip(r + (1 + 4 * r) / m if corrected else r, 0.0, 0.95)
        n = np.maximum(m * (1 - r) / (1 + r), 1.0)
        return quantile(np.maximum(n - 1, 1.0)) * x.std(axis=-1, ddof=1) / np.sqrt(n)

    return estimate


def ar1_corrected(p: np.ndarray) -> np.ndarray:
    """Three batches at 2 degrees, their variance scaled by Var(mean) / E[s² / 3] of an AR(1) at the parts' lag-1."""
    phi = np.clip(lag1(p), 0.0, 0.9)
    i = np.arange(PARTS)
    m = phi[:, None, None] ** np.abs(i[:, None] - i[None, :])
    whole, batch = m.sum((1, 2)) / PARTS**2, m[:, :10, :10].sum((1, 2)) / 100
    return quantile(2.0) * np.sqrt(2 * whole / (batch - whole)) * coarse(p, 3).std(axis=-1, ddof=1) / np.sqrt(3)


def overlapping(b: int) -> Estimator:
    def estimate(p: np.ndarray) -> np.ndarray:
        c = np.concatenate([np.zeros((len(p), 1)), np.cumsum(p, axis=-1)], axis=-1)
        means = (c[:, b:] - c[:, :-b]) / b
        s2 = PARTS * b / ((PARTS - b + 1) * (PARTS - b)) * ((means - p.mean(-1, keepdims=True)) ** 2).sum(-1)
        return quantile(1.5 * (PARTS / b - 1)) * np.sqrt(s2 / PARTS)

    return estimate


CANDIDATES: dict[str, Estimator] = {
    "bm 3@1.5 (previous)": batch_means(3, 1.5),
    "bm 3@2": batch_means(3, 2.0),
    "bm 3@1.25": batch_means(3, 1.25),
    "bm 5@4": batch_means(5, 4.0),
    "bm 10@9": batch_means(10, 9.0),
    "ess 10": ess(10, False),
    "ess 10+bc": ess(10, True),
    "ess 30": ess(30, False),
    "ess 30+bc": ess(30, True),
    "ar1corr": ar1_corrected,
    "obm 15": overlapping(15),
    "obm 10": overlapping(10),
    "bm 2@1": batch_means(2, 1.0),
    CHOSEN: batch_means(2, 0.95),
    "bm 2@0.9": batch_means(2, 0.9),
}


def level_windows(name: str, windows: int, maps: list[tuple[float, float]], rng: random.Random
                  ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    target = LEVELS[name]
    noise = Noise(name.partition("@")[0], rho=invert(maps, target) if target is not None else Noise().rho)
    cell = Cell()
    found = [parts_and_total(window_streams(noise, cell, rng), cell.window_s) for _ in range(windows)]
    return np.array([p for p, _ in found]), np.array([t for _, t in found])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--windows", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    maps, rng = rho_map(), random.Random(args.seed)
    data = {name: level_windows(name, args.windows, maps, rng) for name in LEVELS}
    print(f"{'candidate':<22}" + "".join(f"{name:>18}" for name in LEVELS))
    rows = {}
    for label, estimate in CANDIDATES.items():
        cells = []
        for parts, total in data.values():
            half = estimate(parts)
            cells.append((float(np.mean(np.abs(total - total.mean()) <= half)), float(np.median(half / total))))
        rows[label] = cells
        print(f"{label:<22}" + "".join(f"{c:>10.3f}{100 * w:>7.1f}%" for c, w in cells), flush=True)
    coverage = ",".join(f"{c:.3f}" for c, _ in rows[CHOSEN])
    width = ",".join(f"{100 * w:.1f}%" for _, w in rows[CHOSEN])
    print(f"window_estimators: windows={args.windows} seed={args.seed} chosen={CHOSEN} levels={','.join(LEVELS)} "
          f"coverage={coverage} width={width}")  # fmt: skip


if __name__ == "__main__":
    main()
