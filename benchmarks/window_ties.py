"""How often do a window's halves receive the same whole number of tokens, and what does counting continuously change?

A decode window's total tok/s interval is batch means over its two halves (`toolkit.method.spread.window_interval`).
Counted in whole tokens (`toolkit.method.window.tokens_between`), two halves that received the same number tie, and
the interval is ± 0: it holds the truth only by chance of exact equality. Lockstep streams get their tokens a step at
a time, all streams together, so their halves differ by whole steps and tie often. The product counts each half's
tokens continuously (`progress_at`: an arrival's tokens accrue evenly over the gap before it), so a tie is no longer
a zero width. This judges both on the same windows of calibration's generator (`benchmarks/token_truth.py`), each
level's truth the mean over other windows (`calibration.truth`), side by side:

- `whole`: the halves in whole tokens, `window_interval` of them (what the product did before);
- `continuous`: the product's own interval (`window_spread`, as `calibration.record` records it).

    .venv/bin/python benchmarks/window_ties.py [--seed 1] [--windows 2000] [--json PATH]

Per level, a line: `window-ties: seed=S level=L ties=<share of windows whose halves tied> whole=<coverage>@<median
half-width, % of the value> continuous=<coverage>@<width> zero_width=<share of the product's intervals at ± 0>`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import calibration  # noqa: E402
from benchmarks.token_truth import Cell, Noise, window_streams  # noqa: E402
from toolkit.loadgen.client import StreamResult  # noqa: E402
from toolkit.method.spread import BATCHES, Interval, edges, window_interval  # noqa: E402
from toolkit.method.window import summarize_window, tokens_between, window_spread  # noqa: E402

LEVELS = ("independent", "ar1@0.25", "ar1@0.5", "drift", "lockstep", "ar1@0.7")


def whole_token_halves(results: list[StreamResult], start: float, end: float) -> list[float]:
    """Each half's total tok/s from the tokens that arrived in it, in whole tokens."""
    return [sum(tokens_between(r, a, b) for r in results) / (b - a) for a, b in edges(start, end, BATCHES)]


def judged(intervals: list[tuple[float, Interval | None]], true: float) -> tuple[float, float]:
    """Coverage (value ± half-width holds `true`) and median half-width as % of the value, of the windows with one."""
    kept = [(v, i.half_width) for v, i in intervals if i is not None]
    held = sum(abs(v - true) <= hw for v, hw in kept) / len(kept)
    return held, 100 * statistics.median(hw / v for v, hw in kept)


def compared(whole: list[tuple[float, Interval | None]], continuous: list[tuple[float, Interval | None]], ties: int,
             true: float) -> dict[str, float]:  # fmt: skip
    """Both estimators judged on the same windows: the share that tied, each one's coverage and median width, and
    the share of the product's intervals at ± 0."""
    (w_cov, w_width), (c_cov, c_width) = judged(whole, true), judged(continuous, true)
    zero = sum(i is not None and i.half_width == 0 for _, i in continuous) / len(continuous)
    return {"ties": ties / len(whole), "whole": w_cov, "whole_width_pct": w_width, "continuous": c_cov,
            "continuous_width_pct": c_width, "zero_width": zero}  # fmt: skip


def figures(r: dict[str, float]) -> str:
    """A result as its line shows it."""
    return (
        f"ties={r['ties']:.3f} whole={r['whole']:.3f}@{r['whole_width_pct']:.1f}% "
        f"continuous={r['continuous']:.3f}@{r['continuous_width_pct']:.1f}% zero_width={r['zero_width']:.3f}"
    )


def level(name: str, windows: int, rng: random.Random, rho_map: list[tuple[float, float]]) -> dict[str, float]:
    kind, target = calibration.level_target(name)
    rho = calibration.invert(rho_map, target) if target is not None else Noise().rho
    noise, cell = Noise(kind, rho=rho), Cell()
    true = calibration.truth(noise, cell, 1000, rng)["total_tok_s"]
    whole, continuous, ties = [], [], 0
    for _ in range(windows):
        results = window_streams(noise, cell, rng)
        value = summarize_window(results, 0.0, cell.window_s).total_tok_s
        assert value is not None
        halves = whole_token_halves(results, 0.0, cell.window_s)
        ties += halves[0] == halves[1]
        whole.append((value, window_interval(halves)))
        continuous.append((value, window_spread(results, 0.0, cell.window_s).total_tok_s))
    return compared(whole, continuous, ties, true)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--windows", type=int, default=2000)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rng, rho_map, started, found = random.Random(args.seed), calibration.rho_map(), time.monotonic(), {}
    for name in LEVELS:
        r = found[name] = level(name, args.windows, rng, rho_map)
        print(f"window-ties: seed={args.seed} level={name} {figures(r)}", flush=True)
    if args.json:
        calibration.save_results(args, started, levels=found)


if __name__ == "__main__":
    main()
