"""One run of a params file: the sequence `toolkit run`, `toolkit demo` and every batch variant (here or on Ray) call.

    check the key (and the server command) → refuse a folder holding another run, or check the one resumed →
    launch the server (a `server:` block) → preflight → the notebooks and reports (papermill, nbconvert) →
    whether the launched server died during the run → stop it.

The caller holds the results folder's lock (toolkit.matrix.run_folder.hold). A failure raises, after a line
saying that the launched server had died, if it had; an interrupt (KeyboardInterrupt) stops the server and
keeps every finished measurement, for `--resume`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.base.api_keys import api_key_from_env, redact

if TYPE_CHECKING:
    from toolkit.matrix.discovery import ServerInfo
    from toolkit.params import RunParams, ServerSpec
    from toolkit.servers.managed import ManagedServer


@dataclass(frozen=True)
class RunResult:
    """What a run wrote (the reports by name) and, when its launched server ended during it, the line saying so."""

    paths: dict[str, Path]
    server_died: str | None = None


def run_one(
    params: RunParams,
    out: Path,
    *,
    server: ServerSpec | None = None,
    resume: bool = False,
    found: ServerInfo | None = None,
) -> RunResult:
    """Run `params` into `out`, launching `server` for the run when given; the reports' paths.

    `found`: the server's facts when the caller preflighted it already (no `server` block). With `resume`, the run
    in `out` must be the same (parameters, launch command, then the server found): refused in one line otherwise.
    """
    from toolkit.jupyter.execute import run_notebooks
    from toolkit.jupyter.rate_notebook import check_rate_sweep
    from toolkit.matrix import runner  # looked up at call time: tests stand in for its preflight
    from toolkit.matrix.run_folder import check_resume, open_run
    from toolkit.results.store import check_writable
    from toolkit.servers.launch import check_command

    api_key = api_key_from_env(params.api_key_env)  # a key that cannot be used fails before anything is written
    check_rate_sweep(params)  # a bad `rate_sweep:` block fails before any launch or load
    if server is not None:
        check_command(server, api_key)
    if resume:  # before a launch: the parameters and the command; without one: the server found too
        check_resume(out, params, server, found)
    else:
        open_run(out, params, resume=False)  # refuses a folder that holds a run
    check_writable(out)  # before any load: a folder we cannot write would lose every measurement
    with _launched(server, params, out) as managed:
        try:
            if found is None or managed is not None:
                found = runner.preflight(params)  # bad input fails here, before any load is sent
                if resume:
                    check_resume(out, params, server, found)
            paths = run_notebooks(params, out, resume=resume)
        except Exception:
            if died := server_died(managed):  # said before the error it caused
                print(redact(f"error: {died}"), file=sys.stderr, flush=True)
            raise
        died = server_died(managed)
    return RunResult(paths, died)


@contextmanager
def _launched(server: ServerSpec | None, params: RunParams, out: Path) -> Iterator[ManagedServer | None]:
    """The `server:` block's server, launched for the block and stopped after it (on errors and interrupts too)."""
    if server is None:
        yield None
        return
    from toolkit.servers.launch import launched_server, log_path

    print(f"server: launching {server.command[0]} (log: {log_path(server, out)}) ...", flush=True)
    with launched_server(server, params, out) as managed:
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
