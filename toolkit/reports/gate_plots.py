"""The gate's view as a figure: each gated quantity's interval of candidate / baseline against its allowed band,
coloured by verdict. Built with :class:`matplotlib.figure.Figure` directly; returned, never saved or shown."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from toolkit.method.gate import Verdict
from toolkit.reports.gate_rates import quantity_text
from toolkit.reports.gate_ratios import Judged

__all__ = ["VERDICT_COLORS", "gate_figure"]

VERDICT_COLORS = {Verdict.PASS: "#2ca02c", Verdict.FAIL: "#d62728", Verdict.INCONCLUSIVE: "#ff7f0e"}


def gate_figure(judged: Sequence[Judged], title: str | None = None) -> Figure:
    """One row per quantity: the ratio and its interval (coloured by verdict), the allowed side shaded, 1.00×
    dashed. A quantity without an interval is named and says so."""
    rows = list(judged)
    figure = Figure(figsize=(7.5, 0.9 + 0.7 * max(len(rows), 1)), layout="constrained")
    axes = figure.add_subplot()
    ends = [x for j in rows if j.interval for x in (j.interval.low, j.interval.high)]
    ends += [j.bound for j in rows] + [1.0]
    low, high = min(ends), max(ends)
    pad = (high - low) * 0.08 or 0.05
    low, high = low - pad, high + pad
    for y, j in enumerate(rows):
        bad_from, bad_to = (low, j.bound) if j.quantity.higher_is_better else (j.bound, high)
        axes.fill_betweenx([y - 0.35, y + 0.35], bad_from, bad_to, color="#d62728", alpha=0.08, linewidth=0)
        axes.plot([j.bound, j.bound], [y - 0.35, y + 0.35], color="#444444", linewidth=1.2)
        if j.interval is None:
            axes.text(1.0, y, f"not measured: {j.reason}", ha="center", va="center", fontsize=8)
            continue
        color = VERDICT_COLORS[j.verdict]
        axes.plot([j.interval.low, j.interval.high], [y, y], color=color, linewidth=3, solid_capstyle="butt")
        axes.plot([j.interval.ratio], [y], "o", color=color, markersize=7)
        axes.annotate(f"{j.verdict.value} {j.interval.ratio:.3f}×", (j.interval.high, y), xytext=(6, 0),
                      textcoords="offset points", va="center", fontsize=8, color=color)  # fmt: skip
    axes.axvline(1.0, color="#888888", linestyle="--", linewidth=1)
    axes.set_yticks(range(len(rows)), [quantity_text(j.quantity) for j in rows])
    axes.set_ylim(len(rows) - 0.5, -0.5)
    axes.set_xlim(low, high)
    axes.set_xlabel("candidate / baseline (shaded: beyond the regression allowed; line: its limit)")
    if title:
        axes.set_title(title.replace("$", r"\$"))
    return figure
