"""How long a notebook kernel takes to shut down after a notebook that ran fine, beside busy processes, and how often
the idle kernel's exit wait (`SameSessionKernelManager.idle_exit_s`: 30 s, 60 s until 2026-12-05) runs out and the
kernel is interrupted.

Executes a small notebook `--executions` times through the toolkit's own path (toolkit.jupyter.execute.execute_path:
papermill with `SameSessionKernelManager`), `--busy` processes spinning beside it (`while True: pass`, killed at the
end). The kernel manager is a subclass that only times its shutdown: kernel_info answered (idle) or not, shutdown
request to exit, and whether the exit wait ran out. On a stall each thread's stack in the kernel is written
(faulthandler, registered on SIGUSR1 by the notebook's first cell) before the manager interrupts it.
`--cell imports`: the notebooks' import cell (%matplotlib inline, toolkit.jupyter.notebook, plots, views); `tiny`: a
print only. The last line:
`kernel_shutdown: launcher=<launcher> cell=<cell> executions=<n> timeouts=<n> busy_kernel=<n> median_s=<s> max_s=<s>
kernel_cpu_s=<median s>` (shutdown time: from papermill's shutdown call to the kernel's exit; kernel CPU: the whole
kernel's, start to exit, from this process's children's resource usage).

`--launcher`: the kernel the toolkit starts (`toolkit`: toolkit.jupyter.kernel_launcher, which ends without the
interpreter's teardown), ipykernel's own (`ipykernel`: `-m ipykernel_launcher`), or `both`, alternating
(A B B A ...) so the machine's drift falls on both; one last line per launcher.

    nice -n 5 .venv/bin/python benchmarks/kernel_shutdown.py --executions 50
    nice -n 5 .venv/bin/python benchmarks/kernel_shutdown.py --executions 50 --cell tiny --idle-exit-s 15
    nice -n 5 .venv/bin/python benchmarks/kernel_shutdown.py --executions 20 --launcher both
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
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
import toolkit.jupyter.kernels as kernels  # noqa: E402
from toolkit.jupyter.kernels import SameSessionKernelManager  # noqa: E402
from toolkit.method.paired import alternating_order  # noqa: E402

LAUNCHERS = {"A": "toolkit", "B": "ipykernel"}
TOOLKIT_COMMAND = kernels.toolkit_kernel_command

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


def children_cpu_s() -> float:
    """CPU seconds of this process's children that have ended and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def use_launcher(launcher: str) -> None:
    """Make SameSessionProvisioner start the toolkit's kernel launcher or ipykernel's own."""
    kernels.toolkit_kernel_command = TOOLKIT_COMMAND if launcher == "toolkit" else list  # type: ignore[assignment]


def summary(launcher: str, cell: str, records: list[dict[str, Any]]) -> str:
    shutdowns = [r["shutdown_s"] for r in records]
    return (
        f"kernel_shutdown: launcher={launcher} cell={cell} executions={len(records)} "
        f"timeouts={sum(r['timeout'] for r in records)} busy_kernel={sum(r['idle'] is False for r in records)} "
        f"median_s={statistics.median(shutdowns):.2f} max_s={max(shutdowns):.2f} "
        f"kernel_cpu_s={statistics.median(r['kernel_cpu_s'] for r in records):.2f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=50)
    parser.add_argument("--busy", type=int, default=2, help="spinning processes beside the runs")
    parser.add_argument("--cell", choices=sorted(CELLS), default="imports")
    parser.add_argument("--idle-exit-s", type=float, default=SameSessionKernelManager.idle_exit_s.default_value)
    parser.add_argument("--launcher", choices=("toolkit", "ipykernel", "both"), default="toolkit")
    args = parser.parse_args()
    if args.launcher == "both":
        order = [LAUNCHERS[side] for _, side in alternating_order((args.executions + 1) // 2)][: args.executions]
    else:
        order = [args.launcher] * args.executions
    TimedKernelManager.idle_exit_s = args.idle_exit_s  # type: ignore[assignment]
    execute.SameSessionKernelManager = TimedKernelManager  # type: ignore[misc]  # what execute_path passes papermill
    root = Path(tempfile.mkdtemp(prefix="kernel-shutdown-"))
    stacks = root / "stacks.txt"
    write_notebook(root / "in.ipynb", args.cell, stacks)
    os.environ["MPLBACKEND"] = "Agg"
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    started = time.monotonic()
    try:
        for i, launcher in enumerate(order):
            use_launcher(launcher)
            run_started, cpu_before = time.monotonic(), children_cpu_s()
            execute.execute_path(root / "in.ipynb", root / "out.ipynb", {"X": i})
            rec = RECORDS[-1]
            rec |= {"launcher": launcher, "kernel_cpu_s": children_cpu_s() - cpu_before}
            print(
                f"{i + 1} {launcher}: run {time.monotonic() - run_started:.1f} s, shutdown {rec['shutdown_s']:.2f} s, "
                f"kernel CPU {rec['kernel_cpu_s']:.2f} s, "
                f"kernel_info {rec.get('kernel_info_s', 0):.2f} s, idle={rec['idle']}, timeout={rec['timeout']}",
                flush=True,
            )
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    timeouts = sum(r["timeout"] for r in RECORDS)
    if timeouts:
        print(f"stacks of the stalled kernels: {stacks}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    print(f"took {time.monotonic() - started:.0f} s")
    for launcher in dict.fromkeys(order):
        print(summary(launcher, args.cell, [r for r in RECORDS if r["launcher"] == launcher]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
