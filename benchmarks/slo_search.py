"""Does the SLO search's bracket hold the true highest rate? Seeded searches against a server whose truth is known.

The server is simulated in memory: one queue served in order, each request taking a gamma-distributed service
time (mean `SERVICE_S` = 50 ms, CV 0.2) before its first token; every step starts idle and sends `REQUESTS`
Poisson arrivals (`toolkit.loadgen.arrivals.schedule`, as a real step draws them). The level is TTFT ≤ 250 ms
for 95 % of requests. The true highest rate is where a step's expected fraction meeting the level (over its
steady part, as the step judges it) equals the target, found by bisection over `--truth-steps` simulated steps
per rate. Each search runs the toolkit's own judgement and search (`summarize_step`, `next_probe`,
`search_result`) from listed rates 5, 10, 40 req/s, and holds the truth when its bracket [meets, fails]
contains it.

    .venv/bin/python benchmarks/slo_search.py [--searches 100] [--truth-steps 400]

Last line: `slo_search: searches=… truth=<req/s> held=<share> held_within_1pct=… median_width_pct=… median_steps=…
point_held=…`, where held_within_1pct also counts a bracket that misses the truth by at most 1 % of it (the
truth's own estimate moves by about that much between 100 and 400 steps a rate), and point_held is the same
searches decided by point fractions (the previous method).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from toolkit.loadgen.arrivals import schedule  # noqa: E402
from toolkit.method.goodput import ServiceLevel, steady_mask, summarize_step  # noqa: E402
from toolkit.rates.search import next_probe, search_result  # noqa: E402

SERVICE_S = 0.05
SERVICE_CV = 0.2
REQUESTS = 400
LEVEL = ServiceLevel(ttft_ms=250, target=0.95)
LISTED = (5.0, 10.0, 40.0)
PRECISION = 0.05
MAX_PROBES = 10


def step_records(
    rate: float, seed: tuple[int, ...], requests: int = REQUESTS, due_times: list[float] | None = None
) -> pd.DataFrame:
    """One step's per-request records from the simulated server (RECORD_COLUMNS); `due_times` instead of a
    drawn schedule of `requests` Poisson arrivals."""
    due = np.array(schedule(rate, count=requests, seed=seed) if due_times is None else due_times)
    requests = len(due)
    shape = 1 / SERVICE_CV**2
    service = np.random.default_rng([*seed, 7]).gamma(shape, SERVICE_S / shape, requests)
    first, free = np.empty(requests), 0.0
    for i, (arrival, work) in enumerate(zip(due, service, strict=True)):
        free = max(arrival, free) + work  # in order, one at a time (Lindley)
        first[i] = free
    return pd.DataFrame({
        "step": 0, "offered_rate": rate, "request": np.arange(requests), "scheduled_s": due, "sent_s": due,
        "first_token_s": first, "last_token_s": first + 0.01, "chunk_times_s": [[f, f + 0.01] for f in first],
        "input_tokens": 100, "output_tokens": 2, "error": None,
    })  # fmt: skip


def expected_fraction(rate: float, steps: int, seed: int) -> float:
    """Mean fraction meeting LEVEL (TTFT only) over the steady part of `steps` simulated steps at `rate` (the part
    a step's fraction covers: toolkit.method.goodput.steady_mask)."""
    limit = (LEVEL.ttft_ms or math.inf) / 1000
    fractions = []
    for i in range(steps):
        records = step_records(rate, (seed, i, 99))
        steady = records[steady_mask(records)]
        fractions.append(float(((steady["first_token_s"] - steady["scheduled_s"]) <= limit).mean()))
    return statistics.fmean(fractions)


def true_highest_rate(steps: int, seed: int = 12345) -> float:
    """The rate whose expected step fraction equals the target (bisection to 0.1 %)."""
    low, high = 1.0, 20.0
    while high - low > 0.001 * low:
        mid = (low + high) / 2
        low, high = (mid, high) if expected_fraction(mid, steps, seed) >= LEVEL.target else (low, mid)
    return (low + high) / 2


def search(seed: int, by_interval: bool = True) -> tuple[float | None, float | None, int]:
    """One search as the sweep runs it: its bracket and how many steps it took. `by_interval` False: the previous
    judgement, each step by its point fraction (as if every step had all of its requests decided)."""
    rows: list[dict] = []

    def run(rate: float) -> None:
        row = summarize_step(step_records(rate, (seed, len(rows))), LEVEL).row()
        if not by_interval:  # a point judgement: pretend the step had so many requests its interval is a point
            row |= {
                "requests": 10**9,
                "steady_requests": 10**9,
                "slo_fraction": float(row["slo_met"]),
                "slo_fraction_deff": None,
                "slo_fraction_se": None,
            }
        rows.append(row)

    for rate in LISTED:
        run(rate)
    for _ in range(MAX_PROBES):
        rate = next_probe(rows, PRECISION, LEVEL.target)
        if rate is None:
            break
        run(rate)
    result = search_result(rows, LEVEL.target)
    low, high = result["bracket"]
    return low, high, len(rows)


def held(bracket: tuple[float | None, float | None, int], truth: float, slack: float = 0.0) -> bool:
    """Whether the bracket holds the truth (or misses it by at most `slack`, a fraction of it)."""
    low, high, _ = bracket
    return low is not None and low <= truth * (1 + slack) and (high is None or truth * (1 - slack) <= high)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--searches", type=int, default=100)
    ap.add_argument("--truth-steps", type=int, default=400)
    args = ap.parse_args(argv)
    truth = true_highest_rate(args.truth_steps)
    print(f"true highest rate: {truth:.3f} req/s (TTFT <= 250 ms for 95 %, {REQUESTS} requests a step)", flush=True)
    results = [search(seed) for seed in range(args.searches)]
    points = [search(seed, by_interval=False) for seed in range(args.searches)]
    widths = [(h - lo) / truth for lo, h, _ in results if lo is not None and h is not None and math.isfinite(h)]
    share = sum(held(r, truth) for r in results) / len(results)
    near = sum(held(r, truth, 0.01) for r in results) / len(results)
    point_share = sum(held(r, truth) for r in points) / len(points)
    print(f"slo_search: searches={args.searches} truth={truth:.3f} held={share:.3f} held_within_1pct={near:.3f} "
          f"median_width_pct={100 * statistics.median(widths):.1f} "
          f"median_steps={statistics.median(n for _, _, n in results):g} point_held={point_share:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
