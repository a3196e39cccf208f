"""One variant of a batch, run as `toolkit run` runs it (toolkit.jupyter.pipeline), its failure an outcome.

Both the local runner (toolkit.batch.runner) and the Ray task (toolkit.batch.ray_runner) call `run_variant`.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from toolkit.base.api_keys import env_secret, redact, redact_and_cut
from toolkit.base.errors import NotebookError
from toolkit.batch.state import DONE, FAILED, now
from toolkit.batch.sweep import Variant

ERROR_FILE = "error.txt"  # a failed variant's traceback, beside its results


def one_line_error(exc: BaseException, secret: str | None = None) -> str:
    """Why a variant failed, in one line (the notebook cell, the server's reason, or the exception)."""
    from toolkit.servers.managed import ServerError

    if isinstance(exc, NotebookError):  # the notebook, its cell and what it raised (toolkit.jupyter.execute)
        text = exc.line
    elif isinstance(exc, ServerError):
        text = exc.reason
    elif isinstance(exc, ValueError):  # ParamsError, RunRefused ...: already "field: what is wrong"
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return redact_and_cut(first, 500, secret)


def run_variant(variant: Variant, out: Path, *, resume: bool) -> dict[str, Any]:
    """One variant as `toolkit run` does it (toolkit.jupyter.pipeline.run_one), under `out`'s lock.

    Returns the outcome (state, error, pid, host, times); a failure is an outcome, not an exception.
    """
    from toolkit.base.folder_lock import hold
    from toolkit.jupyter.pipeline import prepare_run, run_one

    started, clock = now(), time.monotonic()
    secret = env_secret(variant.params.api_key_env)  # for redaction; the run checks the key before use
    error: str | None = None
    (out / ERROR_FILE).unlink(missing_ok=True)
    try:
        with hold(out):
            error = run_one(prepare_run(variant.params, variant.server), out, resume=resume).server_died
    except Exception as exc:
        error = one_line_error(exc, secret)
        out.mkdir(parents=True, exist_ok=True)
        (out / ERROR_FILE).write_text(redact(traceback.format_exc(), secret), encoding="utf-8")
    return {
        "state": FAILED if error else DONE,
        "error": error,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_at": started,
        "finished_at": now(),
        "duration_s": round(time.monotonic() - clock, 1),
    }
