"""Keep a step's Poisson draw as it falls, or rescale it to the rate asked for? Measured across seeds.

For each rate, `--seeds` seeded 10 s steps drawn both ways by the toolkit's `schedule` (`rescale` False: the
draw as it falls; True: its gaps scaled so the schedule's own rate is the one asked for, as `vllm bench serve`
does). Two spreads across seeds: the schedule's own rate (coefficient of variation), and what a sweep shows at
that rate on the simulated server of `slo_search.py` (one queue, 50 ms service): the fraction of requests whose
TTFT is at most 250 ms and the p90 TTFT. The more reproducible curve is the one whose points spread less.

    .venv/bin/python benchmarks/schedule_rescale.py [--seeds 200]

Last line: `schedule_rescale: rates=… rate_cv_pct=<kept>/<rescaled> fraction_sd=<kept>/<rescaled>
p90_cv_pct=<kept>/<rescaled>` (medians over the rates).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.slo_search import step_records  # noqa: E402
from toolkit.loadgen.arrivals import schedule  # noqa: E402

RATES = (1.0, 2.0, 4.0, 8.0, 12.0)
DURATION_S = 10.0


def spreads(rate: float, seeds: int, rescale: bool) -> tuple[float, float, float]:
    """(CV of the schedule's rate, sd of the fraction meeting TTFT <= 250 ms, CV of p90 TTFT) across seeds."""
    rates, fractions, p90s = [], [], []
    for seed in range(seeds):
        due = schedule(rate, duration_s=DURATION_S, seed=(seed, 0), rescale=rescale)
        rates.append((len(due) - 1) / due[-1] if len(due) > 1 and due[-1] > 0 else rate)
        records = step_records(rate, (seed, 1), due_times=due)
        ttft = records["first_token_s"] - records["scheduled_s"]
        fractions.append(float((ttft <= 0.25).mean()))
        p90s.append(float(ttft.quantile(0.9)))
    cv = lambda xs: statistics.stdev(xs) / statistics.fmean(xs)  # noqa: E731
    return cv(rates), statistics.stdev(fractions), cv(p90s)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    args = ap.parse_args(argv)
    kept, rescaled = [], []
    print(
        f"{'rate':>6} {'rate CV % kept/rescaled':>24} {'fraction sd kept/rescaled':>26} {'p90 CV % kept/rescaled':>24}"
    )
    for rate in RATES:
        a, b = spreads(rate, args.seeds, False), spreads(rate, args.seeds, True)
        kept.append(a)
        rescaled.append(b)
        print(f"{rate:>6g} {100 * a[0]:>11.1f}/{100 * b[0]:<12.1f} {a[1]:>12.3f}/{b[1]:<13.3f} "
              f"{100 * a[2]:>11.1f}/{100 * b[2]:<12.1f}")  # fmt: skip
    med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
    print(f"schedule_rescale: rates={','.join(f'{r:g}' for r in RATES)} seeds={args.seeds} "
          f"rate_cv_pct={100 * med(kept, 0):.1f}/{100 * med(rescaled, 0):.1f} "
          f"fraction_sd={med(kept, 1):.3f}/{med(rescaled, 1):.3f} "
          f"p90_cv_pct={100 * med(kept, 2):.1f}/{100 * med(rescaled, 2):.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
