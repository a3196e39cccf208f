"""What the notebooks call: one function per cell, each doing one toolkit call and one display."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pandas as pd
from IPython.display import HTML, Image, display
from matplotlib.figure import Figure

from toolkit import plots, report_tables
from toolkit.params import RunParams, make_params
from toolkit.runner import run_matrix
from toolkit.store import RESULTS_FILE, RUN_FILE, latest_by_key, load_measurements, read_json, to_dataframe

# Notebook parameter (UPPER_CASE) -> RunParams field.
_PARAMETER_NAMES = {
    "BASE_URL": "base_url", "MODEL": "model", "CONTEXTS": "contexts", "PREFILL_ONLY_CONTEXTS": "prefill_only_contexts",
    "CONCURRENCY": "concurrency", "DURATION_S": "duration_s", "MAX_OUTPUT": "max_output", "ENDPOINT": "endpoint",
    "RUN_LABEL": "run_label", "API_KEY_ENV": "api_key_env", "MAX_MODEL_LEN": "max_model_len",
    "KV_BUDGET_TOKENS": "kv_budget_tokens", "READINESS_TIMEOUT_S": "readiness_timeout_s", "TITLE": "title",
    "HARDWARE_TYPE": "hardware_type", "GPU": "gpu", "GPU_COUNT": "gpu_count", "VRAM": "vram",
    "QUANTIZATION": "quantization", "BACKEND": "backend", "BUILD": "build", "REVISION": "revision",
    "LAUNCH_COMMAND": "launch_command", "PER_STREAM_PROMPTS": "per_stream_prompts",
}  # fmt: skip


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
    """The latest record of every measurement of a run, and its run.json."""
    directory = Path(results_dir)
    measurements = list(latest_by_key(load_measurements(directory / RESULTS_FILE)).values())
    if not measurements and (directory / "results.csv").exists():  # an imported report
        frame = pd.read_csv(directory / "results.csv")
    else:
        frame = to_dataframe(measurements)
    return frame, read_json(directory / RUN_FILE)


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
