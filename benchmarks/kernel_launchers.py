"""Two kernel launcher scripts side by side: how long a kernel takes to answer, to start and shut down, and its CPU.

Each start runs `python SCRIPT -f CONNECTION_FILE` (IPC transport, `JPY_PARENT_PID` this process, as the toolkit
starts a kernel), waits until the kernel answers (`wait_for_ready`), asks it to shut down and waits for its exit;
the CPU is the child's own (start to exit). The two scripts alternate (A B, B A, ...) so that the machine's drift
falls on both. Made to check that `ParentWatch` (toolkit.jupyter.kernel_launcher) costs a kernel nothing beside
the launcher before it:

    git show f5170ea~1:toolkit/jupyter/kernel_launcher.py > /tmp/launcher_before.py
    .venv/bin/python benchmarks/kernel_launchers.py /tmp/launcher_before.py toolkit/jupyter/kernel_launcher.py

Last line per script: `kernel-launchers: script=<path> starts=<n> ready_s=<median> total_s=<median>
cpu_s=<median>`.
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
import uuid
from pathlib import Path


def start_and_stop(script: Path) -> tuple[float, float, float]:
    """One kernel from `script`: seconds until it answers, seconds until it has exited, and its CPU seconds."""
    from jupyter_client import BlockingKernelClient
    from jupyter_client.connect import write_connection_file

    prefix = os.path.join(tempfile.gettempdir(), f"kernel-launchers-{uuid.uuid4().hex[:12]}-ipc")
    connection, _ = write_connection_file(transport="ipc", ip=prefix)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    env = dict(os.environ, JPY_PARENT_PID=str(os.getpid()))
    command = [sys.executable, str(script), "-f", connection]
    kernel = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = BlockingKernelClient()
    client.load_connection_file(connection)
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        ready = time.monotonic() - began
        client.shutdown()
        kernel.wait(60)
    finally:
        client.stop_channels()
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
        Path(connection).unlink(missing_ok=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return ready, time.monotonic() - began, cpu


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--starts", type=int, default=10, help="kernels per script")
    args = ap.parse_args(argv)
    found: dict[Path, list[tuple[float, float, float]]] = {args.a: [], args.b: []}
    for i in range(args.starts):
        for script in (args.a, args.b) if i % 2 == 0 else (args.b, args.a):
            found[script].append(start_and_stop(script))
    for script, runs in found.items():
        ready, total, cpu = (statistics.median(r[k] for r in runs) for k in range(3))
        print(f"kernel-launchers: script={script} starts={len(runs)} ready_s={ready:.2f} total_s={total:.2f} "
              f"cpu_s={cpu:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
