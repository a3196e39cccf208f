"""How long a notebook kernel takes to shut down after a notebook that ran fine, beside busy processes, and how often
the idle kernel's exit wait (`SameSessionKernelManager.idle_exit_s`, 60 s) runs out and the kernel is interrupted.

Executes a small notebook `--executions` times through the toolkit's own path (toolkit.jupyter.execute.execute_path:
papermill with `SameSessionKernelManager`), `--busy` processes spinning beside it (`while True: pass`, killed at the
end). The kernel manager is a subclass that only times its shutdown: kernel_info answered (idle) or not, shutdown
request to exit, and whether the exit wait ran out. On a stall each thread's stack in the kernel is written
(faulthandler, registered on SIGUSR1 by the notebook's first cell) before the manager interrupts it.
`--cell imports`: the notebooks' import cell (%matplotlib inline, toolkit.jupyter.notebook, plots, views); `tiny`: a
print only. The last line:
`kernel_shutdown: cell=<cell> executions=<n> timeouts=<n> busy_kernel=<n> median_s=<s> max_s=<s>` (shutdown time:
from papermill's shutdown call to the kernel's exit).

    nice -n 5 .venv/bin/python benchmarks/kernel_shutdown.py --executions 50
    nice -n 5 .venv/bin/python benchmarks/kernel_shutdown.py --executions 50 --cell tiny --idle-exit-s 15
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import toolkit.jupyter.execute as execute  # noqa: E402
from toolkit.jupyter.kernels import SameSessionKernelManager  # noqa: E402

CELLS = {
    "tiny": "print(X * 2)",
    "imports": "%matplotlib inline\nfrom toolkit.jupyter import notebook\nfrom toolkit.reports import plots, views\n"
    "print(X * 2)",
}
RECORDS: list[dict[str, Any]] = []  # one per shutdown, in order
STACKS = "import faulthandler, signal\nfaulthandler.register(signal.SIGUSR1, open({path!r}, 'a'), all_threads=True)"


class TimedKernelManager(SameSessionKernelManager):
    """SameSessionKernelManager, timing its shutdown into RECORDS."""

    async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
        self._record: dict[str, Any] = {"idle": None, "timeout": False, "asked_s": None}
        started = time.monotonic()
        await super()._async_shutdown_kernel(now=now, restart=restart)
        self._record["shutdown_s"] = time.monotonic() - started
        RECORDS.append(self._record)

    shutdown_kernel = _async_shutdown_kernel

    async def _answers_kernel_info(self, timeout_s: float) -> bool:
        started = time.monotonic()
        idle = await super()._answers_kernel_info(timeout_s)
        self._record |= {"idle": idle, "kernel_info_s": time.monotonic() - started}
        return idle

    async def _async_request_shutdown(self, restart: bool = False) -> None:
        self._asked = time.monotonic()
        await super()._async_request_shutdown(restart=restart)

    async def _interrupt_and_finish(self, restart: bool) -> None:
        if self._record["idle"]:  # the idle kernel's exit wait ran out: where it sits, then the interrupt
            self._record["timeout"] = True
            self._record["asked_s"] = time.monotonic() - self._asked
            if self.provisioner is not None and self.provisioner.pid:
                os.kill(self.provisioner.pid, signal.SIGUSR1)
                await asyncio.sleep(0.5)
        await super()._interrupt_and_finish(restart)


def write_notebook(path: Path, cell: str, stacks: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("X = 0", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(STACKS.format(path=str(stacks))),
        nbformat.v4.new_code_cell(CELLS[cell]),
    ]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=50)
    parser.add_argument("--busy", type=int, default=2, help="spinning processes beside the runs")
    parser.add_argument("--cell", choices=sorted(CELLS), default="imports")
    parser.add_argument("--idle-exit-s", type=float, default=SameSessionKernelManager.idle_exit_s.default_value)
    args = parser.parse_args()
    TimedKernelManager.idle_exit_s = args.idle_exit_s  # type: ignore[assignment]
    execute.SameSessionKernelManager = TimedKernelManager  # type: ignore[misc]  # what execute_path passes papermill
    root = Path(tempfile.mkdtemp(prefix="kernel-shutdown-"))
    stacks = root / "stacks.txt"
    write_notebook(root / "in.ipynb", args.cell, stacks)
    os.environ["MPLBACKEND"] = "Agg"
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    started = time.monotonic()
    try:
        for i in range(args.executions):
            run_started = time.monotonic()
            execute.execute_path(root / "in.ipynb", root / "out.ipynb", {"X": i})
            rec = RECORDS[-1]
            print(
                f"{i + 1}: run {time.monotonic() - run_started:.1f} s, shutdown {rec['shutdown_s']:.2f} s, "
                f"kernel_info {rec.get('kernel_info_s', 0):.2f} s, idle={rec['idle']}, timeout={rec['timeout']}",
                flush=True,
            )
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    shutdowns = [r["shutdown_s"] for r in RECORDS]
    timeouts = sum(r["timeout"] for r in RECORDS)
    if timeouts:
        print(f"stacks of the stalled kernels: {stacks}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    print(f"took {time.monotonic() - started:.0f} s")
    print(
        f"kernel_shutdown: cell={args.cell} executions={len(RECORDS)} timeouts={timeouts} "
        f"busy_kernel={sum(r['idle'] is False for r in RECORDS)} median_s={statistics.median(shutdowns):.2f} "
        f"max_s={max(shutdowns):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
