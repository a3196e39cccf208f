"""How often plain papermill waits for ever on the notebooks that can build a widget: with the widget check as it
is now (toolkit.base.front_end.widget_front_end) or as it was (any ZMQ kernel counted as a person's).

Executes, with the `papermill` command a user types (no `toolkit run`, no TOOLKIT_PROGRESS, no Jupyter server
session), `--executions` times in all, `--workers` at a time, round robin over
- rate_sweep.ipynb on a synthetic sweep folder (its slider cell),
- prefill.ipynb and decode_matrix.ipynb measuring a one-cell matrix on a fault server (their progress bar).
An execution past `--watchdog-s` is a hang: py-spy (when installed) dumps its processes, it is killed, and the
run goes on. `--old-check` puts the old check back in each kernel (a first cell, before anything imports it).
The last line: `widget_cell_hang: check=<now|old> executions=<n> hangs=<n> widget_outputs=<n> failed=<n>`.

    .venv/bin/python benchmarks/widget_cell_hang.py --executions 201              # the check as it is
    .venv/bin/python benchmarks/widget_cell_hang.py --executions 201 --old-check  # the check as it was
"""

from __future__ import annotations

import argparse
import itertools
import json
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

from tests.faultserver import FaultServer  # noqa: E402
from tests.rate_folders import write_rate_sweep  # noqa: E402

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
OLD_CHECK = """\
import sys
import toolkit.base.front_end as front_end
front_end.widget_front_end = lambda: type(__import__("IPython").get_ipython()).__name__ == "ZMQInteractiveShell"
"""  # before anything imports it: the modules that ask take the name from the module when they are imported
MATRIX = ["-y", "{CONTEXTS: [64], CONCURRENCY: [1], DURATION_S: 1, MAX_OUTPUT: 8, CONTROL_WINDOW_S: 0, "
          "READINESS_TIMEOUT_S: 10}"]  # fmt: skip


def sources(root: Path, old_check: bool) -> dict[str, Path]:
    """The three notebooks as shipped, or each with the old check as its first cell."""
    out = {}
    for name in ("rate_sweep", "prefill", "decode_matrix"):
        source = REPO / "notebooks" / f"{name}.ipynb"
        if old_check:
            nb = nbformat.read(source, as_version=4)
            nb.cells.insert(0, nbformat.v4.new_code_cell(OLD_CHECK))
            source = root / f"{name}-old-check.ipynb"
            nbformat.write(nb, source)
        out[name] = source
    return out


def command(name: str, source: Path, out: Path, sweep: Path, base_url: str) -> list[str]:
    papermill = [str(Path(sys.executable).parent / "papermill"), str(source), str(out / f"{name}.ipynb"),
                 "--cwd", str(REPO / "notebooks"), "--no-progress-bar"]  # fmt: skip
    if name == "rate_sweep":
        return [*papermill, "-p", "RESULTS_DIR", str(sweep), "-p", "REJUDGE_TTFT_MS", "65"]
    return [*papermill, "-p", "BASE_URL", base_url, "-p", "RESULTS_DIR", str(out), *MATRIX]


def widget_outputs(executed: Path) -> int:
    if not executed.exists():
        return 0
    nb = json.loads(executed.read_text())
    return sum(WIDGET_VIEW in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []))


def dump(pid: int) -> None:
    """py-spy's stacks of a process and its children (where the hang sits)."""
    if shutil.which("py-spy") is None:
        return
    for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        print(f"=== pid {proc.pid}: {' '.join(proc.cmdline()[:4])}", flush=True)
        print(subprocess.run(["py-spy", "dump", "--pid", str(proc.pid)], capture_output=True, text=True).stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=201)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--watchdog-s", type=float, default=120.0)
    parser.add_argument("--old-check", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="widget-cell-hang-"))
    sweep = write_rate_sweep(root / "sweep" / "run", searched=(6.5, 5.75), lag_flagged=(2,))
    notebooks = sources(root, args.old_check)
    env = {k: v for k, v in os.environ.items() if k not in ("TOOLKIT_PROGRESS", "JPY_SESSION_NAME")}
    env |= {"MPLBACKEND": "Agg", "PYTHONPATH": str(REPO), "NO_PROXY": "127.0.0.1,localhost"}
    jobs = itertools.islice(itertools.cycle(notebooks), args.executions)
    lock = threading.Lock()
    counts = {"executions": 0, "hangs": 0, "widget_outputs": 0, "failed": 0}
    by_notebook: dict[str, list[int]] = {name: [0, 0] for name in notebooks}  # executions, hangs
    started = time.monotonic()

    def worker(w: int, base_url: str) -> None:
        for i in itertools.count():
            with lock:
                name = next(jobs, None)
            if name is None:
                return
            out = root / f"out{w}-{i}"
            out.mkdir()
            proc = subprocess.Popen(command(name, notebooks[name], out, sweep, base_url), env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
            try:
                _, err = proc.communicate(timeout=args.watchdog_s)
                hung = False
            except subprocess.TimeoutExpired:
                hung, err = True, ""
                print(f"hang: {name} in {out}", flush=True)
                dump(proc.pid)
                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.kill()
                proc.kill()
                proc.wait()
            with lock:
                counts["executions"] += 1
                counts["hangs"] += hung
                counts["failed"] += not hung and proc.returncode != 0
                counts["widget_outputs"] += widget_outputs(out / f"{name}.ipynb")
                by_notebook[name][0] += 1
                by_notebook[name][1] += hung
                if not hung and proc.returncode != 0:
                    print(f"failed: {name}: {err.strip().splitlines()[-1:]}", flush=True)
                if counts["executions"] % 20 == 0:
                    print(f"{counts} after {time.monotonic() - started:.0f} s", flush=True)
            if not hung:
                shutil.rmtree(out, ignore_errors=True)

    with FaultServer() as server:
        threads = [threading.Thread(target=worker, args=(w, server.base_url)) for w in range(args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for name, (n, hangs) in by_notebook.items():
        print(f"{name}: executions={n} hangs={hangs}")
    print(f"took {time.monotonic() - started:.0f} s with {args.workers} at a time")
    print(
        f"widget_cell_hang: check={'old' if args.old_check else 'now'} "
        + " ".join(f"{k}={v}" for k, v in counts.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
