"""Do compare's intervals hold on the real engine? The same small matrix run several times back to back, every pair
of runs compared as `toolkit compare` compares them, and the window's own ratio interval beside it.

One embedded vLLM (this session, its own process group) and the same matrix (contexts 512, 1K × 1, 2 streams,
5 s windows, `--repeats` rounds per run, the drift control at the start and after each round) measured `--runs`
times one after the other. Nothing differs between the runs, so every ratio's truth is 1. For every pair of runs
(i < j) and every decode cell, total tok/s B / A with its 95 % interval, each by the product's own function:

- window: round 1's windows, `toolkit.method.spread.ratio_test` of their recorded intervals (`total_tok_s_ci` at
  the record's `window_dof`), as compare shows a ratio of one-round runs before any machine correction;
- compare: `toolkit.reports.compare.ratio_table` on the two folders as `load_runs` reads them (the rounds' spread,
  the control-line correction, the drift guard and the family correction of `toolkit compare`); a compare is
  marked when any of its tests (total tok/s, per-request tok/s, TTFT in every cell) is significant.

Coverage is the share of cell pairs whose interval holds 1. (The yardstick before, one run's value inside another
run's interval, falls short of 95 % even for an honest interval: both values carry noise, and a 95 % normal
interval holds another draw 83 % of the time.) The decode cells' halves are also counted for ties in whole tokens
from their traces (`benchmarks/trace_ties.py`): how often a real engine's halves had tied.

    .venv/bin/python benchmarks/repeatability.py [--runs 5] [--repeats 2] [--json PATH]

Last line: `repeatability: runs=… repeats=… pairs=… window_coverage=… window_halfwidth_pct=… compare_coverage=…
compare_halfwidth_pct=… compares_marked=<k>/<n> median_between_run_cv_pct=… median_drift_pct=… cells_tied=…
zero_width_now=… minutes=…`.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.calibration import save_results  # noqa: E402
from benchmarks.trace_ties import folder_cells  # noqa: E402
from toolkit.method.spread import BATCHES, Interval, ratio_test, window_dof  # noqa: E402

MATRIX = {"contexts": ["512", "1K"], "concurrency": [1, 2], "duration_s": 5, "max_output": 512,
          "readiness_timeout_s": 30, "control_window_s": 3}  # fmt: skip
Cell = tuple[int, int]
Covered = tuple[bool, float]  # the interval holds 1, its half-width as a % of the ratio


def holds_one(interval: Interval) -> Covered:
    """Whether a ratio's interval (by its ends, as a report shows it) holds 1, and its half-width in %."""
    low, high = interval.bounds
    return low <= 1 <= high, 100 * interval.relative


def first_windows(folder: Path) -> dict[Cell, Interval]:
    """Round 1's undisturbed decode windows of a run folder: total tok/s with its recorded interval."""
    from toolkit.results.rounds import latest_by_round, round_of, usable
    from toolkit.results.store import ResultStore

    found: dict[Cell, Interval] = {}
    records = latest_by_round(ResultStore(folder).load()).values()
    for m in sorted((m for m in records if m.phase == "decode"), key=round_of):
        cell = (m.context_tokens, m.concurrency)
        if cell not in found and usable(m) and m.total_tok_s and m.total_tok_s_ci is not None:
            dof = window_dof(m.sub_windows or BATCHES, recorded=m.window_dof)
            found[cell] = Interval(m.total_tok_s, m.total_tok_s_ci, dof)
    return found


def window_pair(a: dict[Cell, Interval], b: dict[Cell, Interval]) -> list[Covered]:
    """Each cell both runs measured: B / A from the two windows' intervals (`ratio_test`)."""
    return [holds_one(ratio_test(a[cell], b[cell]).interval) for cell in sorted(a.keys() & b.keys())]


def compare_pair(a: Path, b: Path) -> tuple[list[Covered], bool]:
    """The two folders as `toolkit compare` reads and tests them: each decode cell's total tok/s ratio, and whether
    any test of the table is marked significant."""
    from toolkit.reports.compare import ratio_table
    from toolkit.results.runs import load_runs

    table = ratio_table(load_runs([a, b], ["A", "B"]), "A", "B")
    decode = table[(table["phase"] == "decode") & table["total_tok_s_ratio_hw"].notna()]
    covered = [holds_one(Interval(r, hw, log_scale=True))
               for r, hw in zip(decode["total_tok_s_ratio"], decode["total_tok_s_ratio_hw"], strict=True)]  # fmt: skip
    marked = any(table[c].eq(True).any() for c in table.columns if c.endswith("_significant"))
    return covered, marked


def share(covered: list[Covered]) -> tuple[float, float]:
    """Coverage and median half-width (%) of a list of intervals."""
    if not covered:
        return math.nan, math.nan
    return sum(c for c, _ in covered) / len(covered), statistics.median(w for _, w in covered)


def main() -> None:
    from toolkit.matrix.runner import run_matrix
    from toolkit.method.drift import run_drift
    from toolkit.params import make_params
    from toolkit.results.store import RUN_FILE, read_json
    from toolkit.servers.embedded.server import EmbeddedServer, ServerConfig

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the results here (benchmarks/results/...)")
    args = parser.parse_args()
    started = time.monotonic()
    folders: list[Path] = []
    drifts: list[float] = []
    with EmbeddedServer(ServerConfig(max_model_len=4096)) as server:
        params = make_params({"base_url": server.base_url, **MATRIX, "repeats": args.repeats})
        for run in range(args.runs):
            began = time.monotonic()
            out = Path(tempfile.mkdtemp(prefix="repeatability-"))
            run_matrix(params, out, progress=False)
            folders.append(out)
            drifts.append(100 * (run_drift(read_json(out / RUN_FILE)) or 0.0))
            print(f"run {run + 1}: {time.monotonic() - began:.0f} s, control drift {drifts[-1]:.1f} %, {out}",
                  flush=True)  # fmt: skip
    windows = [first_windows(folder) for folder in folders]
    print(f"{'cell':>10} {'round-1 tok/s per run':<46} {'between-run CV %':>17}")
    cvs = []
    for cell in sorted({c for w in windows for c in w}):
        shown = [w[cell] for w in windows if cell in w]
        values = [i.value for i in shown]
        cv = 100 * statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else math.nan
        cvs.append(cv)
        text = " ".join(f"{i.value:.0f}±{i.half_width:.0f}" for i in shown)
        print(f"{cell[0]:>6} × {cell[1]} {text:<46} {cv:>17.1f}")
    window_cov: list[Covered] = []
    compare_cov: list[Covered] = []
    marked = 0
    pairs = list(itertools.combinations(range(len(folders)), 2))
    for i, j in pairs:
        window_cov += window_pair(windows[i], windows[j])
        covered, any_mark = compare_pair(folders[i], folders[j])
        compare_cov += covered
        marked += any_mark
    ties = [cell for folder in folders for cell in folder_cells(folder)]
    tied, zero = (sum(c[k] for c in ties) / len(ties) if ties else math.nan for k in (0, 1))
    (w_cov, w_hw), (c_cov, c_hw) = share(window_cov), share(compare_cov)
    print(f"  window: coverage {w_cov:.2f} over {len(window_cov)} cell pairs, median half-width {w_hw:.1f} %")
    print(f" compare: coverage {c_cov:.2f} over {len(compare_cov)} cell pairs, median half-width {c_hw:.1f} %, "
          f"{marked} of {len(pairs)} compares marked")  # fmt: skip
    line = (f"repeatability: runs={args.runs} repeats={args.repeats} pairs={len(pairs)} window_coverage={w_cov:.2f} "
            f"window_halfwidth_pct={w_hw:.1f} compare_coverage={c_cov:.2f} compare_halfwidth_pct={c_hw:.1f} "
            f"compares_marked={marked}/{len(pairs)} median_between_run_cv_pct={statistics.median(cvs):.1f} "
            f"median_drift_pct={statistics.median(drifts):.1f} cells_tied={tied:.3f} zero_width_now={zero:.3f} "
            f"minutes={(time.monotonic() - started) / 60:.1f}")  # fmt: skip
    print(line)
    if args.json:
        results = {"line": line, "folders": [str(f) for f in folders], "drift_pct": drifts, "between_run_cv_pct": cvs,
                   "window": window_cov, "compare": compare_cov, "compares_marked": marked}  # fmt: skip
        save_results(args, started, **results)


if __name__ == "__main__":
    main()
