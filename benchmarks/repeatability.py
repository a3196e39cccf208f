"""Are a cell's intervals honest? The same small matrix run several times back to back, three kinds of interval.

One embedded vLLM (this session, its own process group) and the same matrix (contexts 512, 1K × 1, 2 streams,
5 s windows, `--repeats` rounds per run, the drift control at the start and after each round) measured `--runs`
times one after the other. Per decode cell and run, three 95 % intervals of total tok/s:

- window: round 1's value ± its within-window half-width (`total_tok_s_ci`, from the window's sub-windows);
- repeats: the median of the run's rounds ± the larger of the t half-width across rounds and the within-window one;
- drift: round 1's value ± its within-window half-width widened by the run's control drift (toolkit.method.drift).

Coverage, for each kind: over every ordered pair of runs (i, j), how often run j's value (of the same kind) lies
inside run i's interval. An honest interval covers about 95 % (docs/method/spread.md, Spread, Repeats;
docs/method/drift.md, Drift).

    .venv/bin/python benchmarks/repeatability.py [--runs 4] [--repeats 2]

Last line: `repeatability: runs=… coverage=… median_halfwidth_pct=… median_between_run_cv_pct=… repeats=…
coverage_repeats=… halfwidth_repeats_pct=… coverage_drift=… halfwidth_drift_pct=… median_drift_pct=…`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MATRIX = {"contexts": ["512", "1K"], "concurrency": [1, 2], "duration_s": 5, "max_output": 512,
          "readiness_timeout_s": 30, "control_window_s": 3}  # fmt: skip
KINDS = ("window", "repeats", "drift")
Cell = tuple[int, int]
Point = tuple[float, float]  # value, half-width


def one_run(folder: Path) -> dict[str, dict[Cell, Point]]:
    """The three (value, half-width) of each undisturbed decode cell of a finished run folder."""
    from toolkit.method.drift import run_drift, widened
    from toolkit.results.rounds import combine, latest_by_round, round_of, usable
    from toolkit.results.store import RUN_FILE, ResultStore, read_json

    drift = run_drift(read_json(folder / RUN_FILE)) or 0.0
    records = [m for m in latest_by_round(ResultStore(folder).load()).values() if m.phase == "decode"]
    out: dict[str, dict[Cell, Point]] = {kind: {} for kind in KINDS}
    for cell in {(m.context_tokens, m.concurrency) for m in records}:
        rounds = sorted((m for m in records if (m.context_tokens, m.concurrency) == cell), key=round_of)
        first = rounds[0]
        if usable(first) and first.total_tok_s and first.total_tok_s_ci is not None:
            value, hw = first.total_tok_s, first.total_tok_s_ci
            out["window"][cell] = (value, hw)
            dof = max(1.0, (first.sub_windows or 3) - 1.5)  # the window's batches less one, less the half degree
            out["drift"][cell] = (value, widened(1.0, hw / value, dof, drift) * value)
        both = combine(rounds)
        if both.repeats and both.repeats >= 2 and both.total_tok_s:
            hw = max(both.total_tok_s_repeat_ci or 0.0, both.total_tok_s_ci or 0.0)
            out["repeats"][cell] = (both.total_tok_s, hw)
    return out


def coverage(runs: list[dict[Cell, Point]]) -> tuple[float, float, int]:
    """Coverage over ordered pairs of runs, the median half-width in % and the number of pairs."""
    covered = pairs = 0
    widths: list[float] = []
    for i, mine in enumerate(runs):
        for cell, (vi, hi) in mine.items():
            widths.append(100 * hi / vi)
            for j, theirs in enumerate(runs):
                if i != j and cell in theirs:
                    covered, pairs = covered + (abs(theirs[cell][0] - vi) <= hi), pairs + 1
    return (covered / pairs if pairs else float("nan")), (statistics.median(widths) if widths else float("nan")), pairs


def main() -> None:
    from toolkit.matrix.runner import run_matrix
    from toolkit.method.drift import run_drift
    from toolkit.params import make_params
    from toolkit.results.store import RUN_FILE, read_json
    from toolkit.servers.embedded.server import EmbeddedServer, ServerConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    runs: list[dict[str, dict[Cell, Point]]] = []
    drifts: list[float] = []
    with EmbeddedServer(ServerConfig(max_model_len=4096)) as server:
        params = make_params({"base_url": server.base_url, **MATRIX, "repeats": args.repeats})
        for run in range(args.runs):
            started = time.monotonic()
            out = Path(tempfile.mkdtemp(prefix="repeatability-"))
            run_matrix(params, out, progress=False)
            runs.append(one_run(out))
            drifts.append(100 * (run_drift(read_json(out / RUN_FILE)) or 0.0))
            print(f"run {run + 1}: {time.monotonic() - started:.0f} s, control drift {drifts[-1]:.1f} %", flush=True)
    print(f"{'cell':>10} {'round-1 tok/s per run':<36} {'between-run CV %':>17}")
    cvs = []
    for cell in sorted({c for r in runs for c in r["window"]}):
        values = [r["window"][cell][0] for r in runs if cell in r["window"]]
        cv = 100 * statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else float("nan")
        cvs.append(cv)
        shown = " ".join(f"{r['window'][cell][0]:.0f}±{r['window'][cell][1]:.0f}" for r in runs if cell in r["window"])
        print(f"{cell[0]:>6} × {cell[1]} {shown:<36} {cv:>17.1f}")
    result = {kind: coverage([r[kind] for r in runs]) for kind in KINDS}
    for kind, (cov, width, pairs) in result.items():
        print(f"{kind:>8}: coverage {cov:.2f} over {pairs} pairs, median half-width {width:.1f} %")
    print(f"repeatability: runs={args.runs} coverage={result['window'][0]:.2f} "
          f"median_halfwidth_pct={result['window'][1]:.1f} median_between_run_cv_pct={statistics.median(cvs):.1f} "
          f"repeats={args.repeats} coverage_repeats={result['repeats'][0]:.2f} "
          f"halfwidth_repeats_pct={result['repeats'][1]:.1f} coverage_drift={result['drift'][0]:.2f} "
          f"halfwidth_drift_pct={result['drift'][1]:.1f} median_drift_pct={statistics.median(drifts):.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
