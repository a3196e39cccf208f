"""A rate sweep's pieces as objects a notebook displays (HTML, Stylers), and the re-judging sliders.

Nothing here displays on its own except :class:`RejudgePanel`, whose output area redraws when a slider moves;
:func:`rejudge_panel` gives it only where a widget front end is attached (toolkit.base.front_end).
Each function given None (no sweep in the run) returns None, so a report cell shows nothing.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

import ipywidgets as widgets
import pandas as pd
from IPython.display import HTML, Markdown, display
from matplotlib.figure import Figure

from toolkit.base.front_end import widget_front_end
from toolkit.method.goodput import ServiceLevel, request_latencies
from toolkit.reports import breakdown_views, class_compare, class_tables, rate_tables, views, workload_views
from toolkit.results.rate_runs import RateSweep

__all__ = [
    "BREAKDOWN_ID", "HEADING", "SLIDERS_ELSEWHERE", "RejudgePanel", "breakdown", "class_comparison",
    "comparison_heading", "heading",
    "rejudge_panel", "rejudged", "steps", "summary", "turns", "verdict", "workload",
]  # fmt: skip
SLIDERS_ELSEWHERE = "Sliders that judge every step again appear when this cell runs in JupyterLab."

HEADING = "Open-loop rates"
BREAKDOWN_ID = "where-the-time-goes"  # the breakdown heading's id in report.html


def summary(sweep: RateSweep) -> Markdown:
    """The service level the sweep was judged against and the highest rate meeting it."""
    return Markdown(class_compare.sweep_summary(sweep))


def heading(sweep: RateSweep | None) -> HTML | None:
    """The section's heading, its service level and the highest rate meeting it; None without a sweep."""
    if sweep is None:
        return None
    return HTML(f"<h2>{HEADING}</h2><p>{html.escape(class_compare.sweep_summary(sweep))}</p>")


def steps(sweep: RateSweep | None) -> HTML | None:
    """The per-step table, then its notes (`rate_tables.step_notes`: lag-flagged steps, steps undecided by requests
    that moved together, …), then a class sweep's table of its classes or a model mix's of its models; None
    without a sweep."""
    if sweep is None:
        return None
    table = views.table(rate_tables.steps_table(sweep.steps), caption=rate_tables.STEPS_CAPTION)
    shown_notes = rate_tables.step_notes(sweep.steps, sweep.level.target)
    notes = "".join(f'<p class="footnote">{html.escape(n)}</p>' for n in shown_notes)
    classes = class_tables.classes_table(sweep.steps)  # a class sweep's steps, class by class
    shown = "" if classes is None else views.table(classes, caption=class_tables.CLASSES_CAPTION).to_html()
    if (models := class_tables.models_table(sweep.steps)) is not None:  # a model mix's steps, model by model
        shown += views.table(models, caption=class_tables.MODELS_CAPTION).to_html()
    return HTML(table.to_html() + notes + shown)


def workload(sweep: RateSweep | None) -> HTML | None:
    """Each step's prefix-cache hit rate, measured and expected, and its cached share; None without a sweep or
    when every request was cold by construction."""
    if sweep is None or not workload_views.has_workload(sweep.steps):
        return None
    shown = workload_views.cache_shown(sweep.steps, sweep.records, sweep.controls)
    table = views.table(shown, caption=workload_views.CACHE_CAPTION)
    return HTML(f"<h3>{workload_views.HEADING}</h3>" + table.to_html())


def breakdown(sweep: RateSweep | None) -> HTML | None:
    """Where the time goes: the heading, each step's split (queue, prefill, wire, decode) and the line on requests
    that broke the timing cross-check; None without a sweep or when no step has a breakdown (the server gave no
    timing, or the folder is from before it was recorded)."""
    if sweep is None or not breakdown_views.has_breakdown(sweep.steps):
        return None
    table = views.table(breakdown_views.breakdown_shown(sweep.steps), caption=breakdown_views.CAPTION)
    line = breakdown_views.mismatch_line(sweep.steps)
    note = f'<p class="footnote">{html.escape(line)}</p>' if line else ""
    return HTML(f'<h3 id="{BREAKDOWN_ID}">{breakdown_views.HEADING}</h3>' + table.to_html() + note)


def turns(sweep: RateSweep | None) -> Figure | None:
    """TTFT by conversation turn beside the cold control; None without a conversation."""
    if sweep is None or not (sweep.records["turn"] > 1).any():
        return None
    return workload_views.turn_figure(sweep.records, sweep.controls)


def comparison_heading(sweeps: Mapping[str, RateSweep]) -> HTML | None:
    """The heading and, per run, its service level and highest rate; None unless two runs hold a sweep."""
    if len(sweeps) < 2:
        return None
    items = "".join(
        f"<li><b>{html.escape(label)}</b>: {html.escape(class_compare.sweep_summary(s))}</li>"
        for label, s in sweeps.items()
    )
    return HTML(f"<h2>{HEADING}</h2><ul>{items}</ul>")


def class_comparison(sweeps: Mapping[str, RateSweep]) -> HTML | None:
    """Each traffic class's TTFT p90 run by run at the rates the runs share, with each run's scheduling policy
    (e.g. fcfs and priority); None unless two runs hold class sweeps with a class and a rate in common."""
    table = class_compare.class_ttft_comparison(sweeps, class_compare.run_policies(sweeps))
    if table is None:
        return None
    shown = views.table(table, caption=class_compare.CLASS_TTFT_CAPTION).to_html()
    return HTML(f"<h3>Traffic classes, run by run</h3>{shown}<p>{html.escape(class_compare.CLASS_BOUNDS_NOTE)}</p>")


def _limit_slider(description: str, value: float | None, observed: pd.Series) -> widgets.FloatSlider:
    finite = observed[observed.notna()]
    top = max(float(finite.max()) if len(finite) else 0.0, value or 0.0) * 1.2 or 1000.0
    step = 10 ** math.floor(math.log10(top / 200))
    return widgets.FloatSlider(
        value=value or 0.0,
        min=0.0,
        max=math.ceil(top / step) * step,
        step=step,
        description=description,
        continuous_update=False,
        style={"description_width": "initial"},
    )


class RejudgePanel:
    """Sliders for the latency limits (0: no limit) and the target; each move judges every step again from the
    per-request records, without a server. `judged` holds the latest :func:`rate_tables.rejudge` frame."""

    def __init__(self, records: pd.DataFrame, level: ServiceLevel) -> None:
        self.records = records
        latencies = request_latencies(records)
        self.sliders: dict[str, widgets.FloatSlider] = {
            "ttft_ms": _limit_slider("TTFT ≤ (ms)", level.ttft_ms, latencies["ttft_sched_ms"]),
            "tpot_ms": _limit_slider("TPOT ≤ (ms)", level.tpot_ms, latencies["tpot_ms"]),
            "e2e_ms": _limit_slider("end-to-end ≤ (ms)", level.e2e_ms, latencies["e2e_sched_ms"]),
            "target": widgets.FloatSlider(
                value=level.target, min=0.01, max=1.0, step=0.01, description="target", continuous_update=False
            ),
        }
        self.output = widgets.Output()
        self.judged = rate_tables.rejudge(records, self.level)
        for slider in self.sliders.values():
            slider.observe(self._update, names="value")
        self.widget = widgets.VBox(
            [widgets.HBox(list(self.sliders.values())[:2]), widgets.HBox(list(self.sliders.values())[2:]), self.output]
        )
        self._show()

    @property
    def level(self) -> ServiceLevel:
        """The service level the sliders set."""
        limits = {name: (self.sliders[name].value or None) for name in ("ttft_ms", "tpot_ms", "e2e_ms")}
        return ServiceLevel(**limits, target=self.sliders["target"].value)

    def _update(self, _change: Any) -> None:
        self.judged = rate_tables.rejudge(self.records, self.level)
        self._show()

    def _show(self) -> None:
        with self.output:
            self.output.clear_output(wait=True)
            display(verdict(self.judged, self.level))
            display(rejudged(self.judged))


def rejudge_panel(records: pd.DataFrame, level: ServiceLevel) -> Any:
    """:class:`RejudgePanel`'s widget where a widget front end is attached; elsewhere a line saying where the
    sliders are.

    A kernel whose output becomes a document gets no widget: under plain papermill, a cell that built the panel
    went without its execute reply, and the run waited for ever while the kernel sat idle
    (benchmarks/widget_cell_hang.py; jupyter/nbclient#312).
    """
    if widget_front_end():
        return RejudgePanel(records, level).widget
    return Markdown(SLIDERS_ELSEWHERE)


def verdict(judged: pd.DataFrame, level: ServiceLevel) -> Markdown:
    """The limits judged against and the highest rate meeting them, from a :func:`rate_tables.rejudge` frame."""
    return Markdown(f"{rate_tables.level_text(level)}: {rate_tables.search_line(judged)}")


def rejudged(judged: pd.DataFrame) -> Any:
    """A :func:`rate_tables.rejudge` frame for display: rates, goodput and the share meeting the level."""
    meeting = [f"{row['slo_fraction'] * 100:.1f}%" + rate_tables.verdict_mark(row) for row in judged.to_dict("records")]
    shown = pd.DataFrame(
        {
            "Step": [str(int(s)) for s in judged["step"]],
            "Offered req/s": [rate_tables.format_rate(r) for r in judged["offered_rate"]],
            "Completed": [str(int(c)) for c in judged["completed"]],
            "Goodput req/s": [rate_tables.format_rate(g) for g in judged["goodput"]],
            "Meeting SLO": meeting,
        }
    )
    return views.table(shown)
