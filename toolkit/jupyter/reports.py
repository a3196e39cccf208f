"""The reports over results folders: each executes its notebook (toolkit.jupyter.execute), converts it to HTML
(toolkit.jupyter.convert) and writes its markdown from our tables with the figures the notebook drew
(toolkit.jupyter.figures, taken once per notebook): report.*, compare.*, reconcile.*.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd

from toolkit.base.api_keys import ApiKey
from toolkit.base.errors import ParamsError
from toolkit.jupyter.convert import html_report
from toolkit.jupyter.execute import execute, parameters_for
from toolkit.jupyter.figures import drawn_images, first_drawn, save_images
from toolkit.reports import breakdown_views, capacity_views, compare, rate_tables, reconcile, workload_views
from toolkit.reports import tables as report_tables
from toolkit.reports.class_compare import images_line, rates_markdown
from toolkit.results import rate_runs, runs
from toolkit.results.store import RUN_FILE

WORKLOAD_FIGURES = ("rate-turns",)  # report.ipynb's figures of the workload section
BREAKDOWN_FIGURES = ("rate-breakdown",)  # and of where the time goes


def markdown_report(
    results_dir: Path, executed: nbformat.NotebookNode, loaded: tuple[pd.DataFrame, dict[str, Any]] | None = None
) -> str:
    """report.md with the figures the report notebook drew as PNG files beside it; tables from the same code as
    the HTML. `loaded`: the folder's run as read already (runs.load_run); None: read here."""
    frame, run_info = loaded if loaded is not None else runs.load_run(results_dir)
    drawn = drawn_images(executed)
    matrix = first_drawn(drawn, frame, {"prefill": "prefill", "decode": "decode", "scaling": "decode"})
    rates = rate_runs.has_rates(results_dir)
    swept = {key: pngs[0] for key, pngs in drawn.items() if rates and key.startswith("rate-") and pngs}
    saved = save_images(matrix | swept, results_dir)  # every figure of the report, written once
    report = report_tables.report_markdown(frame, run_info, images={key: saved[key] for key in matrix})
    if not rates:
        return report
    sweep = rate_runs.load_rate_sweep(results_dir)
    turns = {key: saved[key] for key in WORKLOAD_FIGURES if key in swept}
    split = {key: saved[key] for key in BREAKDOWN_FIGURES if key in swept}
    section = rate_tables.rate_markdown(
        sweep.steps,
        sweep.level,
        sweep.search,
        sweep.sweep.search_precision,
        images={key: saved[key] for key in swept if key not in turns and key not in split},
        classes=sweep.sweep.classes,
        carried=images_line(sweep.sweep),
    )
    breakdown = breakdown_views.breakdown_markdown(sweep.steps, split)
    workload = workload_views.workload_markdown(sweep.steps, sweep.records, sweep.controls, turns)
    for part in (breakdown, workload):
        section = section.rstrip("\n") + ("\n\n" + part if part else "")
    target = capacity_views.target_from(run_info)
    plan = "" if target is None else "\n\n" + capacity_views.capacity_markdown(sweep, target)
    return report.rstrip("\n") + "\n\n" + section.rstrip("\n") + plan


def compare_images(frame: pd.DataFrame, executed: nbformat.NotebookNode) -> dict[str, bytes]:
    """The compare notebook's figures keyed as :func:`toolkit.reports.compare.compare_markdown` expects."""
    drawn = drawn_images(executed)
    return first_drawn(drawn, frame, {"prefill": "prefill", "tradeoff": None}) | {
        compare.ratio_key(position): png for position, png in enumerate(drawn.get("ratios", []), 2)
    }


def write_reports(results_dir: Path, api_key: ApiKey | None = None) -> dict[str, Path]:
    """Execute the report notebook over a results folder; write report.html, report.md, results.csv. `api_key`:
    the run's, redacted at the notebook's exits (toolkit.jupyter.execute)."""
    loaded = runs.load_run(results_dir)  # read once: the report notebook writes nothing that it holds
    loaded[0].to_csv(results_dir / "results.csv", index=False)
    parameters = parameters_for("report", {"RESULTS_DIR": str(results_dir.resolve())})
    notebook = nbformat.read(execute("report", results_dir, parameters, api_key=api_key), as_version=4)
    (results_dir / "report.html").write_text(html_report(notebook), encoding="utf-8")
    (results_dir / "report.md").write_text(markdown_report(results_dir, notebook, loaded), encoding="utf-8")
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
    sweeps = rate_runs.load_rate_sweeps(run_dirs, labels)
    text = compare.compare_markdown(frame, images)
    (out / "compare.md").write_text(text + ("\n" + rates if (rates := rates_markdown(sweeps)) else ""),
                                    encoding="utf-8")  # fmt: skip
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
