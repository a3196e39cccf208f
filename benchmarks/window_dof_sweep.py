"""Can any choice of degrees of freedom put a two-half window's intervals in 0.93–0.97 at every goal level?

A window's interval is batch means over its two halves read at t with `WINDOW_DOF` degrees of freedom; compare's
ratio of two windows at `RATIO_WINDOW_DOF` (`toolkit.method.spread`). Both were chosen by measured coverage
(`calibration.py`). This sweeps them: one generation of calibration's windows per level (`calibration.window_level`,
so at the product's own dofs the coverage is calibration's `--windows-only` line for the same seed), each interval
then judged again with its t quantile at other dofs:

- a window's quantity (total tok/s, per-request tok/s, TBT): `value ± half_width × t(d) / t(WINDOW_DOF)`;
- a ratio of two windows (`ratio`, `ratio_per_request`, compare's `ratio_table`): its log standard error is the
  recorded upper side `log1p(hw / r) / t(RATIO_WINDOW_DOF)` (`ratio_test`), shown again as
  `r × expm1(t(d) × se)` and judged as `Tally.table` judges it (± that half-width around the ratio, truth 1).

A dof that moves one level into the band moves the others with it; the output shows, kind by kind, which dofs
(if any) keep every goal level (independent, 0.25 and 0.5 between batches, drifting) inside at once.

    .venv/bin/python benchmarks/window_dof_sweep.py [--seeds 1,2,3] [--trials 2000] [--json PATH]

Per seed, a table per kind: a row per dof, a column per level; the last line per seed:
`window-dof-sweep: seed=S kind=<dofs whose coverage is in 0.93–0.97 at every level, or none> …`.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import calibration  # noqa: E402
from toolkit.method.spread import RATIO_WINDOW_DOF, WINDOW_DOF, t_quantile  # noqa: E402

LEVELS = ("independent", "ar1@0.25", "ar1@0.5", "ar1@0.7", "drift")  # calibration's --windows-only levels
GOAL = ("independent", "ar1@0.25", "ar1@0.5", "drift")  # where the band is asked for (0.7 is named, not asked)
WINDOW_KINDS = ("total_tok_s", "per_request_tok_s", "tbt_ms")
RATIO_KINDS = ("ratio", "ratio_per_request")
WINDOW_DOFS = tuple(dict.fromkeys((WINDOW_DOF, 0.95, 0.92, 0.9, 0.88, 0.85, 0.8)))  # the product's first
RATIO_DOFS = (RATIO_WINDOW_DOF, 1.7, 1.75, 1.8, 1.85, 1.9, 2.0)


class KeptTally(calibration.Tally):
    """calibration's tally that also keeps each window interval (value, half-width, truth) and each ratio's
    (ratio, half-width), to judge them again at other dofs."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: dict[str, list[tuple[float, float, float]]] = {k: [] for k in (*WINDOW_KINDS, *RATIO_KINDS)}

    def add(self, kind: str, value: Any, half_width: Any, true: float) -> None:
        super().add(kind, value, half_width, true)
        if kind in WINDOW_KINDS and value is not None and half_width is not None:
            self.kept[kind].append((float(value), float(half_width), true))

    def table(self, kind: str, frame: pd.DataFrame, q: str) -> None:
        super().table(kind, frame, q)
        if kind in RATIO_KINDS:
            self.kept[kind] += [(float(r), float(hw), 1.0) for r, hw in zip(frame[f"{q}_ratio"], frame[f"{q}_ratio_hw"],
                                                                              strict=True)]  # fmt: skip


def coverage(rows: list[tuple[float, float, float]], half: Callable[[float, float], float]) -> float:
    """The share of rows whose interval `value ± half(value, half_width)` holds their truth, judged as calibration
    judges it (`calibration._holds`: rows without a finite interval left out)."""
    held = [h for v, hw, t in rows if (h := calibration._holds(v, half(v, hw), t)) is not None]
    return sum(held) / len(held)


def swept(tally: KeptTally) -> dict[str, dict[float, float]]:
    """Per kind, coverage at each of its dofs."""
    at_window = t_quantile(WINDOW_DOF)
    out = {k: {d: coverage(tally.kept[k], lambda v, hw, d=d: hw * t_quantile(d) / at_window) for d in WINDOW_DOFS}
           for k in WINDOW_KINDS}  # fmt: skip
    at_ratio = t_quantile(RATIO_WINDOW_DOF)
    for k in RATIO_KINDS:
        out[k] = {d: coverage(tally.kept[k], lambda r, hw, d=d: r * math.expm1(t_quantile(d) * math.log1p(hw / r)
                                                                                 / at_ratio))
                  for d in RATIO_DOFS}  # fmt: skip
    own = tally.rows()  # re-judged at the product's own dofs must be calibration's own coverage
    for k, d in [*((k, WINDOW_DOF) for k in WINDOW_KINDS), *((k, RATIO_WINDOW_DOF) for k in RATIO_KINDS)]:
        if not math.isclose(out[k][d], own[k][0], abs_tol=1e-12):
            raise AssertionError(f"{k}: re-judged {out[k][d]} at its own dof, calibration {own[k][0]}")
    return out


def fitting(levels: dict[str, dict[str, dict[float, float]]], kind: str) -> list[float]:
    """The dofs at which `kind`'s coverage is inside the band at every GOAL level."""
    low, high = calibration.BAND
    dofs = next(iter(levels.values()))[kind]
    return [d for d in dofs if all(low <= levels[name][kind][d] <= high for name in GOAL if name in levels)]


def seed_line(seed: int, levels: dict[str, dict[str, dict[float, float]]]) -> str:
    parts = [f"{k}={'/'.join(f'{d:g}' for d in fits) if (fits := fitting(levels, k)) else 'none'}"
             for k in (*WINDOW_KINDS, *RATIO_KINDS)]  # fmt: skip
    return f"window-dof-sweep: seed={seed} levels={','.join(GOAL)} " + " ".join(parts)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--truth-trials", type=int, default=1000)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    level_args = argparse.Namespace(truth_trials=args.truth_trials, machine_drift=0.05, windows_only=True)
    maps = {"rho": calibration.rho_map(), "phi": []}
    started, results = time.monotonic(), {}
    for seed in (int(s) for s in args.seeds.split(",")):
        rng, levels = random.Random(seed), {}
        for name in LEVELS:
            tally = KeptTally()
            calibration.window_level(name, args.trials, level_args, maps, rng, tally)
            levels[name] = swept(tally)
        for kind in (*WINDOW_KINDS, *RATIO_KINDS):
            print(f"seed {seed}, {kind}: coverage by dof (rows) and level (columns)")
            print(pd.DataFrame({name: v[kind] for name, v in levels.items()}).rename_axis("dof").round(3).to_string())
        calibration.keep_seed(args, started, results, seed, {"levels": levels, "line": seed_line(seed, levels)})


if __name__ == "__main__":
    main()
