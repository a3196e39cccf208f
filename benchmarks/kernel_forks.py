"""What forking notebook kernels from a zygote saves a `toolkit run` (toolkit.jupyter.kernel_forks).

Runs the same one-cell `toolkit run` on a fault server (prefill, the decode matrix and the report: three kernels)
with kernels forked (A) and started from scratch (B, `TOOLKIT_KERNEL_FORKS=0`), alternating A B B A so the
machine's drift falls on both, and reports each side's wall time and CPU (the command and every process it started
and reaped: kernels, the zygote and the kernels it reaped), medians over the rounds.

    .venv/bin/python benchmarks/kernel_forks.py --rounds 6

The last line: `kernel_forks: rounds=<n> forked_s=<median> scratch_s=<median> forked_cpu_s=<median>
scratch_cpu_s=<median> cpu_ratio=<forked/scratch>`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.faultserver import FaultServer  # noqa: E402
from tests.tiny_params import tiny_params  # noqa: E402
from toolkit.method.paired import alternating_order  # noqa: E402


def children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def one_run(params: Path, out: Path, forked: bool) -> tuple[float, float]:
    """Wall seconds and CPU seconds of one `toolkit run`."""
    env = {**os.environ, "TOOLKIT_KERNEL_FORKS": "1" if forked else "0"}
    started, cpu = time.monotonic(), children_cpu_s()
    done = subprocess.run([sys.executable, "-m", "toolkit", "run", str(params), "--out", str(out)],
                   env=env, check=False, capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"error: toolkit run failed: {done.stderr.strip().splitlines()[-1:]}")
    return time.monotonic() - started, children_cpu_s() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="runs of each side (default 6)")
    args = parser.parse_args()
    figures: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with FaultServer() as server, tempfile.TemporaryDirectory() as tmp:
        params = Path(tmp) / "params.yaml"
        params.write_text(yaml.safe_dump(tiny_params(base_url=server.base_url)))
        for i, (_, side) in enumerate(alternating_order(args.rounds)):
            forked = side == "A"
            figures[forked].append(one_run(params, Path(tmp) / f"run{i}", forked))
            wall, cpu = figures[forked][-1]
            print(f"{'forked' if forked else 'scratch'}: {wall:.2f} s, {cpu:.2f} CPU-s", flush=True)
    median = {side: [statistics.median(f[k] for f in figures[side]) for k in (0, 1)] for side in figures}
    print(f"kernel_forks: rounds={args.rounds} forked_s={median[True][0]:.2f} scratch_s={median[False][0]:.2f} "
          f"forked_cpu_s={median[True][1]:.2f} scratch_cpu_s={median[False][1]:.2f} "
          f"cpu_ratio={median[True][1] / median[False][1]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
