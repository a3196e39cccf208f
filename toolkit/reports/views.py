"""Report and comparison pieces as objects a notebook displays: pandas Stylers for tables, HTML for text.

Nothing here displays anything; a notebook cell shows what these return (its last expression). The
tables hold the display strings of :mod:`toolkit.reports.tables` and :mod:`toolkit.reports.compare`, so the
notebooks, report.html and report.md show the same numbers; status cells carry the CSS classes
``status-valid``, ``status-queued``, ``status-over`` and ``status-error``, and a cell still disturbed after
its retries ``status-disturbed``.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd
from IPython.display import HTML, Markdown
from pandas.io.formats.style import Styler

from toolkit.reports import compare, embeddings_tables, service_level
from toolkit.reports import extras as report_extras
from toolkit.reports import tables as report_tables
from toolkit.reports.number_format import MISSING, format_ms, format_tok_s
from toolkit.results.runs import RUN_COLUMN

if TYPE_CHECKING:
    from pandas.io.formats.style_render import CSSDict

__all__ = [
    "all_measurements",
    "decode_matrix",
    "embeddings",
    "extras",
    "frontier",
    "header",
    "notes",
    "pair_heading",
    "prefill",
    "prefill_comparison",
    "ratios",
    "runs",
    "service_levels",
    "status_differences",
    "table",
]

_TABLE_CSS: list[CSSDict] = [
    {"selector": "", "props": "border-collapse: collapse; font-variant-numeric: tabular-nums;"},
    {"selector": "th, td", "props": "border: 1px solid #ddd; padding: 2px 8px; text-align: right;"},
    {"selector": "caption", "props": "caption-side: top; text-align: left; color: #555;"},
    {"selector": "td.status-queued", "props": "background: #fff4d6;"},
    {"selector": "td.status-over",
     "props": "color: #777; background: repeating-linear-gradient(45deg, #f4f4f4 0 4px, #e8e8e8 4px 8px);"},
    {"selector": "td.status-error", "props": "color: #a00000; background: #fde2e2;"},
    {"selector": "td.status-disturbed",
     "props": "color: #888; background: repeating-linear-gradient(-45deg, #fafafa 0 4px, #e4e4e4 4px 8px);"},
]  # fmt: skip


def table(frame: pd.DataFrame, *, caption: str = "", status_columns: Iterable[Any] = ()) -> Styler:
    """A table of display strings, escaped, without index; cells of ``status_columns`` get their status class."""
    wanted = set(status_columns)
    classes = pd.DataFrame(
        {c: [report_tables.status_class(str(v)) if c in wanted else "" for v in frame[c]] for c in frame.columns},
        index=frame.index,
        columns=frame.columns,
    )
    styler = frame.style.format(escape="html").format_index(escape="html", axis=1).hide(axis="index")
    styler = styler.set_td_classes(classes).set_table_styles(_TABLE_CSS).set_table_attributes('class="speed-matrix"')
    return styler.set_caption(html.escape(caption)) if caption else styler


# ---- the report of one run ------------------------------------------------------------------------


def header(frame: pd.DataFrame, run_info: Mapping[str, Any]) -> HTML:
    """Title, engine and summary lines, then the Hardware, Engine, Run and Launch command blocks."""
    return HTML(report_tables.header_html(frame, run_info, with_h1=False))


def notes(
    frame: pd.DataFrame, phase: str | None = None, *, ttft_note: bool = True, run_info: Mapping[str, Any] | None = None
) -> HTML:
    """The footnotes of the statuses (and marks) in ``frame`` (of ``phase``), the run's drift (with ``run_info``),
    then (with decode rows) the TTFT note."""
    rows = frame if phase is None else frame[frame["phase"] == phase]
    return HTML(report_tables.notes_html(report_tables.footnotes(rows, ttft_note=ttft_note, run_info=run_info)))


def prefill(frame: pd.DataFrame) -> Styler | Markdown:
    """Context, prompt tok/s and cold TTFT of every prefill measurement."""
    if not (frame["phase"] == "prefill").any():
        return Markdown("No prefill measurements.")
    return table(report_tables.prefill_table(frame), caption=report_tables.PREFILL_CAPTION)


def decode_matrix(frame: pd.DataFrame) -> Styler | Markdown:
    """The published decode matrix: total tok/s, status and TTFT per context × simultaneous requests."""
    if not (frame["phase"] == "decode").any():
        return Markdown("No sustained-decode measurements.")
    matrix = report_tables.decode_matrix(frame)
    return table(matrix.reset_index(), caption=report_tables.DECODE_CAPTION, status_columns=matrix.columns)


def embeddings(frame: pd.DataFrame) -> HTML | None:
    """An embeddings run's cells under their heading (items/s, input tok/s, end-to-end latency percentiles, the
    server's prompt tokens against the replies'); None, showing nothing, for a run without them."""
    if not embeddings_tables.has_embeddings(frame):
        return None
    cells = embeddings_tables.embeddings_table(frame)
    styled = table(cells, caption=embeddings_tables.EMBEDDINGS_CAPTION, status_columns=["Status"])
    return HTML("<h2>Embeddings</h2>" + styled.to_html())


def all_measurements(frame: pd.DataFrame) -> Styler:
    """Every measurement with the published report's columns."""
    return table(
        report_tables.all_measurements_table(frame), caption=report_tables.ALL_CAPTION, status_columns=["Status"]
    )


def extras(frame: pd.DataFrame) -> Styler | Markdown:
    """Recorded quantities beyond the published reports (rows and columns that have data)."""
    extra = report_extras.extras_table(frame)
    if extra.empty:
        return Markdown("No quantities beyond the published ones were recorded (an imported report has none).")
    return table(extra, caption="Extras")


def service_levels(
    levels: pd.DataFrame | None, ttft_ms: float | None = None, per_request_tok_s: float | None = None
) -> Styler | None:
    """A :func:`toolkit.reports.service_level.highest_concurrency` table for display; None when no limit was given."""
    if levels is None:
        return None
    shown = pd.DataFrame(
        {
            **({"Run": levels[RUN_COLUMN]} if RUN_COLUMN in levels.columns else {}),
            "Context": levels["context"],
            "Most requests at once": [MISSING if pd.isna(n) else f"{int(n):,}" for n in levels["concurrency"]],
            "Total tok/s": [format_tok_s(v) for v in levels["total_tok_s"]],
            "TTFT": [format_ms(v) for v in levels["ttft_ms"]],
            "Per request tok/s": [format_tok_s(v) for v in levels["per_request_tok_s"]],
        }
    )
    caption = (
        f"Service level {service_level.limits_text(ttft_ms, per_request_tok_s)}: the most simultaneous "
        f"requests per context whose Valid, undisturbed cell meets it ({MISSING}: none does)"
    )
    return table(shown, caption=caption)


# ---- comparisons of runs --------------------------------------------------------------------------


def runs(frame: pd.DataFrame) -> Styler:
    """One row per run: label, number of measurements, summary line."""
    return table(compare.runs_table(frame))


def prefill_comparison(frame: pd.DataFrame) -> Styler | Markdown:
    """Prefill of every run side by side."""
    if not (frame["phase"] == "prefill").any():
        return Markdown("No prefill measurements.")
    return table(compare.prefill_display(frame), caption=compare.PREFILL_CAPTION)


def ratios(frame: pd.DataFrame, baseline: str, other: str) -> Styler | Markdown:
    """B / A per cell measured in both runs, with both values; the caption gives the overall ratio."""
    ratio_table = compare.ratio_table(frame, baseline, other)
    shown = compare.ratio_display(ratio_table)
    if shown.empty:
        return Markdown("No cell was measured in both runs.")
    overall = compare.overall_text(ratio_table)
    return table(shown, caption="Ratios per cell" + (f". {overall}" if overall else ""), status_columns=["Status"])


def pair_heading(baseline: str, other: str) -> HTML:
    """``<h2>B vs A</h2>`` and the ratio caption, escaped."""
    return HTML(f"<h2>{html.escape(other)} vs {html.escape(baseline)}</h2><p>{html.escape(compare.RATIO_CAPTION)}</p>")


def frontier(frame: pd.DataFrame) -> Styler | Markdown:
    """Every run's Pareto frontier cells."""
    shown = compare.frontier_display(frame)
    if shown.empty:
        return Markdown("No decode cell ran.")
    return table(shown, caption=compare.TRADEOFF_CAPTION, status_columns=["Status"])


def status_differences(frame: pd.DataFrame) -> Styler | Markdown:
    """Cells whose status differs between runs (— : not measured in that run)."""
    shown = compare.status_display(compare.status_differences(frame))
    if shown.empty:
        return Markdown("Every cell has the same status in every run.")
    return table(shown, caption=compare.STATUS_CAPTION, status_columns=shown.columns[3:])
