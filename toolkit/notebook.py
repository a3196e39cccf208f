"""What the notebooks call: one function per cell, each doing one toolkit call and one display."""

from __future__ import annotations

import html
import io
from pathlib import Path
from typing import Any

import pandas as pd
from IPython.display import HTML, Image, display
from matplotlib.figure import Figure

from toolkit import compare, compare_plots, plots, report_tables, runs
from toolkit.params import RunParams, make_params
from toolkit.runner import run_matrix
from toolkit.store import RESULTS_FILE, to_dataframe

# Notebook parameter (UPPER_CASE) -> RunParams field.
_PARAMETER_NAMES = {name.upper(): name for name in RunParams.model_fields}


def params_from(namespace: dict[str, Any]) -> RunParams:
    """RunParams from the notebook's UPPER_CASE parameters (None means: use the default)."""
    values = {field: namespace[name] for name, field in _PARAMETER_NAMES.items() if namespace.get(name) is not None}
    return make_params(values)


def measure(params: RunParams, results_dir: str | Path, phases: list[str]) -> pd.DataFrame:
    """Run the phases into the shared results folder (continuing it) and show what was measured."""
    measurements = run_matrix(params, results_dir, phases=phases, attach=True)
    frame = to_dataframe([m for m in measurements if m.phase in phases])
    display(HTML(f"<p>{len(frame)} measurements in <code>{Path(results_dir) / RESULTS_FILE}</code></p>"))
    return frame


def load_results(results_dir: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The latest record of every measurement of a run (measured or imported), and its run.json."""
    return runs.load_run(results_dir)


def figure_png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def show_figure(fig: Figure) -> None:
    display(Image(data=figure_png(fig)))


def show_header(frame: pd.DataFrame, run_info: dict[str, Any]) -> None:
    fragments = report_tables.report_html_fragments(frame, run_info)
    display(HTML(fragments["style"] + fragments["header"]))


def show_prefill(frame: pd.DataFrame, run_info: dict[str, Any]) -> None:
    fragments = report_tables.report_html_fragments(frame, run_info)
    if "prefill" in fragments:
        display(HTML(fragments["style"] + "<h2>Prefill</h2>" + fragments["prefill"]))
        show_figure(plots.prefill_figure(frame))


def show_decode(frame: pd.DataFrame, run_info: dict[str, Any]) -> None:
    fragments = report_tables.report_html_fragments(frame, run_info)
    if "decode" in fragments:
        display(HTML(fragments["style"] + "<h2>Sustained decode</h2>" + fragments["decode"]))
        show_figure(plots.decode_heatmaps(frame))
        show_figure(plots.scaling_figure(frame))


def show_all_measurements(frame: pd.DataFrame, run_info: dict[str, Any]) -> None:
    fragments = report_tables.report_html_fragments(frame, run_info)
    html = fragments["style"] + "<h2>All measurements</h2>" + fragments.get("all_measurements", "")
    if "extras" in fragments:
        html += "<h2>Extras</h2>" + fragments["extras"]
    display(HTML(html))


# ---- the compare notebook ------------------------------------------------------------------------


def _html(body: str) -> None:
    display(HTML(report_tables.HTML_STYLE + body))


def load_runs(run_dirs: list[str], labels: list[str] | None = None) -> pd.DataFrame:
    """Load the runs to compare (the first is the baseline) and show which they are."""
    frame = runs.load_runs(run_dirs, labels)
    _html(f"<h1>{compare.COMPARE_TITLE}</h1>" + report_tables.html_table(compare.runs_table(frame)))
    return frame


def show_prefill_comparison(frame: pd.DataFrame) -> None:
    """Prefill of every run side by side: table and curves."""
    if not (frame["phase"] == "prefill").any():
        _html("<h2>Prefill</h2><p>No prefill measurements.</p>")
        return
    table = report_tables.html_table(compare.prefill_display(frame), caption=compare.PREFILL_CAPTION)
    _html("<h2>Prefill</h2>" + table)
    show_figure(compare_plots.prefill_comparison(frame))


def show_ratio_heatmaps(frame: pd.DataFrame) -> None:
    """B / A heatmaps of every later run against the first, each with its table of ratios."""
    labels = compare.run_labels(frame)
    for other in labels[1:]:
        _html(f"<h2>{html.escape(other)} vs {html.escape(labels[0])}</h2><p>{compare.RATIO_CAPTION}</p>")
        show_figure(compare_plots.ratio_heatmaps(frame, labels[0], other))
        table = compare.ratio_display(compare.ratio_table(frame, labels[0], other))
        _html("<details><summary>Ratios per cell</summary>"
              + report_tables.html_table(table, status_columns=["Status"]) + "</details>")  # fmt: skip


def show_tradeoff(frame: pd.DataFrame) -> None:
    """Per-request against total tok/s with each run's Pareto frontier, and the frontier cells."""
    _html(f"<h2>Trade-off</h2><p>{compare.TRADEOFF_CAPTION}</p>")
    show_figure(compare_plots.tradeoff_figure(frame))
    _html(report_tables.html_table(compare.frontier_display(frame), status_columns=["Status"]))


def show_status_differences(frame: pd.DataFrame) -> None:
    """Cells whose status differs between runs."""
    table = compare.status_display(compare.status_differences(frame))
    body = (report_tables.html_table(table, caption=compare.STATUS_CAPTION, status_columns=table.columns[3:])
            if len(table) else "<p>Every cell has the same status in every run.</p>")  # fmt: skip
    _html("<h2>Status differences</h2>" + body)
