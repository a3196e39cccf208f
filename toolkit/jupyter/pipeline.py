"""One run of a params file: the sequence `toolkit run`, `toolkit demo` and every batch variant (here or on Ray) call.

    prepare_run, once, at the entry: read the key, check the rate-sweep block and the server command, and ask a
    running server for its facts and the plan → run_one: refuse a folder holding another run, or check the one
    resumed → launch the server (a `server:` block) → preflight it → run_notebooks: the notebooks
    (toolkit.jupyter.execute), then the reports (toolkit.jupyter.reports) → whether the launched server died
    during the run → stop it.

Each check is made once in this process and what it found is handed down; the notebooks' kernels check again
only what a notebook run alone needs (toolkit.matrix.runner.run_matrix_async).

`new_run_dir` names a new run's folder.

The caller holds the results folder's lock (toolkit.matrix.run_folder.hold). A failure raises, after a line
saying that the launched server had died, if it had; an interrupt (KeyboardInterrupt) stops the server and
keeps every finished measurement, for `--resume`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.base.api_keys import ApiKey, redact

if TYPE_CHECKING:
    from toolkit.jupyter.run_sweep import RunSweep
    from toolkit.matrix.discovery import ServerInfo
    from toolkit.matrix.plan import Plan
    from toolkit.params import RunParams, ServerSpec
    from toolkit.servers.managed import ManagedServer


@dataclass(frozen=True)
class PreparedRun:
    """A run validated once, where it enters: its parameters, its rate sweep (the `rate_sweep:` block checked,
    as the notebook is given it; None: none), its `server:` block (the program found), its key (read from the
    environment, never printed), and the server's facts and the plan when it was preflighted already (a running
    server). The steps below trust it."""

    params: RunParams
    server: ServerSpec | None
    api_key: ApiKey
    sweep: RunSweep | None = None
    found: ServerInfo | None = None
    plan: Plan | None = None


def prepare_run(params: RunParams, server: ServerSpec | None = None, *, preflight: bool = False) -> PreparedRun:
    """Every check a run makes before anything is written, launched or sent; ParamsError or SecretError in one
    line. `preflight`: a running server (no `server` block) is asked for its facts now."""
    from toolkit.jupyter.run_sweep import run_sweep
    from toolkit.matrix import runner  # looked up at call time: tests stand in for its preflight
    from toolkit.servers.launch import check_command

    api_key = ApiKey.from_env(params.api_key_env)  # a key that cannot be used fails before anything is written
    sweep = run_sweep(params)  # a bad `rate_sweep:` block fails before any launch or load
    if server is not None:
        check_command(server, api_key.value)
    found, plan = runner.preflight(params, api_key.value) if preflight and server is None else (None, None)
    return PreparedRun(params, server, api_key, sweep, found, plan)


@dataclass(frozen=True)
class RunResult:
    """What a run wrote (the reports by name) and, when its launched server ended during it, the line saying so."""

    paths: dict[str, Path]
    server_died: str | None = None


def run_one(run: PreparedRun, out: Path, *, resume: bool = False) -> RunResult:
    """Run the prepared run into `out`, launching its server for the run when it has a `server:` block; the
    reports' paths.

    With `resume`, the run in `out` must be the same (parameters, launch command, then the server found): refused
    in one line otherwise.
    """
    from toolkit.matrix import runner  # looked up at call time: tests stand in for its preflight
    from toolkit.matrix.run_folder import check_resume, check_same_server, open_run
    from toolkit.results.store import check_writable

    params, server, key, found, plan = run.params, run.server, run.api_key.value, run.found, run.plan
    # resume: before a launch, the parameters and the command; without one, the server found too. A fresh run:
    # a folder that holds a run is refused.
    recorded = check_resume(out, params, server, key, found) if resume else open_run(out, params, resume=False)
    check_writable(out)  # before any load: a folder we cannot write would lose every measurement
    with _launched(server, params, out, key) as managed:
        try:
            if found is None or managed is not None:
                found, plan = runner.preflight(params, key)  # bad input fails here, before any load is sent
                if recorded is not None:  # the launched server against the run's, as recorded above
                    check_same_server(recorded, out, found)
            paths = run_notebooks(run, out, resume=resume, plan=plan)
        except Exception:
            if died := server_died(managed):  # said before the error it caused
                print(redact(f"error: {died}"), file=sys.stderr, flush=True)
            raise
        died = server_died(managed)
    return RunResult(paths, died)


def new_run_dir(outputs: str | Path, run_label: str) -> Path:
    """outputs/<run_label>/<UTC timestamp>/ (papermill does not make folders)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = Path(outputs) / run_label / stamp
    path.mkdir(parents=True, exist_ok=False)
    return path


def run_notebooks(
    run: PreparedRun, out_dir: Path, *, resume: bool = False, plan: Plan | None = None
) -> dict[str, Path]:
    """Prefill notebook, then the decode matrix notebook, into one results folder, then the rate sweep notebook
    when the run has a rate sweep (`resume`: the sweep there continued); then the reports. Each cell within its
    bound, from `plan` (the matrix's cells) and the sweep's steps (toolkit.jupyter.watchdog)."""
    from toolkit.jupyter.execute import execute, notebook_parameters, parameters_for  # papermill: a second to load
    from toolkit.jupyter.reports import write_reports
    from toolkit.jupyter.run_sweep import sweep_parameters
    from toolkit.jupyter.watchdog import run_bounds
    from toolkit.results.documents.run_blocks import CapacityBlock
    from toolkit.results.run_document import RunDocument

    params, key = run.params, run.api_key
    parameters = notebook_parameters(params, out_dir)
    bounds = run_bounds(params, plan, None if run.sweep is None else run.sweep.params)
    for notebook in ("prefill", "decode_matrix"):
        execute(notebook, out_dir, parameters_for(notebook, parameters), bounds, key)
    if run.sweep is not None:
        execute("rate_sweep", out_dir, sweep_parameters(run.sweep.values, out_dir, resume=resume), bounds, key)
    if params.capacity is not None:  # the report's capacity plan reads its target from run.json
        document = RunDocument.load(out_dir)
        document.capacity = CapacityBlock.model_validate(params.capacity.model_dump())
        document.save(out_dir)
    return write_reports(out_dir, key)  # which fails loudly if the run left no run.json


@contextmanager
def _launched(
    server: ServerSpec | None, params: RunParams, out: Path, api_key: str | None
) -> Iterator[ManagedServer | None]:
    """The `server:` block's server, launched for the block and stopped after it (on errors and interrupts too)."""
    if server is None:
        yield None
        return
    from toolkit.servers.launch import launched_server, log_path

    print(f"server: launching {server.command[0]} (log: {log_path(server, out)}) ...", flush=True)
    with launched_server(server, params, out, api_key) as managed:
        print(f"server: {managed.base_url} healthy", flush=True)
        yield managed


def server_died(server: ManagedServer | None) -> str | None:
    """A line saying that the launched server ended during the run, or None (still running, or none launched)."""
    if server is None or (code := server.exit_code) is None:
        return None
    from toolkit.servers.managed import exit_description

    return (
        f"the server {exit_description(code)} during the run (log: {server.log_path}); finished "
        "measurements are kept, its cells are Error; rerun with --resume"
    )
