"""Executing notebooks with papermill: their parameters, a kernel in this process's session, each cell within its
bound, the key redacted at the exits, and papermill's errors translated into the toolkit's error tree.

Converting the executed notebooks is toolkit.jupyter.convert's job; writing the reports, toolkit.jupyter.reports'.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import nbformat
import papermill
from nbclient.exceptions import CellTimeoutError
from papermill.exceptions import PapermillExecutionError

from toolkit.base.api_keys import DEFAULT_KEY_ENV, ApiKey, RedactingWriter, env_secret, redact, redact_file
from toolkit.base.errors import CellTimeout, NotebookError
from toolkit.jupyter.kernels import SameSessionKernelManager
from toolkit.jupyter.papermill_engine import ENGINE_NAME
from toolkit.jupyter.shipped import NOTEBOOKS
from toolkit.jupyter.watchdog import MEASURING_FLOOR_S, CellBounds, Watchdog
from toolkit.params import RunParams

RUN_ONLY = {"rate_sweep", "capacity", "cell_timeout_s"}  # the run's, not parameters of the matrix notebooks
ANALYSIS_ONLY = CellBounds(MEASURING_FLOOR_S)  # the bounds of notebooks that measure nothing


def notebook_parameters(params: RunParams, results_dir: Path) -> dict[str, Any]:
    """The matrix notebooks' UPPER_CASE parameters (plain values; never the API key; the `rate_sweep:` block is
    rate_sweep.ipynb's: `run_sweep_parameters`)."""
    values = params.model_dump(exclude=RUN_ONLY)
    if values.get("launch_command"):  # papermill records parameters in the executed notebooks
        values["launch_command"] = redact(values["launch_command"])  # the key was redacted as RunParams read it
    out = {k.upper(): v for k, v in values.items()}
    out["RESULTS_DIR"] = str(results_dir.resolve())
    return out


def declared_parameters(notebook: str) -> set[str]:
    """The names notebooks/<notebook>.ipynb declares in its `parameters` cell (papermill's inspection)."""
    return set(papermill.inspect_notebook(str(NOTEBOOKS / f"{notebook}.ipynb")))


def parameters_for(notebook: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """Only the parameters the notebook declares (papermill would inject the others and warn)."""
    declared = declared_parameters(notebook)
    return {name: value for name, value in parameters.items() if name in declared}


def execute(
    notebook: str,
    out_dir: Path,
    parameters: dict[str, Any],
    bounds: CellBounds = ANALYSIS_ONLY,
    api_key: ApiKey | None = None,
) -> Path:
    """Execute notebooks/<notebook>.ipynb with papermill into out_dir; the executed copy is kept on failure."""
    output = out_dir / f"{notebook}.ipynb"
    execute_path(NOTEBOOKS / f"{notebook}.ipynb", output, parameters, bounds, api_key)
    return output


def execute_path(
    source: Path,
    output: Path,
    parameters: dict[str, Any],
    bounds: CellBounds = ANALYSIS_ONLY,
    api_key: ApiKey | None = None,
) -> None:
    """papermill with a kernel in this process's session (toolkit.jupyter.kernels: no autogroup of its own), the
    executed notebook saved at most every 2 s while it runs (toolkit.jupyter.papermill_engine), each cell within its
    bound (toolkit.jupyter.watchdog): CellTimeout naming the cell, after the kernel is stopped; a
    cell that raised: NotebookError naming it (papermill's PapermillExecutionError, translated here).

    The key is redacted at the exits: from the kernel's output as it is relayed, and from the executed notebook
    once papermill is done with it, whether the notebook ran or failed (a server's error that echoed the key would
    otherwise stay in a traceback on disk). `api_key`: the run's, read where it entered; None: the variable the
    notebook's API_KEY_ENV names, read here."""
    os.environ["TOOLKIT_PROGRESS"] = "text"  # the kernels inherit it: no progress widget in a report
    key = api_key.value if api_key is not None else env_secret(str(parameters.get("API_KEY_ENV", DEFAULT_KEY_ENV)))
    stdout, stderr = RedactingWriter(sys.stdout, key), RedactingWriter(sys.stderr, key)
    watchdog = Watchdog(bounds)
    try:
        papermill.execute_notebook(
            str(source),
            str(output),
            parameters=parameters,
            kernel_name="python3",
            engine_name=ENGINE_NAME,
            cwd=str(NOTEBOOKS),
            progress_bar=False,
            stdout_file=stdout,
            stderr_file=stderr,
            kernel_manager_class=SameSessionKernelManager,
            timeout_func=watchdog,
        )
    except CellTimeoutError:
        stdout.end_line()
        stderr.end_line()
        raise CellTimeout(timeout_line(output, watchdog)) from None
    except PapermillExecutionError as exc:  # the kernel's traceback stays in the executed notebook and the chain
        raise NotebookError(redact(failure_line(output, exc), key)) from exc
    finally:
        stdout.close()
        stderr.close()
        redact_file(output, key)


def failure_line(output: Path, exc: PapermillExecutionError) -> str:
    """Which cell of which notebook raised what, and where the executed notebook is (NotebookError's line)."""
    cell = exc.exec_count if exc.exec_count is not None else exc.cell_index + 1
    what = next((line.strip() for line in str(exc.evalue or "").splitlines() if line.strip()), "")
    return (
        f"{output.name}: cell {cell} failed: {exc.ename}{': ' + what if what else ''}; the executed notebook, "
        f"its traceback in it, is {output}"
    )


def timeout_line(output: Path, watchdog: Watchdog) -> str:
    """What ran past its bound, where the rest of the run is, and how to go on (CellTimeout's line)."""
    cell = watchdog.cell
    executed = nbformat.read(output, as_version=4).cells if output.exists() else []
    number = next((i + 1 for i, c in enumerate(executed) if cell is not None and c.get("id") == cell.get("id")), None)
    first = cell.source.strip().splitlines()[0][:60] if cell is not None and cell.source.strip() else ""
    bound = watchdog.bounds.for_cell(cell) if cell is not None else watchdog.bounds.analysis_s
    return (
        f"{output.name}: cell {number or '?'} ({first}) ran past its bound of {bound:,.0f} s and its kernel was "
        f"stopped; the executed notebook and everything measured before are in {output.parent} "
        "(rerun with --resume to go on; cell_timeout_s in the params sets the bound)"
    )
