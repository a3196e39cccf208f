"""Which drift should widen a plain compare's ratio? Rules side by side on one synthetic machine whose truth is known.

Two runs of one configuration, back to back, on a machine whose speed drifts log-linearly: `--model shared` (one
slope through both runs, a N(0, `--machine-drift`) change per run span) or `separate` (each run its own slope, run
B starting where run A ended). Each run reads its control cell (1 stream, 2 s) at its start and after each of 3
rounds (`toolkit.method.drift.trend`); one 8-stream cell is measured at the same point of each run. The ratio B / A
of the cell's total tok/s should hold 1 (the configuration did not change). Each rule gives the drift `d` that
compare adds to the ratio's standard error as a bias spread over ±d (`toolkit.method.drift.widened`): the larger
of the runs' |change| (what compare does), the smaller, the mean of the signed changes, the mean of the sizes;
`plain` adds nothing. Printed: each rule's coverage of 1 and median relative half-width.

    .venv/bin/python benchmarks/drift_rules.py [--kind lockstep] [--machine-drift 0.05] [--model shared] [--trials 200]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.calibration import ROUNDS, RUN_SPAN_S, _control, measure
from benchmarks.token_truth import Cell, Noise, window_streams
from toolkit.method.drift import trend, widened
from toolkit.method.spread import ratio_test

RULES = {
    "larger |change| (compare)": lambda a, b: max(abs(a), abs(b)),
    "smaller |change|": lambda a, b: min(abs(a), abs(b)),
    "mean of signed changes": lambda a, b: abs(a + b) / 2,
    "mean of |change|": lambda a, b: (abs(a) + abs(b)) / 2,
    "plain (no drift)": lambda a, b: 0.0,
}


def one(noise: Noise, cell: Cell, drift_sd: float, model: str, rng: random.Random) -> dict[str, tuple[bool, float]]:
    slopes = [rng.gauss(0.0, drift_sd)] * 2 if model == "shared" else [rng.gauss(0.0, drift_sd) for _ in range(2)]
    level = lambda run, f: math.exp(slopes[0] * f) if run == 0 else math.exp(slopes[0] + slopes[1] * f)  # noqa: E731
    at = rng.random()
    changes, cells = [], []
    for run in (0, 1):
        readings = [_control(noise, level(run, k / ROUNDS), (run + k / ROUNDS) * RUN_SPAN_S, rng)
                    for k in range(ROUNDS + 1)]  # fmt: skip
        found = trend([r for r in readings if r is not None])
        changes.append(0.0 if found is None else found[0])
        speed = Cell(streams=cell.streams, window_s=cell.window_s, speed=level(run, at))
        cells.append(measure(window_streams(noise, speed, rng), cell.window_s)["total_tok_s"])
    ratio = ratio_test(cells[0], cells[1]).interval  # type: ignore[arg-type]
    out = {}
    for name, rule in RULES.items():
        half = widened(ratio.value, ratio.half_width, ratio.dof, rule(*changes) or None)
        out[name] = (abs(ratio.value - 1) <= half, half / ratio.value)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", default="lockstep")
    ap.add_argument("--machine-drift", type=float, default=0.05)
    ap.add_argument("--model", choices=["shared", "separate"], default="shared")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    trials = [one(Noise(args.kind), Cell(), args.machine_drift, args.model, rng) for _ in range(args.trials)]
    for name in RULES:
        held = sum(t[name][0] for t in trials) / len(trials)
        width = statistics.median(t[name][1] for t in trials)
        print(f"{name:<28} coverage {held:.3f}  median half-width {100 * width:5.1f} %")
    print(f"drift_rules: kind={args.kind} machine_drift={args.machine_drift:g} model={args.model} trials={args.trials}")


if __name__ == "__main__":
    main()
