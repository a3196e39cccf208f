"""Batch runs and reports: papermill executes the notebooks, nbconvert and our tables write the reports."""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
import papermill
from nbclient.exceptions import CellTimeoutError
from nbconvert import HTMLExporter
from nbconvert.preprocessors import Preprocessor
from traitlets.config import Config

from toolkit.base.api_keys import DEFAULT_KEY_ENV, RedactingWriter, env_secret, redact, redact_file
from toolkit.base.errors import CellTimeout, ParamsError
from toolkit.jupyter.kernels import SameSessionKernelManager
from toolkit.jupyter.rate_notebook import run_sweep_parameters, sweep_of
from toolkit.jupyter.shipped import NOTEBOOKS
from toolkit.jupyter.watchdog import MEASURING_FLOOR_S, CellBounds, Watchdog, run_bounds
from toolkit.matrix.plan import Plan
from toolkit.params import RunParams
from toolkit.reports import breakdown_views, capacity_views, compare, rate_tables, reconcile, workload_views
from toolkit.reports import tables as report_tables
from toolkit.results import rate_runs, runs
from toolkit.results.run_document import RunDocument
from toolkit.results.store import RUN_FILE

TEMPLATES = Path(__file__).resolve().parent / "templates"
RUN_ONLY = {"rate_sweep", "capacity", "cell_timeout_s"}  # the run's, not parameters of the matrix notebooks
ANALYSIS_ONLY = CellBounds(MEASURING_FLOOR_S)  # the bounds of notebooks that measure nothing
NOTEBOOK_ONLY = "notebook-only"  # cell tag: explanation and exploration shown in Jupyter, left out of the reports
FIGURE_TAG = "figure-"  # cell tag `figure-<key>`: the images the cell drew are the markdown report's <key>.png


def new_run_dir(outputs: str | Path, run_label: str) -> Path:
    """outputs/<run_label>/<UTC timestamp>/ (papermill does not make folders)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = Path(outputs) / run_label / stamp
    path.mkdir(parents=True, exist_ok=False)
    return path


def notebook_parameters(params: RunParams, results_dir: Path) -> dict[str, Any]:
    """The matrix notebooks' UPPER_CASE parameters (plain values; never the API key; the `rate_sweep:` block is
    rate_sweep.ipynb's: `run_sweep_parameters`)."""
    values = params.model_dump(exclude=RUN_ONLY)
    if values.get("launch_command"):  # papermill records parameters in the executed notebooks
        values["launch_command"] = redact(values["launch_command"], env_secret(params.api_key_env))
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


def execute(notebook: str, out_dir: Path, parameters: dict[str, Any], bounds: CellBounds = ANALYSIS_ONLY) -> Path:
    """Execute notebooks/<notebook>.ipynb with papermill into out_dir; the executed copy is kept on failure."""
    output = out_dir / f"{notebook}.ipynb"
    execute_path(NOTEBOOKS / f"{notebook}.ipynb", output, parameters, bounds)
    return output


def execute_path(source: Path, output: Path, parameters: dict[str, Any], bounds: CellBounds = ANALYSIS_ONLY) -> None:
    """papermill with a kernel in this process's session (toolkit.jupyter.kernels: no autogroup of its own), each
    cell within its bound (toolkit.jupyter.watchdog): CellTimeout naming the cell, after the kernel is stopped.

    The key (in the variable the notebook's API_KEY_ENV names) is redacted at the exits: from the kernel's output as
    it is relayed, and from the executed notebook once papermill is done with it, whether the notebook ran or failed
    (a server's error that echoed the key would otherwise stay in a traceback on disk)."""
    os.environ["TOOLKIT_PROGRESS"] = "text"  # the kernels inherit it: no progress widget in a report
    key = env_secret(str(parameters.get("API_KEY_ENV", DEFAULT_KEY_ENV)))
    stdout, stderr = RedactingWriter(sys.stdout, key), RedactingWriter(sys.stderr, key)
    watchdog = Watchdog(bounds)
    try:
        papermill.execute_notebook(
            str(source),
            str(output),
            parameters=parameters,
            kernel_name="python3",
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
    finally:
        stdout.close()
        stderr.close()
        redact_file(output, key)


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


def html_report(executed: nbformat.NotebookNode) -> str:
    """A self-contained HTML page of an executed notebook: no code, images embedded, no external assets.

    Cells tagged `notebook-only` (how to read and re-analyse, in Jupyter) are left out.
    """
    config = Config()
    config.TagRemovePreprocessor.remove_input_tags = {"remove-input"}
    config.TagRemovePreprocessor.remove_cell_tags = {NOTEBOOK_ONLY}
    config.TagRemovePreprocessor.enabled = True
    exporter = HTMLExporter(
        config=config,
        template_name="offline",
        extra_template_basedirs=[str(TEMPLATES)],
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        embed_images=True,
    )
    body, _ = exporter.from_notebook_node(executed)
    return body


class TaggedFigures(Preprocessor):
    """nbconvert stage: the PNG images of cells tagged `figure-<key>`, by key in the order they were drawn, into
    ``resources["figures"]``; the notebook itself is left as it is."""

    def preprocess_cell(
        self, cell: nbformat.NotebookNode, resources: dict[str, Any], index: int
    ) -> tuple[nbformat.NotebookNode, dict[str, Any]]:
        figures: dict[str, list[bytes]] = resources.setdefault("figures", {})
        for tag in cell.get("metadata", {}).get("tags", []):
            if tag.startswith(FIGURE_TAG):
                pngs = [o["data"]["image/png"] for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
                figures.setdefault(tag.removeprefix(FIGURE_TAG), []).extend(base64.b64decode(png) for png in pngs)
        return cell, resources


def drawn_images(notebook: nbformat.NotebookNode) -> dict[str, list[bytes]]:
    """The PNG images of an executed notebook's `figure-<key>` cells, by key (`TaggedFigures`)."""
    _, resources = TaggedFigures().preprocess(notebook, {})
    figures: dict[str, list[bytes]] = resources.get("figures", {})
    return figures


def save_images(images: Mapping[str, bytes], folder: Path) -> dict[str, str]:
    """Each image as <key>.png in folder; returns the paths relative to it, by key."""
    for key, png in images.items():
        (folder / f"{key}.png").write_bytes(png)
    return {key: f"{key}.png" for key in images}


def _first_drawn(
    executed: nbformat.NotebookNode, frame: pd.DataFrame, phases: Mapping[str, str | None]
) -> dict[str, bytes]:
    """The first image drawn under each key whose phase has rows in frame (None: whatever the rows)."""
    drawn = drawn_images(executed)
    return {
        key: drawn[key][0]
        for key, phase in phases.items()
        if drawn.get(key) and (phase is None or (frame["phase"] == phase).any())
    }


WORKLOAD_FIGURES = ("rate-turns",)  # report.ipynb's figures of the workload section
BREAKDOWN_FIGURES = ("rate-breakdown",)  # and of where the time goes


def markdown_report(results_dir: Path, executed: nbformat.NotebookNode) -> str:
    """report.md with the figures the report notebook drew as PNG files beside it; tables from the same code as
    the HTML."""
    frame, run_info = runs.load_run(results_dir)
    images = _first_drawn(executed, frame, {"prefill": "prefill", "decode": "decode", "scaling": "decode"})
    report = report_tables.report_markdown(frame, run_info, images=save_images(images, results_dir))
    if not rate_runs.has_rates(results_dir):
        return report
    sweep = rate_runs.load_rate_sweep(results_dir)
    figures = {key: drawn[0] for key, drawn in drawn_images(executed).items() if key.startswith("rate-") and drawn}
    turns = {key: figures.pop(key) for key in WORKLOAD_FIGURES if key in figures}
    split = {key: figures.pop(key) for key in BREAKDOWN_FIGURES if key in figures}
    section = rate_tables.rate_markdown(
        sweep.steps,
        sweep.level,
        sweep.search,
        sweep.sweep.get("search_precision"),
        images=save_images(figures, results_dir),
    )
    breakdown = breakdown_views.breakdown_markdown(sweep.steps, save_images(split, results_dir))
    workload = workload_views.workload_markdown(
        sweep.steps, sweep.records, sweep.controls, save_images(turns, results_dir)
    )
    for part in (breakdown, workload):
        section = section.rstrip("\n") + ("\n\n" + part if part else "")
    target = capacity_views.target_from(run_info)
    plan = "" if target is None else "\n\n" + capacity_views.capacity_markdown(sweep, target)
    return report.rstrip("\n") + "\n\n" + section.rstrip("\n") + plan


def compare_images(frame: pd.DataFrame, executed: nbformat.NotebookNode) -> dict[str, bytes]:
    """The compare notebook's figures keyed as :func:`toolkit.reports.compare.compare_markdown` expects."""
    ratios = drawn_images(executed).get("ratios", [])
    return _first_drawn(executed, frame, {"prefill": "prefill", "tradeoff": None}) | {
        compare.ratio_key(position): png for position, png in enumerate(ratios, 2)
    }


def write_reports(results_dir: Path) -> dict[str, Path]:
    """Execute the report notebook over a results folder; write report.html, report.md, results.csv."""
    frame, _ = runs.load_run(results_dir)
    frame.to_csv(results_dir / "results.csv", index=False)
    executed = execute("report", results_dir, parameters_for("report", {"RESULTS_DIR": str(results_dir.resolve())}))
    notebook = nbformat.read(executed, as_version=4)
    (results_dir / "report.html").write_text(html_report(notebook), encoding="utf-8")
    (results_dir / "report.md").write_text(markdown_report(results_dir, notebook), encoding="utf-8")
    return {name: results_dir / name for name in ("report.html", "report.md", "results.csv", RUN_FILE)}


def write_compare(run_dirs: Sequence[Path], out: Path, labels: Sequence[str] | None = None) -> dict[str, Path]:
    """The compare notebook over run folders (the first is the baseline): compare.ipynb, compare.html, compare.md."""
    frame = runs.load_runs(run_dirs, labels)  # bad folders or labels fail here, before the notebook
    out.mkdir(parents=True, exist_ok=True)
    executed = execute(
        "compare",
        out,
        {"RUN_DIRS": [str(Path(d).resolve()) for d in run_dirs], "LABELS": None if labels is None else list(labels)},
    )
    notebook = nbformat.read(executed, as_version=4)
    (out / "compare.html").write_text(html_report(notebook), encoding="utf-8")
    images = save_images(compare_images(frame, notebook), out)
    (out / "compare.md").write_text(compare.compare_markdown(frame, images), encoding="utf-8")
    return {name: out / name for name in ("compare.html", "compare.md", executed.name)}


def write_reconcile(run_dirs: Sequence[Path], out: Path, labels: Sequence[str] | None = None) -> dict[str, Path]:
    """The reconciliation notebook over run folders holding rate steps (the first is the reference):
    reconcile.ipynb, reconcile.html, reconcile.md."""
    sweeps = rate_runs.load_rate_sweeps(run_dirs, labels)  # bad folders fail here, before the notebook
    if missing := [str(d) for d in run_dirs if not rate_runs.has_rates(d)]:
        raise ParamsError(f"reconcile: {', '.join(missing)} holds no rate steps (no rates/ folder)")
    out.mkdir(parents=True, exist_ok=True)
    parameters = {
        "RUN_DIRS": [str(Path(d).resolve()) for d in run_dirs],
        "LABELS": None if labels is None else list(labels),
    }
    executed = execute("reconcile", out, parameters)
    (out / "reconcile.html").write_text(html_report(nbformat.read(executed, as_version=4)), encoding="utf-8")
    (out / "reconcile.md").write_text(reconcile.reconciliation_markdown(sweeps), encoding="utf-8")
    return {name: out / name for name in ("reconcile.html", "reconcile.md", executed.name)}


def run_notebooks(
    params: RunParams, out_dir: Path, *, resume: bool = False, plan: Plan | None = None
) -> dict[str, Path]:
    """Prefill notebook, then the decode matrix notebook, into one results folder, then the rate sweep notebook
    when the params have a `rate_sweep:` block (`resume`: the sweep there continued); then the reports. Each cell
    within its bound, from `plan` (the matrix's cells) and the sweep's steps (toolkit.jupyter.watchdog)."""
    parameters = notebook_parameters(params, out_dir)
    bounds = run_bounds(params, plan, sweep_of(params, out_dir))
    for notebook in ("prefill", "decode_matrix"):
        execute(notebook, out_dir, parameters_for(notebook, parameters), bounds)
    if params.rate_sweep is not None:
        execute("rate_sweep", out_dir, run_sweep_parameters(params, out_dir, resume=resume), bounds)
    if params.capacity is not None:  # the report's capacity plan reads its target from run.json
        document = RunDocument.load(out_dir)
        document.capacity = params.capacity.model_dump()
        document.save(out_dir)
    paths = write_reports(out_dir)
    RunDocument.load(out_dir)  # fail loudly if the run left no run.json
    return paths
