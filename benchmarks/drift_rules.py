"""How should compare treat the machine's drift? Rules side by side on one synthetic machine whose truth is known.

Two runs of one configuration, back to back, on a machine whose speed drifts log-linearly: `--model shared` (one
slope through both runs, a N(0, `--machine-drift`) change per run span), `separate` (each run its own slope, run
B starting where run A ended) or `jump` (separate, and B starting N(0, `--machine-drift`) away from where A ended:
a change between the runs that no control sees). Each run reads its control cell (1 stream, 2 s) at its start and
after each of 3 rounds; one 8-stream cell is measured at the same point of each run. The ratio B / A of the
cell's total tok/s should hold 1 (the configuration did not change). Rules: `corrected` (what compare does: the
ratio divided by the machine's change between the two cells along the runs' control lines, its uncertainty
added; toolkit.method.drift.corrected_ratio), `guard` (what compare did before: the plain interval widened by the
larger of the runs' |change| as a bias spread evenly over ±drift), `plain` (the window intervals alone).
Printed: each rule's coverage of 1 and median relative half-width.

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

from benchmarks.calibration import ROUNDS, RUN_SPAN_S, _control, _holds_one, _stamp, measure
from benchmarks.token_truth import Cell, Noise, window_streams
from toolkit.method.drift import cell_drift, control_fit, corrected_ratio, pair_correction, trend
from toolkit.method.spread import Interval, ratio_test, t_quantile

RULES = ("corrected", "guard", "plain")


def _guarded(ratio: Interval, drift: float) -> Interval:
    """The ratio's interval with |drift| added to its standard error as a bias spread evenly over ±drift."""
    se = math.log1p(ratio.relative) / t_quantile(ratio.dof)
    spread = t_quantile(ratio.dof) * math.sqrt(se * se + math.log1p(drift) ** 2 / 3)
    return Interval(ratio.value, ratio.value * math.expm1(spread), ratio.dof)


def one(noise: Noise, cell: Cell, drift_sd: float, model: str, rng: random.Random) -> dict[str, tuple[bool, float]]:
    slopes = [rng.gauss(0.0, drift_sd)] * 2 if model == "shared" else [rng.gauss(0.0, drift_sd) for _ in range(2)]
    jump = rng.gauss(0.0, drift_sd) if model == "jump" else 0.0
    level = lambda run, f: slopes[0] * f if run == 0 else slopes[0] + jump + slopes[1] * f  # noqa: E731
    at = rng.random()
    changes, places, cells = [], [], []
    for run in (0, 1):
        readings = [_control(noise, math.exp(level(run, k / ROUNDS)), (run + k / ROUNDS) * RUN_SPAN_S, rng)
                    for k in range(ROUNDS + 1)]  # fmt: skip
        usable = [r for r in readings if r is not None]
        found = trend(usable)
        changes.append(0.0 if found is None else abs(found[0]))
        places.append(cell_drift(control_fit(usable), _stamp((run + at) * RUN_SPAN_S)))
        speed = Cell(streams=cell.streams, window_s=cell.window_s, speed=math.exp(level(run, at)))
        cells.append(measure(window_streams(noise, speed, rng), cell.window_s)["total_tok_s"])
    first, second = cells
    assert first is not None and second is not None
    plain = ratio_test(first, second).interval
    shown = {
        "corrected": corrected_ratio(first, second, pair_correction(*places)).interval,
        "guard": _guarded(plain, max(changes)),
        "plain": plain,
    }
    return {name: (_holds_one(ratio), ratio.relative) for name, ratio in shown.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", default="lockstep")
    ap.add_argument("--machine-drift", type=float, default=0.05)
    ap.add_argument("--model", choices=["shared", "separate", "jump"], default="shared")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    trials = [one(Noise(args.kind), Cell(), args.machine_drift, args.model, rng) for _ in range(args.trials)]
    parts = []
    for name in RULES:
        held = sum(t[name][0] for t in trials) / len(trials)
        width = statistics.median(t[name][1] for t in trials)
        print(f"{name:<10} coverage {held:.3f}  median half-width {100 * width:5.1f} %")
        parts.append(f"{name}={held:.3f}@{100 * width:.1f}%")
    print(f"drift_rules: kind={args.kind} machine_drift={args.machine_drift:g} model={args.model} "
          f"trials={args.trials} {' '.join(parts)}")  # fmt: skip


if __name__ == "__main__":
    main()
