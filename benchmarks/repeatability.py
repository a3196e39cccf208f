"""Are a cell's within-window intervals honest? The same small matrix run several times back to back.

One embedded vLLM (this session, its own process group) and the same matrix (contexts 512, 1K × 1, 2 streams,
5 s windows) measured `--runs` times one after the other. Per decode cell: the 95 % half-width each run gave
(`total_tok_s_ci`, from the window's sub-windows), the spread of the runs' values (coefficient of variation),
and the coverage: over every ordered pair of runs (i, j), how often run j's value lies inside run i's interval.
An honest interval would cover about 95 % if nothing changed between runs but chance; a machine that drifts
between runs covers less, and the within-window interval cannot know that (docs/METHOD.md, Spread).

    .venv/bin/python benchmarks/repeatability.py [--runs 4]

Last line: `repeatability: runs=… coverage=… median_halfwidth_pct=… median_between_run_cv_pct=…`.
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
          "readiness_timeout_s": 30}  # fmt: skip


def main() -> None:
    from toolkit.matrix.runner import run_matrix
    from toolkit.params import make_params
    from toolkit.servers.embedded.server import EmbeddedServer, ServerConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    cells: dict[tuple[int, int], list[tuple[float, float]]] = {}
    with EmbeddedServer(ServerConfig(max_model_len=4096)) as server:
        params = make_params({"base_url": server.base_url, **MATRIX})
        for run in range(args.runs):
            started = time.monotonic()
            out = Path(tempfile.mkdtemp(prefix="repeatability-"))
            for m in run_matrix(params, out, progress=False):
                if m.phase == "decode" and m.total_tok_s and m.total_tok_s_ci is not None and not m.disturbed:
                    cells.setdefault((m.context_tokens, m.concurrency), []).append((m.total_tok_s, m.total_tok_s_ci))
            print(f"run {run + 1}: {time.monotonic() - started:.0f} s", flush=True)
    covered = pairs = 0
    halfwidths, cvs = [], []
    print(f"{'cell':>10} {'tok/s per run':<40} {'half-width %':>12} {'between-run CV %':>17} {'covered':>8}")
    for (ctx, n), runs in sorted(cells.items()):
        values = [v for v, _ in runs]
        inside = [abs(vj - vi) <= hi for i, (vi, hi) in enumerate(runs) for j, (vj, _) in enumerate(runs) if i != j]
        covered, pairs = covered + sum(inside), pairs + len(inside)
        cell_halfwidths = [100 * h / v for v, h in runs]
        halfwidths += cell_halfwidths
        cv = 100 * statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else float("nan")
        cvs.append(cv)
        shown = " ".join(f"{v:.0f}±{h:.0f}" for v, h in runs)
        print(f"{ctx:>6} × {n} {shown:<40} {statistics.median(cell_halfwidths):>12.1f} {cv:>17.1f} "
              f"{sum(inside)}/{len(inside):<6}")  # fmt: skip
    coverage = covered / pairs if pairs else float("nan")
    print(f"repeatability: runs={args.runs} coverage={coverage:.2f} "
          f"median_halfwidth_pct={statistics.median(halfwidths):.1f} "
          f"median_between_run_cv_pct={statistics.median(cvs):.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
