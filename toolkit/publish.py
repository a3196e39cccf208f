"""Batch runs and reports: papermill executes the notebooks, nbconvert and our tables write the reports."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nbformat
import papermill
from nbconvert import HTMLExporter
from traitlets.config import Config

from toolkit import plots, report_tables
from toolkit.kernels import SameSessionKernelManager
from toolkit.params import RunParams
from toolkit.runs import load_run
from toolkit.secrets import api_key_from_env, redact
from toolkit.store import RUN_FILE, read_json

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TEMPLATES = Path(__file__).resolve().parent / "templates"
NOTEBOOK_ONLY = "notebook-only"  # cell tag: explanation and exploration shown in Jupyter, left out of the reports


def new_run_dir(outputs: str | Path, run_label: str) -> Path:
    """outputs/<run_label>/<UTC timestamp>/ (papermill does not make folders)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = Path(outputs) / run_label / stamp
    path.mkdir(parents=True, exist_ok=False)
    return path


def notebook_parameters(params: RunParams, results_dir: Path) -> dict[str, Any]:
    """The notebooks' UPPER_CASE parameters (plain values; never the API key)."""
    values = params.model_dump()
    if values.get("launch_command"):  # papermill records parameters in the executed notebooks
        values["launch_command"] = redact(values["launch_command"], api_key_from_env(params.api_key_env))
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


def execute(notebook: str, out_dir: Path, parameters: dict[str, Any]) -> Path:
    """Execute notebooks/<notebook>.ipynb with papermill into out_dir; the executed copy is kept on failure."""
    output = out_dir / f"{notebook}.ipynb"
    execute_path(NOTEBOOKS / f"{notebook}.ipynb", output, parameters)
    return output


def execute_path(source: Path, output: Path, parameters: dict[str, Any]) -> None:
    """papermill with a kernel in this process's session (toolkit.kernels: no autogroup of its own)."""
    os.environ["TOOLKIT_PROGRESS"] = "text"  # the kernels inherit it: no progress widget in a report
    papermill.execute_notebook(
        str(source), str(output), parameters=parameters, kernel_name="python3", cwd=str(NOTEBOOKS),
        progress_bar=False, stdout_file=sys.stdout, stderr_file=sys.stderr,
        kernel_manager_class=SameSessionKernelManager,
    )  # fmt: skip


def html_report(executed: Path) -> str:
    """A self-contained HTML page of an executed notebook: no code, images embedded, no external assets.

    Cells tagged `notebook-only` (how to read and re-analyse, in Jupyter) are left out.
    """
    config = Config()
    config.TagRemovePreprocessor.remove_input_tags = {"remove-input"}
    config.TagRemovePreprocessor.remove_cell_tags = {NOTEBOOK_ONLY}
    config.TagRemovePreprocessor.enabled = True
    exporter = HTMLExporter(config=config, template_name="offline", extra_template_basedirs=[str(TEMPLATES)],
                            exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True,
                            embed_images=True)  # fmt: skip
    body, _ = exporter.from_notebook_node(nbformat.read(executed, as_version=4))
    return body


def markdown_report(results_dir: Path) -> str:
    """report.md with its figures as PNG files beside it; tables from the same code as the HTML."""
    frame, run_info = load_run(results_dir)
    images: dict[str, str] = {}
    figures = {"prefill": plots.prefill_figure, "decode": plots.decode_heatmaps, "scaling": plots.scaling_figure}
    for key, make in figures.items():
        has_rows = (frame["phase"] == ("prefill" if key == "prefill" else "decode")).any()
        if has_rows:
            (results_dir / f"{key}.png").write_bytes(plots.figure_png(make(frame)))
            images[key] = f"{key}.png"
    return report_tables.report_markdown(frame, run_info, images=images)


def write_reports(results_dir: Path) -> dict[str, Path]:
    """Execute the report notebook over a results folder; write report.html, report.md, results.csv."""
    frame, _ = load_run(results_dir)
    frame.to_csv(results_dir / "results.csv", index=False)
    executed = execute("report", results_dir, parameters_for("report", {"RESULTS_DIR": str(results_dir.resolve())}))
    (results_dir / "report.html").write_text(html_report(executed), encoding="utf-8")
    (results_dir / "report.md").write_text(markdown_report(results_dir), encoding="utf-8")
    return {name: results_dir / name for name in ("report.html", "report.md", "results.csv", RUN_FILE)}


def write_compare(run_dirs: Sequence[Path], out: Path, labels: Sequence[str] | None = None) -> dict[str, Path]:
    """The compare notebook over run folders (the first is the baseline): compare.ipynb, compare.html, compare.md."""
    from toolkit import compare, compare_plots, runs

    frame = runs.load_runs(run_dirs, labels)  # bad folders or labels fail here, before the notebook
    out.mkdir(parents=True, exist_ok=True)
    executed = execute("compare", out, {"RUN_DIRS": [str(Path(d).resolve()) for d in run_dirs],
                                        "LABELS": None if labels is None else list(labels)})  # fmt: skip
    (out / "compare.html").write_text(html_report(executed), encoding="utf-8")
    images: dict[str, str] = {}
    for key, figure in compare_plots.comparison_figures(frame).items():
        (out / f"{key}.png").write_bytes(plots.figure_png(figure))
        images[key] = f"{key}.png"
    (out / "compare.md").write_text(compare.compare_markdown(frame, images), encoding="utf-8")
    return {name: out / name for name in ("compare.html", "compare.md", executed.name)}


def run_notebooks(params: RunParams, out_dir: Path) -> dict[str, Path]:
    """Prefill notebook, then the decode matrix notebook, into one results folder; then the reports."""
    parameters = notebook_parameters(params, out_dir)
    for notebook in ("prefill", "decode_matrix"):
        execute(notebook, out_dir, parameters_for(notebook, parameters))
    paths = write_reports(out_dir)
    read_json(out_dir / RUN_FILE)  # fail loudly if the run left no run.json
    return paths
