"""How often papermill waits for ever on rate_sweep.ipynb: its slider cell as it is now, or as it was.

Executes the notebook (through `toolkit.jupyter.execute.execute_path`, as `toolkit run` does) on a synthetic
sweep folder, `--workers` at a time, for `--minutes`; an execution past `--watchdog-s` is a hang: py-spy (when
installed) dumps each of its processes, and the run stops there. `--old-cell` puts back the cell that built
the sliders in every kernel (`RejudgePanel(records, level).widget`). The last line:
`widget_cell_hang: cell=<now|old> executions=<n> hangs=<n>`.

    .venv/bin/python benchmarks/widget_cell_hang.py --minutes 12            # the notebook as it is
    .venv/bin/python benchmarks/widget_cell_hang.py --minutes 12 --old-cell # the cell as it was
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.rate_folders import write_rate_sweep  # noqa: E402

OLD_CELL = "rate_views.RejudgePanel(records, level).widget  # move a slider: every step is judged again"
ONE = """
import sys
from pathlib import Path
from toolkit.jupyter.execute import execute_path
execute_path(Path(sys.argv[1]), Path(sys.argv[2]) / "rate_sweep.ipynb",
             {"RESULTS_DIR": sys.argv[3], "REJUDGE_TTFT_MS": 65, "REJUDGE_TPOT_MS": 25})
"""


def notebook(root: Path, old_cell: bool) -> Path:
    """rate_sweep.ipynb as it is, or with the slider cell as it was."""
    source = REPO / "notebooks" / "rate_sweep.ipynb"
    if not old_cell:
        return source
    nb = nbformat.read(source, as_version=4)
    (cell,) = [c for c in nb.cells if "rejudge_panel(" in c.source]
    cell.source = OLD_CELL
    path = root / "rate_sweep_old_cell.ipynb"
    nbformat.write(nb, path)
    return path


def dump(pid: int) -> None:
    """py-spy's stacks of a process and its children (where the hang sits)."""
    if shutil.which("py-spy") is None:
        return
    for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        print(f"=== pid {proc.pid}: {' '.join(proc.cmdline()[:4])}", flush=True)
        print(subprocess.run(["py-spy", "dump", "--pid", str(proc.pid)], capture_output=True, text=True).stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=12.0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--watchdog-s", type=float, default=90.0)
    parser.add_argument("--old-cell", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="widget-cell-hang-"))
    sweep = write_rate_sweep(root / "sweep" / "run", searched=(6.5, 5.75), lag_flagged=(2,))
    source = notebook(root, args.old_cell)
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(REPO))
    stop_at = time.monotonic() + args.minutes * 60
    done: list[int] = []
    hangs: list[str] = []

    def worker(w: int) -> None:
        i = 0
        while time.monotonic() < stop_at and not hangs:
            i += 1
            out = root / f"out{w}-{i}"
            out.mkdir()
            proc = subprocess.Popen([sys.executable, "-c", ONE, str(source), str(out), str(sweep)], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            try:
                proc.wait(args.watchdog_s)
                done.append(proc.returncode)
                shutil.rmtree(out, ignore_errors=True)
            except subprocess.TimeoutExpired:
                hangs.append(str(out))
                dump(proc.pid)
                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.kill()
                proc.kill()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = sum(code != 0 for code in done)
    print(f"hung executions kept in: {', '.join(hangs) or '-'}; failed (not hung): {failed}")
    print(f"widget_cell_hang: cell={'old' if args.old_cell else 'now'} executions={len(done) + len(hangs)} "
          f"hangs={len(hangs)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
