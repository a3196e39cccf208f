"""One variant of a batch, run as `toolkit run` would run it, its failure an outcome rather than an exception.

Both the local runner (toolkit.batch.runner) and the Ray task (toolkit.batch.ray_runner) call `run_variant`.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from toolkit.api_keys import api_key_from_env, env_secret, redact
from toolkit.batch.state import DONE, FAILED, now
from toolkit.batch.sweep import Variant
from toolkit.results.store import RUN_FILE

ERROR_FILE = "error.txt"  # a failed variant's traceback, beside its results


def one_line_error(exc: BaseException, secret: str | None = None) -> str:
    """Why a variant failed, in one line (the notebook cell, the server's reason, or the exception)."""
    from papermill.exceptions import PapermillExecutionError

    from toolkit.servers.managed import ServerError

    if isinstance(exc, PapermillExecutionError):
        text = f"notebook cell {exc.exec_count} failed: {exc.ename}: {exc.evalue}"
    elif isinstance(exc, ServerError):
        text = exc.reason
    elif isinstance(exc, ValueError):  # ParamsError, RunRefused ...: already "field: what is wrong"
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return redact(first, secret)[:500]


def run_variant(variant: Variant, out: Path, *, resume: bool) -> dict[str, Any]:
    """One variant as `toolkit run` does it (preflight, notebooks, reports; its server launched if it has a block).

    Returns the outcome (state, error, pid, host, times); a failure is an outcome, not an exception.
    """
    from toolkit.jupyter.execute import run_notebooks
    from toolkit.matrix.run_folder import check_resume, hold
    from toolkit.matrix.runner import preflight

    started, clock = now(), time.monotonic()
    secret = env_secret(variant.params.api_key_env)  # for redaction; the run checks the key before use
    error: str | None = None
    (out / ERROR_FILE).unlink(missing_ok=True)
    try:
        if not resume and (out / RUN_FILE).exists():
            raise ValueError(f"out: {out} already holds a run; pass --resume to continue it")
        with hold(out):
            if variant.server is None:
                found = preflight(variant.params)  # bad input fails here, before any load is sent
                if resume:
                    check_resume(out, variant.params, None, found)
                run_notebooks(variant.params, out)
            else:
                error = _run_launched(variant, out, resume)
    except Exception as exc:
        error = one_line_error(exc, secret)
        out.mkdir(parents=True, exist_ok=True)
        (out / ERROR_FILE).write_text(redact(traceback.format_exc(), secret), encoding="utf-8")
    return {"state": FAILED if error else DONE, "error": error, "pid": os.getpid(), "host": socket.gethostname(),
            "started_at": started, "finished_at": now(), "duration_s": round(time.monotonic() - clock, 1)}  # fmt: skip


def _run_launched(variant: Variant, out: Path, resume: bool) -> str | None:
    """Launch the variant's server, measure, stop it; a line when the server ended during the run, else None."""
    from toolkit.jupyter.execute import run_notebooks
    from toolkit.matrix.run_folder import check_resume
    from toolkit.matrix.runner import preflight
    from toolkit.servers.launch import check_command, launched_server, log_path
    from toolkit.servers.managed import exit_description

    assert variant.server is not None
    check_command(variant.server, api_key_from_env(variant.params.api_key_env))  # a bad key: SecretError
    if resume:
        check_resume(out, variant.params, variant.server)  # another command: refused before the launch
    print(f"server: launching {variant.server.command[0]} (log: {log_path(variant.server, out)}) ...", flush=True)
    with launched_server(variant.server, variant.params, out) as server:
        print(f"server: {server.base_url} healthy", flush=True)
        found = preflight(variant.params)
        if resume:
            check_resume(out, variant.params, variant.server, found)
        run_notebooks(variant.params, out)
        code = server.exit_code
    if code is None:
        return None
    return f"the server {exit_description(code)} during the run (log: {server.log_path}); rerun with --resume"
