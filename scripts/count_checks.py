"""How many times one `toolkit run` makes each of its checks, per process: the command and each notebook kernel.

    .venv/bin/python scripts/count_checks.py [--no-rate-sweep] [--resume]

Starts the tests' fault server (tests/faultserver.py), which asks for a key, and runs `python -m toolkit run` on
small params against it (a `rate_sweep:` block unless `--no-rate-sweep`; `--resume`: the run again, resumed), with
this file loaded first in every Python process the run starts: a sitecustomize on PYTHONPATH, which the kernels
inherit (a kernel forked from the zygote inherits it from there). There `install` wraps the functions that make each
check and counts their calls, an audit hook counts the opens of run.json for reading, and the counts go to a file per
process. One line per process.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COUNTS_ENV = "TOOLKIT_COUNT_CHECKS_DIR"  # where each process writes its counts; unset: nothing is counted
NOTEBOOK_ENV = "TOOLKIT_COUNT_CHECKS_NOTEBOOK"  # set by the command around each notebook: its kernel's name
KEY_ENV = "COUNT_CHECKS_API_KEY"
KEY = "sk-count-checks-5e1d"
# A check and the functions that make it (module, names): a call of any of them counts once.
CHECKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "params": ("toolkit.params", ("make_params",)),
    "discovery": ("toolkit.matrix.discovery", ("discover",)),
    "plan": ("toolkit.matrix.plan", ("make_plan",)),
    "rate sweep": ("toolkit.rates.params", ("make_rate_params",)),
    "resume": ("toolkit.matrix.run_folder", ("open_run",)),
    "key": ("toolkit.base.api_keys", ("api_key_from_env", "env_secret")),
}
RUN_JSON = "run.json"  # counted where it is opened for reading
COLUMNS = (*CHECKS, RUN_JSON)


def install() -> None:
    """Count this process's checks into `$TOOLKIT_COUNT_CHECKS_DIR/<pid>.json` (sitecustomize calls this)."""
    folder = os.environ.get(COUNTS_ENV)
    if not folder:
        return
    import importlib

    from toolkit.jupyter import execute

    # A kernel forked from the zygote (toolkit.jupyter.kernel_zygote) inherits this hook: there it counts from
    # zero, under the name its own environment gives, once that is set; the zygote itself runs no notebook.
    this: dict[str, Any] = {"zygote": "toolkit.jupyter.kernel_zygote" in sys.orig_argv, "started": time.time(),
                            "counts": dict[str, int]()}  # fmt: skip

    def write() -> None:
        if not this["zygote"]:
            record = {"process": os.environ.get(NOTEBOOK_ENV, "toolkit run"), "started": this["started"],
                      "counts": this["counts"]}  # fmt: skip
            (Path(folder) / f"{os.getpid()}.json").write_text(json.dumps(record))

    def forked() -> None:
        this.update(zygote=False, started=time.time(), counts={})

    def count(check: str) -> None:
        this["counts"][check] = this["counts"].get(check, 0) + 1
        write()

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and _reads_run_json(*args):
            count(RUN_JSON)

    wrapped: dict[int, Callable[..., Any]] = {}
    for check, (module_name, names) in CHECKS.items():
        module = importlib.import_module(module_name)
        for function in (getattr(module, n) for n in names):
            wrapped[id(function)] = _counted(function, check, count)
    for module in [m for key, m in sys.modules.items() if key.startswith("toolkit")]:  # every binding of a name
        for attribute, value in list(vars(module).items()):
            if id(value) in wrapped:
                setattr(module, attribute, wrapped[id(value)])
    execute.execute_path = _naming_kernel(execute.execute_path)
    sys.addaudithook(audit)
    os.register_at_fork(after_in_child=forked)
    atexit.register(write)  # a forked kernel's record, under its own name, if it counted nothing
    write()


def _counted(function: Callable[..., Any], check: str, count: Callable[[str], None]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        count(check)
        return function(*args, **kwargs)

    return counted


def _naming_kernel(execute_path: Callable[..., Any]) -> Callable[..., Any]:
    """`execute_path`, with the notebook's name in the environment its kernel inherits."""

    def named(source: Path, *args: Any, **kwargs: Any) -> Any:
        os.environ[NOTEBOOK_ENV] = Path(source).stem
        try:
            return execute_path(source, *args, **kwargs)
        finally:
            os.environ.pop(NOTEBOOK_ENV, None)

    return named


def _reads_run_json(file: Any, mode: Any, flags: Any) -> bool:
    if not isinstance(file, str | bytes | os.PathLike) or os.path.basename(os.fsdecode(file)) != RUN_JSON:
        return False
    if isinstance(mode, str):
        return not set(mode) & set("wax+")
    return isinstance(flags, int) and flags & os.O_ACCMODE == os.O_RDONLY


def run_params(base_url: str, *, rate_sweep: bool = True) -> dict[str, Any]:
    """Small params for the fault server: one context, one stream, 1 s windows; a sweep of one short step."""
    values: dict[str, Any] = {"base_url": base_url, "contexts": ["64"], "concurrency": [1], "duration_s": 1,
                              "max_output": 8, "readiness_timeout_s": 5, "read_timeout_s": 5, "control_window_s": 0,
                              "api_key_env": KEY_ENV}  # fmt: skip
    if rate_sweep:
        values["rate_sweep"] = {"rates": [20], "requests_per_step": 4, "input_tokens": 30, "output_tokens": 4}
    return values


def count_run(params: dict[str, Any], out: Path, *, resume: bool = False) -> list[dict[str, Any]]:
    """Run `toolkit run` on `params` into `out` with every process counted: each one's name and counts, in the
    order they started. RuntimeError with the command's last lines when it fails."""
    with tempfile.TemporaryDirectory(prefix="count-checks-") as tmp:
        hook, counts = Path(tmp, "hook"), Path(tmp, "counts")
        hook.mkdir()
        counts.mkdir()
        (hook / "sitecustomize.py").write_text("from scripts.count_checks import install\n\ninstall()\n")
        (hook / "params.yaml").write_text(json.dumps(params))
        pythonpath = os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "PYTHONPATH": pythonpath, COUNTS_ENV: str(counts), KEY_ENV: KEY, "MPLBACKEND": "Agg"}
        command = [sys.executable, "-m", "toolkit", "run", str(hook / "params.yaml"), "--out", str(out)]
        done = subprocess.run([*command, *(["--resume"] if resume else [])], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"toolkit run failed ({done.returncode}): {done.stderr[-3000:]}")
        records = [json.loads(p.read_text()) for p in counts.glob("*.json")]
    return sorted(records, key=lambda r: r["started"])


def table(records: list[dict[str, Any]]) -> str:
    """One line per process: its name and the count of each check."""
    width = max(len(r["process"]) for r in records)
    lines = [f"{'process':<{width}}  " + "  ".join(COLUMNS)]
    for r in records:
        cells = (f"{r['counts'].get(c, 0):>{len(c)}}" for c in COLUMNS)
        lines.append(f"{r['process']:<{width}}  " + "  ".join(cells))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-rate-sweep", action="store_true", help="params without a rate_sweep: block")
    parser.add_argument("--resume", action="store_true", help="also count the run resumed (--resume)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.faultserver import FaultServer

    with FaultServer(api_key=KEY) as server, tempfile.TemporaryDirectory(prefix="count-checks-run-") as tmp:
        params = run_params(server.base_url, rate_sweep=not args.no_rate_sweep)
        print(f"toolkit run (one context, one stream{', a rate sweep' if params.get('rate_sweep') else ''}):")
        print(table(count_run(params, Path(tmp, "out"))))
        if args.resume:
            print("\ntoolkit run --resume (the finished run again):")
            print(table(count_run(params, Path(tmp, "out"), resume=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
