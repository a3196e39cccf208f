"""Do the toolkit's 95 % intervals hold the truth 95 % of the time? Coverage on token streams whose truth is known.

For each noise kind of `benchmarks/token_truth.py` (independent gaps, lockstep steps, an AR(1) speed with
ρ = 0.5 between tenths of the window, a 3 % drift across the window, periodic stalls), many seeded decode windows
(8 streams, 10 s) are judged by the toolkit's own code (`toolkit.method.window`, `toolkit.method.spread`,
`toolkit.method.multiplicity`), and every interval it shows is checked against the truth:

- `total_tok_s`, `per_request_tok_s`, `tbt_ms`: the cell's value ± its half-width (three batches, t with 1.5 dof);
- `ttft_ms`: the median TTFT ± its order-statistic half-width (8 requests);
- `repeat`: the mean of 3 windows (rounds) ± its t half-width across them;
- `ratio`: compare's ratio of two windows of the same kind ± its interval; the truth is 1.
- `drift_ratio`: compare's ratio of one cell in two runs of the same configuration measured back to back on a
  machine whose speed drifts (log-linearly, a N(0, `--machine-drift`) change over each run's span), divided by
  the machine's change between the cell's two measurements as compare divides it: each run's control cell
  (1 stream, 2 s) read at its start and after each of its 3 rounds, the line through them
  (`toolkit.method.drift.control_fit`), the cell placed on both lines (`cell_drift`, `pair_correction`,
  `corrected_ratio`). The cell is measured at the same point of each run (compare's runs measure cells in the
  same order); the truth is 1. `drift_plain` is the same ratio by its window interval alone.

The truth of a quantity is its mean over `--truth-trials` further windows the intervals never saw. Coverage is
the share of trials whose interval holds it (binomial standard error about 0.011 at 400 trials); width is the
median half-width as a percentage of the value. Then the family: `aa_any_marked`, the share of compares of
two 12-cell matrices of the same kind (3 quantities, 36 tests, Benjamini–Hochberg) marking any cell, and
`ab_detected`, the share of compares at 5 s windows where B is truly 10 % faster whose overall total tok/s ratio
leaves out 1, with `ab_cells_marked`, the share of cells marked.

Then the regression gate (`toolkit.method.gate`, as `vllm-speedtest gate` judges an interleaved folder): per kind,
`--gate-trials` gates of total tok/s at a 3 % limit over 4 interleaved rounds of 4 cells (5 s windows) on a machine
whose speed takes a random walk of `--machine-drift` a run: with B's true speed exactly at the limit (0.97×), the
share that says "fail" and the share that says "pass" (each a wrong answer: the truth is on the limit), and with
no true change, the share that says "fail" (a false alarm) and "pass" (its power at 3 %).

    .venv/bin/python benchmarks/calibration.py [--trials 400] [--truth-trials 1000] [--seed 1] [--machine-drift 0.05]
    .venv/bin/python benchmarks/calibration.py --gate-only [--gate-trials 200]

Last lines: `calibration: trials=… kinds=independent,ar1,drift <interval>=<cov>,<cov>,<cov>@<width %> …
min=… max=… aa_any_marked=… ab_detected=… ab_cells_marked=…` over the three kinds the goal names, and
`gate: trials=… kinds=independent,ar1,drift at_limit_fail=…,…,… at_limit_pass=… no_change_fail=… no_change_pass=…`.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.token_truth import KINDS, Cell, Noise, window_streams  # noqa: E402
from toolkit.base.schema import Measurement  # noqa: E402
from toolkit.loadgen.client import StreamResult  # noqa: E402
from toolkit.method.drift import (  # noqa: E402
    cell_drift,
    control_fit,
    control_reading,
    corrected_ratio,
    pair_correction,
)
from toolkit.method.gate import Verdict, family_level, paired_interval, verdict  # noqa: E402
from toolkit.method.multiplicity import adjusted_p_values, marked, overall_ratio  # noqa: E402
from toolkit.method.paired import alternating_order, paired_ratio  # noqa: E402
from toolkit.method.spread import Interval, ratio_test, t_quantile  # noqa: E402
from toolkit.method.window import summarize_window, window_spread  # noqa: E402

QUANTITIES = ("total_tok_s", "per_request_tok_s", "tbt_ms", "ttft_ms")
INTERVALS = (*QUANTITIES, "repeat", "ratio", "drift_ratio")
SHOWN_ONLY = ("drift_plain",)  # printed in the table for contrast, not an interval the toolkit shows
RUN_SPAN_S = 600.0  # a run's span, for the control readings' start times
CONTROL = Cell(streams=1, window_s=2.0)
GOAL_KINDS = ("independent", "ar1", "drift")
ROUNDS = 3
MATRIX_CELLS = 12
COMPARES = 40
GATE_LIMIT, GATE_ROUNDS, GATE_CELLS = 0.03, 4, 4


def measure(results: list[StreamResult], window_s: float) -> dict[str, Interval | None]:
    """Each quantity's shown value with its interval, as the toolkit computes them."""
    summary, spread = summarize_window(results, 0.0, window_s), window_spread(results, 0.0, window_s)
    shown = {"total_tok_s": summary.total_tok_s, "per_request_tok_s": summary.per_request_tok_s,
             "tbt_ms": summary.tbt_ms, "ttft_ms": summary.ttft_ms}  # fmt: skip
    out: dict[str, Interval | None] = {}
    for q in QUANTITIES:
        interval, value = getattr(spread, q), shown[q]
        out[q] = None if interval is None or value is None else Interval(value, interval.half_width, interval.dof)
    return out


def truth(noise: Noise, cell: Cell, trials: int, rng: random.Random) -> dict[str, float]:
    """Each quantity's mean over `trials` windows."""
    sums = dict.fromkeys(QUANTITIES, 0.0)
    for _ in range(trials):
        for q, interval in measure(window_streams(noise, cell, rng), cell.window_s).items():
            sums[q] += interval.value if interval else math.nan
    return {q: s / trials for q, s in sums.items()}


def _holds(interval: Interval | None, true: float) -> bool | None:
    return None if interval is None else abs(interval.value - true) <= interval.half_width


def _holds_one(ratio: Interval) -> bool:
    """Whether a ratio's interval holds 1, on the log scale its half-width is the upper side of."""
    return abs(math.log(ratio.value)) <= math.log1p(ratio.relative)


def _repeat(values: list[float]) -> Interval:
    mean = statistics.fmean(values)
    return Interval(mean, t_quantile(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values)))


def coverage(noise: Noise, cell: Cell, trials: int, true: dict[str, float], rng: random.Random) -> dict[str, tuple]:
    """Per interval kind: (coverage, median relative half-width, trials with an interval)."""
    hits: dict[str, list[bool]] = {k: [] for k in INTERVALS}
    widths: dict[str, list[float]] = {k: [] for k in INTERVALS}
    windows = [measure(window_streams(noise, cell, rng), cell.window_s) for _ in range(trials)]
    for w in windows:
        for q in QUANTITIES:
            if (held := _holds(w[q], true[q])) is not None:
                hits[q].append(held)
                widths[q].append(w[q].relative)  # type: ignore[union-attr]
    totals = [w["total_tok_s"].value for w in windows if w["total_tok_s"]]  # type: ignore[union-attr]
    for i in range(0, len(totals) - ROUNDS + 1, ROUNDS):
        repeat = _repeat(totals[i : i + ROUNDS])
        hits["repeat"].append(abs(repeat.value - true["total_tok_s"]) <= repeat.half_width)
        widths["repeat"].append(repeat.relative)
    pairs = [(a["total_tok_s"], b["total_tok_s"]) for a, b in zip(windows[::2], windows[1::2], strict=False)]
    for a, b in pairs:
        if a and b:
            ratio = ratio_test(a, b).interval
            hits["ratio"].append(_holds_one(ratio))
            widths["ratio"].append(ratio.relative)
    return {k: (sum(hits[k]) / len(hits[k]) if hits[k] else math.nan, statistics.median(widths[k]) if widths[k]
                else math.nan, len(hits[k])) for k in INTERVALS}  # fmt: skip


def _control(noise: Noise, speed: float, at_s: float, rng: random.Random) -> dict | None:
    """One control reading as run.json keeps it: the 1-stream cell's total tok/s, its interval, its start."""
    reading = measure(window_streams(noise, replace(CONTROL, speed=speed), rng), CONTROL.window_s)["total_tok_s"]
    if reading is None:
        return None
    started = datetime.fromtimestamp(at_s, UTC).isoformat()
    return control_reading(Measurement(phase="decode", context_tokens=1024, context="1K", concurrency=1,
                                       status="Valid", total_tok_s=reading.value, total_tok_s_ci=reading.half_width,
                                       sub_windows=3, started_at=started))  # fmt: skip


def _stamp(at_s: float) -> str:
    return datetime.fromtimestamp(at_s, UTC).isoformat()


def drift_compare(noise: Noise, cell: Cell, machine_drift: float, rng: random.Random) -> tuple[bool, bool, float]:
    """One cell compared across two back-to-back runs on a drifting machine: (the corrected interval holds 1,
    the plain one does, the corrected relative half-width)."""
    slope = rng.gauss(0.0, machine_drift)  # the log change of the machine's speed over one run's span
    at = rng.random()  # where in each run the cell is measured
    places, cells = [], []
    for run in (0, 1):
        readings = [_control(noise, math.exp(slope * (run + k / ROUNDS)), (run + k / ROUNDS) * RUN_SPAN_S, rng)
                    for k in range(ROUNDS + 1)]  # fmt: skip
        line = control_fit([r for r in readings if r is not None])
        places.append(cell_drift(line, _stamp((run + at) * RUN_SPAN_S)))
        cells.append(measure(window_streams(noise, replace(cell, speed=math.exp(slope * (run + at))), rng),
                             cell.window_s)["total_tok_s"])  # fmt: skip
    first, second = cells
    assert first is not None and second is not None
    plain = ratio_test(first, second).interval
    ratio = corrected_ratio(first, second, pair_correction(*places)).interval
    return _holds_one(ratio), _holds_one(plain), ratio.relative


def drift_coverage(noise: Noise, cell: Cell, trials: int, machine_drift: float, rng: random.Random) -> dict:
    """`drift_ratio` and `drift_plain`: (coverage, median relative half-width, trials)."""
    found = [drift_compare(noise, cell, machine_drift, rng) for _ in range(trials)]
    widths = statistics.median(w for _, _, w in found)
    return {"drift_ratio": (sum(h for h, _, _ in found) / trials, widths, trials),
            "drift_plain": (sum(p for _, p, _ in found) / trials, math.nan, trials)}  # fmt: skip


def compare_family(noise: Noise, a: Cell, b: Cell, rng: random.Random) -> tuple[bool, bool, float]:
    """One compare of two matrices of MATRIX_CELLS cells: (any cell marked, the overall total tok/s ratio leaves
    out 1, share of tests marked)."""
    p_values, totals = [], []
    for _ in range(MATRIX_CELLS):
        first, second = (
            measure(window_streams(noise, a, rng), a.window_s),
            measure(window_streams(noise, b, rng), b.window_s),
        )
        for q in ("total_tok_s", "per_request_tok_s", "ttft_ms"):
            x, y = first[q], second[q]
            if x and y:
                test = ratio_test(x, y)
                p_values.append(test.p_value)
                if q == "total_tok_s":
                    totals.append(test.interval)
    flags = [bool(marked(q)) for q in adjusted_p_values(p_values)]
    overall = overall_ratio(totals)
    detected = overall is not None and abs(overall.value - 1) > overall.half_width
    return any(flags), detected, sum(flags) / len(flags) if flags else math.nan


def machine_compare(
    rng: random.Random, faster: float, rounds: int, drift_sd: float, window_s: float = 5.0
) -> tuple[tuple[bool, bool], tuple[bool, bool]]:
    """Two 12-cell matrices compared on a machine whose speed takes a random walk between runs (`drift_sd` a run):
    (plain: one run each, A then B, by their window intervals; interleaved: `rounds` rounds A B B A …, paired), each
    as (any total tok/s cell marked, the overall total tok/s ratio leaves out 1). B is `faster` times A's speed."""
    noise = Noise("lockstep")
    speed, slots = 1.0, []
    for _ in range(2 * rounds):
        slots.append(speed)
        speed *= math.exp(rng.gauss(0.0, drift_sd))
    order = alternating_order(rounds)
    per_cell_a: list[list[float]] = [[] for _ in range(MATRIX_CELLS)]
    per_cell_b: list[list[float]] = [[] for _ in range(MATRIX_CELLS)]
    windows: dict[tuple[int, str], list[Interval]] = {}
    for slot, (round_, side) in zip(slots, order, strict=True):
        cell = Cell(window_s=window_s, speed=slot * (faster if side == "B" else 1.0))
        measured = [measure(window_streams(noise, cell, rng), window_s)["total_tok_s"] for _ in range(MATRIX_CELLS)]
        windows[(round_, side)] = [m for m in measured if m]
        for i, m in enumerate(measured):
            (per_cell_b if side == "B" else per_cell_a)[i].append(m.value if m else math.nan)

    def judged(tests: list) -> tuple[bool, bool]:
        flags = [bool(marked(q)) for q in adjusted_p_values([t.p_value for t in tests])]
        overall = overall_ratio([t.interval for t in tests])
        return any(flags), overall is not None and abs(overall.value - 1) > overall.half_width

    plain = [ratio_test(a, b) for a, b in zip(windows[(1, "A")], windows[(1, "B")], strict=False)]
    paired = [t for a, b in zip(per_cell_a, per_cell_b, strict=True) if (t := paired_ratio(a, b)) is not None]
    flags = [bool(marked(q)) for q in adjusted_p_values([t.p_value for t in paired])]
    # The overall ratio of interleaved rounds: each round's geometric mean over the cells, paired over rounds.
    rounds_a = [math.exp(statistics.fmean(math.log(c[r]) for c in per_cell_a)) for r in range(rounds)]
    rounds_b = [math.exp(statistics.fmean(math.log(c[r]) for c in per_cell_b)) for r in range(rounds)]
    whole = paired_ratio(rounds_a, rounds_b)
    return judged(plain), (any(flags), whole is not None and abs(whole.interval.value - 1) > whole.interval.half_width)


def gate_trial(noise: Noise, rng: random.Random, truth: float, drift_sd: float, window_s: float = 5.0) -> Verdict:
    """One gate of total tok/s (GATE_LIMIT) over GATE_ROUNDS interleaved rounds of GATE_CELLS cells, B at `truth`
    times A's speed, the machine's speed a random walk of `drift_sd` a run, as `vllm-speedtest gate` judges it."""
    speed, rounds_a, rounds_b = 1.0, list[float](), list[float]()
    for _round, side in alternating_order(GATE_ROUNDS):
        cell = Cell(window_s=window_s, speed=speed * (truth if side == "B" else 1.0))
        totals = [measure(window_streams(noise, cell, rng), window_s)["total_tok_s"] for _ in range(GATE_CELLS)]
        mean = math.exp(statistics.fmean(math.log(t.value) for t in totals if t))
        (rounds_b if side == "B" else rounds_a).append(mean)
        speed *= math.exp(rng.gauss(0.0, drift_sd))
    interval = paired_interval(rounds_a, rounds_b, family_level(1))
    return Verdict.INCONCLUSIVE if interval is None else verdict(interval, GATE_LIMIT, True)


def gate_rates(kinds: list[str], trials: int, drift_sd: float, rng: random.Random) -> dict[str, dict[str, float]]:
    """Per kind: the shares of fail and pass with the truth on the limit, and with no change."""
    out = {}
    for kind in kinds:
        at_limit = [gate_trial(Noise(kind), rng, 1 - GATE_LIMIT, drift_sd) for _ in range(trials)]
        unchanged = [gate_trial(Noise(kind), rng, 1.0, drift_sd) for _ in range(trials)]
        out[kind] = {"at_limit_fail": at_limit.count(Verdict.FAIL) / trials,
                     "at_limit_pass": at_limit.count(Verdict.PASS) / trials,
                     "no_change_fail": unchanged.count(Verdict.FAIL) / trials,
                     "no_change_pass": unchanged.count(Verdict.PASS) / trials}  # fmt: skip
        print(f"gate {kind}: " + ", ".join(f"{k}={v:.3f}" for k, v in out[kind].items()), flush=True)
    return out


def gate_line(rates: dict[str, dict[str, float]], trials: int, drift_sd: float) -> str:
    names = ("at_limit_fail", "at_limit_pass", "no_change_fail", "no_change_pass")
    parts = [f"{n}={','.join(f'{rates[k][n]:.3f}' for k in rates)}" for n in names]
    return (f"gate: trials={trials} limit={100 * GATE_LIMIT:g}% rounds={GATE_ROUNDS} cells={GATE_CELLS} "
            f"machine_drift={100 * drift_sd:g}% kinds={','.join(rates)} {' '.join(parts)}")  # fmt: skip


def _table(rows: dict[str, dict[str, tuple]]) -> str:
    shown = (*INTERVALS, *SHOWN_ONLY)
    head = f"{'kind':<12}" + "".join(f"{k:>22}" for k in shown)
    lines = [head, " " * 12 + "".join(f"{'coverage  width  n':>22}" for _ in shown)]
    for kind, row in rows.items():
        cells = "".join(f"{row[k][0]:>10.3f}{100 * row[k][1]:>6.1f}%{row[k][2]:>5d}" for k in shown)
        lines.append(f"{kind:<12}{cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--truth-trials", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--machine-drift", type=float, default=0.05, help="sd of the machine's change over a run")
    ap.add_argument("--gate-trials", type=int, default=200, help="gates per kind and truth")
    ap.add_argument("--gate-only", action="store_true", help="only the regression gate's error rates")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    gate_kinds = [k for k in GOAL_KINDS if k in args.kinds.split(",")]
    if args.gate_only:
        print(gate_line(gate_rates(gate_kinds, args.gate_trials, args.machine_drift, rng), args.gate_trials,
                        args.machine_drift))  # fmt: skip
        return
    cell = Cell()
    rows: dict[str, dict[str, tuple]] = {}
    for kind in args.kinds.split(","):
        noise = Noise(kind)
        true = truth(noise, cell, args.truth_trials, rng)
        rows[kind] = coverage(noise, cell, args.trials, true, rng)
        rows[kind] |= drift_coverage(noise, cell, args.trials, args.machine_drift, rng)
        print(f"{kind}: truth " + ", ".join(f"{q}={v:.4g}" for q, v in true.items()), flush=True)
    print(_table(rows))
    run: Callable[[Cell, Cell], list[tuple[bool, bool, float]]] = lambda a, b: [  # noqa: E731
        compare_family(Noise("independent"), a, b, rng) for _ in range(COMPARES)
    ]
    short = Cell(window_s=5.0)
    same, faster = run(short, short), run(short, Cell(window_s=5.0, speed=1.1))
    aa_any = sum(any_ for any_, _, _ in same) / len(same)
    ab_detected = sum(d for _, d, _ in faster) / len(faster)
    ab_cells = statistics.fmean(share for _, _, share in faster)
    print(
        f"family ({COMPARES} compares of {MATRIX_CELLS} cells x 3 quantities, 5 s windows, independent): A/A any "
        f"cell marked {aa_any:.3f}; A/B +10 %: overall ratio detected {ab_detected:.3f}, tests marked {ab_cells:.3f}"
    )
    for drift_sd in (0.0, 0.05):
        aa = [machine_compare(rng, 1.0, 5, drift_sd) for _ in range(COMPARES)]
        ab = [machine_compare(rng, 1.1, 5, drift_sd) for _ in range(COMPARES)]
        share = lambda xs, side, i: sum(x[side][i] for x in xs) / len(xs)  # noqa: E731
        print(f"machine drift {100 * drift_sd:g} % a run ({COMPARES} compares, 12 cells, 5 s windows, lockstep): "
              f"A/A any cell marked plain {share(aa, 0, 0):.3f} interleaved(5 rounds) {share(aa, 1, 0):.3f}, "
              f"overall ratio off 1 plain {share(aa, 0, 1):.3f} interleaved {share(aa, 1, 1):.3f}; "
              f"A/B +10 % overall detected plain {share(ab, 0, 1):.3f} interleaved {share(ab, 1, 1):.3f}, "
              f"any cell marked plain {share(ab, 0, 0):.3f} interleaved {share(ab, 1, 0):.3f}")  # fmt: skip
    goal = [k for k in GOAL_KINDS if k in rows]
    values = [rows[k][i][0] for k in goal for i in INTERVALS]
    parts = []
    for i in INTERVALS:
        width = 100 * statistics.median(rows[k][i][1] for k in goal)
        parts.append(f"{i}={','.join(f'{rows[k][i][0]:.3f}' for k in goal)}@{width:.1f}%")
    print(
        f"calibration: trials={args.trials} kinds={','.join(goal)} {' '.join(parts)} min={min(values):.3f} "
        f"max={max(values):.3f} aa_any_marked={aa_any:.3f} ab_detected={ab_detected:.3f} "
        f"ab_cells_marked={ab_cells:.3f}"
    )
    print(gate_line(gate_rates(gate_kinds, args.gate_trials, args.machine_drift, rng), args.gate_trials,
                    args.machine_drift))  # fmt: skip


if __name__ == "__main__":
    main()
