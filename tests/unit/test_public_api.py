"""The public API the notebooks use, pinned (as httpx's tests/test_exported_members.py pins its own).

Each module a notebook imports declares `__all__`; this file lists those names. A name that goes missing, or a
public name a module adds without declaring it, fails here; so does a notebook that uses an undeclared name.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))

EXPORTED: dict[str, list[str]] = {
    "toolkit.jupyter.notebook": ["measure", "params_from"],
    "toolkit.matrix.traces": [
        "COLUMNS", "CellTrace", "TRACES_DIR", "load_trace", "token_increments", "trace_frame", "trace_path",
        "write_trace",
    ],
    "toolkit.method.contexts": [
        "DEFAULT_DECODE_CANDIDATES", "DEFAULT_EMBEDDING_LENGTHS", "K", "MARGIN", "check_contexts", "decode_contexts",
        "embedding_lengths", "format_context",
        "largest_decode_context", "parse_context", "parse_contexts", "prefill_only_context",
    ],
    "toolkit.reports.compare": [
        "CELL_COLUMNS", "COMPARE_TITLE", "KEY", "MACHINE_COLUMN", "NOT_SIGNIFICANT", "PREFILL_CAPTION", "RATIO_CAPTION",
        "RATIO_QUANTITIES", "STATUS_CAPTION", "TRADEOFF_CAPTION", "compare_markdown", "format_ratio",
        "frontier_display", "overall_ratios", "overall_text", "pareto_frontier", "pareto_mask", "prefill_display",
        "prefill_side_by_side",
        "ratio_display", "ratio_key", "ratio_table", "run_labels", "runs_table", "status_differences",
        "status_display", "tradeoff_points",
    ],
    "toolkit.reports.gate_view": ["gate_folders", "gate_pair", "interleave_command", "round_frames"],
    "toolkit.reports.compare_plots": ["MIN_RATIO_SPAN", "prefill_comparison", "ratio_heatmaps", "tradeoff_figure"],
    "toolkit.reports.plots": [
        "ERROR_LABEL", "HEATMAP_METRICS", "LOG_SCALE_RATIO", "MARKED_NOTE", "METRIC_TITLES", "OVER_LABEL",
        "QUEUED_MARK", "WIDE_MARK", "WIDE_SPREAD_PCT", "decode_heatmaps", "log_if_wide", "metric_title",
        "note_figure", "prefill_figure", "scaling_figure", "wide_spread",
    ],
    "toolkit.reports.capacity_views": [
        "capacity_classes", "capacity_markdown", "capacity_plan", "capacity_section", "capacity_table",
        "class_brackets", "target_from",
    ],
    "toolkit.reports.reconcile": [
        "BATCHES", "NO_MATCH", "QUANTITIES", "SAME_RATE", "ratio_figure", "reconciliation", "reconciliation_markdown",
        "reconciliation_text", "sources_text", "step_intervals", "throughput_interval",
    ],
    "toolkit.reports.service_level": ["COLUMNS", "highest_concurrency", "limits_text", "meets"],
    "toolkit.reports.views": [
        "all_measurements", "decode_matrix", "embeddings", "extras", "frontier", "header", "notes", "pair_heading",
        "prefill", "prefill_comparison", "ratios", "runs", "service_levels", "status_differences", "table",
    ],
    "toolkit.results.runs": [
        "RESULTS_CSV", "RUN_COLUMN", "RUN_DRIFT", "default_label", "load_run", "load_runs", "run_control_fit",
        "unique_labels",
    ],
    "toolkit.jupyter.rate_notebook": [
        "OUTPUTS", "RATE_PARAMETERS", "check_rate_sweep", "new_results_dir", "rate_arguments",
        "run_sweep_parameters", "should_measure", "sweep_of",
    ],
    "toolkit.reports.rate_plots": [
        "LAG_LABEL", "X_AXES", "compare_figure", "goodput_figure", "knee_figure", "queue_figure",
    ],
    "toolkit.reports.rate_tables": [
        "CLASSES_CAPTION", "HITS_COLUMN", "LAG_MARK", "LAG_NOTE", "REJUDGED_COLUMNS", "SEARCHED_MARK", "SHARE_COLUMNS",
        "STEPS_CAPTION", "STEP_COLUMNS", "binding_text", "classes_table", "correlated_text", "endpoint_share_line",
        "format_rate", "level_line", "level_text", "rate_markdown", "rejudge", "rejudge_level", "search_line",
        "step_notes", "steps_table", "too_few_text", "verdict_mark",
    ],
    "toolkit.reports.rate_views": [
        "BREAKDOWN_ID", "HEADING", "RejudgePanel", "SLIDERS_ELSEWHERE", "breakdown", "class_comparison",
        "comparison_heading", "heading", "rejudge_panel", "rejudged", "steps", "summary", "turns", "verdict",
        "workload",
    ],
    "toolkit.reports.breakdown_views": [
        "BASIS_TEXT", "CAPTION", "HEADING", "HISTOGRAM_MARK", "REQUEST_COLUMNS", "SHOWN_COLUMNS", "SPLIT_COLUMNS",
        "WIRE_CLIPPED", "breakdown_figure", "breakdown_markdown", "breakdown_shown", "breakdown_table",
        "has_breakdown", "mismatch_line", "request_breakdown",
    ],
    "toolkit.reports.workload_views": [
        "CACHE_CAPTION", "CACHE_COLUMNS", "EXTERNAL_COLUMN", "HEADING", "SHARE_COLUMNS", "TURN_COLUMNS", "cache_shown",
        "cache_table", "cached_figure", "has_workload", "turn_figure", "turn_table", "workload_markdown",
    ],
    "toolkit.results.rate_runs": [
        "DEFAULT_TARGET", "RATES_DIR", "RateSweep", "RateSweepError", "STEPS_FILE", "STEP_FLAGS", "STEP_NUMBERS",
        "SWEEP_FILE", "has_rates", "load_rate_sweep", "load_rate_sweeps", "service_level", "step_file",
    ],
    "toolkit.rates.params": [
        "DEFAULT_DURATION_S", "FROM_THE_RUN", "Lengths", "MAX_TOKENS", "RateParams", "SWEEP_BLOCK",
        "load_rate_params", "make_rate_params", "parse_lengths", "parse_rates", "rate_text", "run_sweep_values",
    ],
    "toolkit.rates.runner": [
        "Say", "default_out", "rates_run_info", "run_rates",
    ],
}  # fmt: skip


def defined_public_names(module: ModuleType) -> set[str]:
    """Names a module's own top-level statements bind (defs, classes, assignments), without a leading `_`."""
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_") and name != "__all__"}


@pytest.mark.parametrize("name", list(EXPORTED))
def test_exported_members(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(getattr(module, "__all__", []))
    assert sorted(exported) == EXPORTED[name], "changed: update EXPORTED with the notebooks in mind"
    assert len(set(exported)) == len(exported)
    assert [member for member in exported if not hasattr(module, member)] == []
    assert sorted(defined_public_names(module) - set(exported)) == [], "public but not in __all__: name it _private"


def code_cells(path: Path) -> str:
    """The notebook's code cells as one Python source, IPython magics and shell lines left out."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    sources = ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    return "\n".join(line for src in sources for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))


def toolkit_names_used(source: str) -> set[tuple[str, str]]:
    """(module, name) for each toolkit name the source imports, or reads as an attribute of a toolkit module."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> toolkit module
    used: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname: a.name for a in node.names if a.name.startswith("toolkit.") and a.asname}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("toolkit"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                try:
                    importlib.import_module(full)
                    modules[alias.asname or alias.name] = full  # a submodule: its attributes are what is used
                except ModuleNotFoundError:
                    used.add((str(node.module), alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            used.add((modules[node.value.id], node.attr))
    return used


def test_the_notebooks_are_found_and_use_the_toolkit() -> None:
    assert len(NOTEBOOKS) >= 5
    used = {pair for path in NOTEBOOKS for pair in toolkit_names_used(code_cells(path))}
    assert ("toolkit.reports.views", "decode_matrix") in used and ("toolkit.jupyter.notebook", "measure") in used


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_name_a_notebook_uses_is_declared(path: Path) -> None:
    used = toolkit_names_used(code_cells(path))
    assert used, path
    undeclared = [(module, name) for module, name in sorted(used) if name not in EXPORTED.get(module, [])]
    assert undeclared == [], "a notebook uses a name outside the pinned API"


# `python -m toolkit --help`, then which heavy libraries it imported.
HELP_IMPORTS = """
import runpy, sys
sys.argv = ["toolkit", "--help"]
try:
    runpy.run_module("toolkit", run_name="__main__")
except SystemExit:
    pass
print(sorted(m for m in ("matplotlib", "pandas", "seaborn", "papermill") if m in sys.modules))
"""


@pytest.mark.process
def test_the_command_line_starts_without_matplotlib_or_pandas() -> None:
    done = subprocess.run([sys.executable, "-c", HELP_IMPORTS], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
