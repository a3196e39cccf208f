"""An embeddings cell's halves counted in whole replies or continuously: how often they tie at ± 0, and coverage.

An embeddings cell's items/s interval is batch means over its window's two halves
(`toolkit.method.embedding_cell.window_rates`). Counted by the replies that came in each half, two halves with as
many replies of the same size tie, and the interval is ± 0. Closed-loop requests of a steady size come at a steady
pace, so they tie often. The product counts each half continuously (each completed request's items accrue evenly
from its send to its reply, `_part_rates`). This judges both on the same simulated cells, side by side:

- `whole`: the halves by the replies that came in them (`_rates`, as the product did), `window_interval` of them;
- `continuous`: the product's own `window_rates`.

A cell: `--concurrency` loops, each sending a request of `ITEMS` inputs as soon as the last reply came; a request
takes the server `--latency-ms` times a gamma factor of coefficient of variation `cv` (0.3: a busy server's spread;
0.05: nearly even, as the fault server's); the window is `WINDOW_S` after a ramp of `RAMP_S`. The truth is the mean
items/s over `--truth` other cells.

    .venv/bin/python benchmarks/embedding_ties.py [--seed 1] [--cells 2000] [--json PATH]

Per noise level, a line: `embedding-ties: seed=S cv=C ties=<share of cells whose halves tied> whole=<coverage>@<median
half-width, % of the value> continuous=<coverage>@<width> zero_width=<share of the product's intervals at ± 0>`.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import calibration  # noqa: E402
from benchmarks.window_ties import compared, figures  # noqa: E402
from toolkit.method.embedding_cell import EmbeddingRequest, _rates, window_rates  # noqa: E402
from toolkit.method.spread import BATCHES, Interval, edges, window_interval  # noqa: E402

ITEMS, TOKENS_PER_ITEM = 4, 100  # a request's inputs and their prompt tokens
RAMP_S, WINDOW_S = 1.0, 6.0
CVS = (0.3, 0.05)


def cell_requests(rng: random.Random, concurrency: int, latency_s: float, cv: float) -> list[EmbeddingRequest]:
    """Every request of one cell's loops, from the start of the ramp to past the window's end."""
    shape, end, found = 1 / cv**2, RAMP_S + WINDOW_S + 1.0, []
    for _ in range(concurrency):
        t = rng.uniform(0.0, latency_s)  # the loops do not start in step
        while t < end:
            done = t + latency_s * rng.gammavariate(shape, 1 / shape)
            found.append(EmbeddingRequest(t, done, ITEMS, ITEMS * TOKENS_PER_ITEM))
            t = done
    return found


def whole_interval(requests: list[EmbeddingRequest]) -> Interval | None:
    """The halves' items/s by the replies that came in them, `window_interval` of them."""
    return window_interval([_rates(requests, a, b)[0] for a, b in edges(RAMP_S, RAMP_S + WINDOW_S, BATCHES)])


def level(cv: float, cells: int, truth_cells: int, concurrency: int, latency_s: float,
          rng: random.Random) -> dict[str, float]:  # fmt: skip
    window = (RAMP_S, RAMP_S + WINDOW_S)
    true = sum(window_rates(cell_requests(rng, concurrency, latency_s, cv), *window)["items_s"] or 0.0
               for _ in range(truth_cells)) / truth_cells  # fmt: skip
    whole, continuous, ties = [], [], 0
    for _ in range(cells):
        requests = cell_requests(rng, concurrency, latency_s, cv)
        found = window_rates(requests, *window)
        value = found["items_s"]
        assert value is not None
        old = whole_interval(requests)
        ties += old is not None and old.half_width == 0
        whole.append((value, old))
        hw = found["items_s_ci"]
        continuous.append((value, None if hw is None else Interval(value, hw)))
    return compared(whole, continuous, ties, true)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cells", type=int, default=2000)
    ap.add_argument("--truth", type=int, default=2000, help="cells whose mean items/s is the truth")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rng, started, found = random.Random(args.seed), time.monotonic(), {}
    for cv in CVS:
        r = found[f"{cv:g}"] = level(cv, args.cells, args.truth, args.concurrency, args.latency_ms / 1000, rng)
        print(f"embedding-ties: seed={args.seed} cv={cv:g} {figures(r)}", flush=True)
    if args.json:
        calibration.save_results(args, started, levels=found)


if __name__ == "__main__":
    main()
