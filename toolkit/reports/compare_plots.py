"""Figures comparing runs of one combined DataFrame: prefill side by side, B / A heatmaps, trade-off.

Built with :class:`matplotlib.figure.Figure` directly (no pyplot state); returned, never saved or shown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, NullFormatter

from toolkit.method.disturbed import DISTURBED_MARK
from toolkit.reports import compare
from toolkit.reports.figure_style import annotated_heatmap, despine, palette
from toolkit.reports.number_format import format_tok_s
from toolkit.reports.plots import ERROR_LABEL, LOG_SCALE_RATIO, OVER_LABEL, QUEUED_MARK, note_figure
from toolkit.reports.tables import QUANTITY_TITLES

__all__ = ["MIN_RATIO_SPAN", "prefill_comparison", "ratio_heatmaps", "tradeoff_figure"]

MIN_RATIO_SPAN = 1.5  # the colour scale reaches at least ×1.5 and ÷1.5, so small differences stay pale


def _plain(text: str) -> str:
    """A run's label as matplotlib shows it, literally: a `$` would start mathtext (`$\\x$` raised)."""
    return text.replace("$", r"\$")


def _colors(labels: Sequence[str]) -> dict[str, str]:
    """One colour per run, the same in every figure."""
    return dict(zip(labels, palette(len(labels)), strict=True))


def _log_if_wide(ax: Axes, values: Sequence[float], axis: str, log_scale: bool | None = None) -> None:
    """A log axis when asked (``log_scale``), or (None) when the positive values span LOG_SCALE_RATIO."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if log_scale is None:
        log_scale = bool(positive) and max(positive) / min(positive) >= LOG_SCALE_RATIO
    if log_scale:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


def prefill_comparison(frame: pd.DataFrame, *, log_scale: bool | None = None) -> Figure:
    """Prompt tok/s and cold TTFT by context length (evenly spaced, by tokens), one line per run.

    The y axes go logarithmic when the values span 20× (``log_scale`` None) or as ``log_scale`` says.
    """
    side = compare.prefill_side_by_side(frame)
    if side.empty:
        return note_figure("No prefill measurements")
    labels = compare.run_labels(frame)
    colors = _colors(labels)
    positions = np.arange(len(side), dtype=float)
    panels = (
        ("total_tok_s", "Prompt tok/s", lambda v: format_tok_s(v, trim_zero=True)),
        ("ttft_ms", "TTFT (ms, cold)", lambda v: f"{v:,.0f}"),
    )
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    for ax, (quantity, title, fmt) in zip(fig.subplots(1, 2), panels, strict=True):
        shown: list[float] = []
        for label in labels:
            values = pd.to_numeric(side[(label, quantity)], errors="coerce").to_numpy(dtype=float)
            present = np.isfinite(values)
            ax.plot(positions[present], values[present], marker="o", color=colors[label], label=_plain(label))
            shown += values[present].tolist()
        ax.set_xticks(positions, side.index.get_level_values("context").tolist())
        _log_if_wide(ax, shown, "y", log_scale)
        if ax.get_yscale() == "linear":
            ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _, fmt=fmt: fmt(v)))
        ax.set_title(title)
        ax.set_xlabel("Context length")
        ax.grid(True, alpha=0.3)
        despine(ax)
    handles, names = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=min(len(labels), 3), fontsize=8)
    fig.suptitle("Prefill by context length")
    return fig


def _cell_text(
    ratio: float, status_a: object, status_b: object, disturbed: bool = False, not_significant: bool = False
) -> str:
    if disturbed:  # no ratio of a number a pause made: say so
        return DISTURBED_MARK
    if math.isfinite(ratio):
        queued = "Requests queued" in (status_a, status_b)
        marks = [QUEUED_MARK] * queued + [compare.NOT_SIGNIFICANT] * not_significant
        return " ".join([compare.format_ratio(ratio), *marks])
    if "Over capacity" in (status_a, status_b):
        return OVER_LABEL
    return ERROR_LABEL if "Error" in (status_a, status_b) else ""


def _ratio_heatmap(
    ax: Axes, table: pd.DataFrame, quantity: str, title: str, cmap: str, contexts: pd.Series, levels: list[int]
) -> None:
    ratios = table.pivot(index="context_tokens", columns="concurrency", values=f"{quantity}_ratio")
    ratios = ratios.reindex(index=contexts.index, columns=levels).astype(float)
    texts = pd.DataFrame("", index=contexts.index, columns=levels, dtype=object)
    neutral = pd.DataFrame(False, index=contexts.index, columns=levels)
    for row in table.to_dict("records"):
        disturbed = bool(row["disturbed_a"] or row["disturbed_b"])
        not_significant = row.get(f"{quantity}_significant") is False
        text = _cell_text(float(row[f"{quantity}_ratio"]), row["status_a"], row["status_b"], disturbed, not_significant)
        texts.loc[row["context_tokens"], row["concurrency"]] = text
        neutral.loc[row["context_tokens"], row["concurrency"]] = not_significant
    logs = pd.DataFrame(np.log2(ratios.where(ratios > 0))).mask(neutral & ratios.gt(0), 0.0)  # n.s.: the centre colour
    annotations = texts.where(np.isfinite(logs), "")  # only the coloured cells are labelled
    finite = logs.to_numpy()[np.isfinite(logs.to_numpy())]
    span = max(float(np.abs(finite).max()) if finite.size else 0.0, math.log2(MIN_RATIO_SPAN))
    mesh = annotated_heatmap(ax, logs.to_numpy(dtype=float), annotations.to_numpy(), cmap=cmap,
                             norm=Normalize(-span, span), xticklabels=levels, yticklabels=contexts.tolist(),
                             colorbar={"shrink": 0.8, "label": "B / A"})  # fmt: skip
    colorbar = mesh.colorbar
    if colorbar is not None:  # colours are log2(B / A); label them as plain ratios
        colorbar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: compare.format_ratio(2.0**v)))
        colorbar.ax.yaxis.set_minor_formatter(NullFormatter())
    for (i, j), text in np.ndenumerate(texts.to_numpy()):
        if text in (OVER_LABEL, ERROR_LABEL, DISTURBED_MARK):  # in both runs, but no ratio: say why, as plots.py does
            hatch = "\\\\\\" if text == DISTURBED_MARK else "///"
            ax.add_patch(Rectangle((j, i), 1, 1, facecolor="0.9", edgecolor="0.7", hatch=hatch, lw=0))
            ax.text(
                j + 0.5,
                i + 0.5,
                text,
                ha="center",
                va="center",
                fontsize=7 if text == DISTURBED_MARK else 8,
                color="0.3",
            )
    ax.tick_params(axis="y", labelrotation=0)
    ax.set_title(title)
    ax.set_xlabel("Simultaneous requests")
    ax.set_ylabel("Context length")


def ratio_heatmaps(
    frame: pd.DataFrame, baseline: str, other: str, quantities: Sequence[str] = tuple(compare.RATIO_QUANTITIES)
) -> Figure:
    """B / A per decode cell, one panel per quantity (default total tok/s, per-request tok/s, TTFT).

    Diverging colours centred on 1, blue is better (for quantities in ms: lower). Rows and columns are
    the union of both runs' decode cells; cells missing in either run are blank, cells over capacity in
    either run say "Over", cells still disturbed after their retries in either run say "disturbed". A ratio
    whose 95 % interval holds 1 (no significant difference) gets the neutral centre colour and "n.s.".
    """
    decode = frame[(frame["phase"] == "decode") & frame["run"].isin([baseline, other])]
    table = compare.ratio_table(frame, baseline, other, quantities)
    table = table[table["phase"] == "decode"]
    if table.empty:
        return note_figure(f"No decode cell measured in both {baseline} and {other}")
    contexts = decode.drop_duplicates("context_tokens").set_index("context_tokens")["context"].sort_index()
    levels = sorted(int(n) for n in decode["concurrency"].unique())
    width = max(7.0, 0.9 * len(levels) + 2.5)
    fig = Figure(figsize=(width, len(quantities) * (0.45 * len(contexts) + 1.2)), layout="constrained")
    for ax, quantity in zip(np.atleast_1d(fig.subplots(len(quantities), 1)), quantities, strict=True):
        lower_better = quantity.endswith("_ms")
        title = QUANTITY_TITLES.get(quantity, quantity) + (" (lower is better)" if lower_better else "")
        _ratio_heatmap(ax, table, quantity, title, "RdBu_r" if lower_better else "RdBu", contexts, levels)
    fig.suptitle(f"{_plain(other)} / {_plain(baseline)}\nblue is better · blank: not measured in both runs")
    return fig


def tradeoff_figure(frame: pd.DataFrame, *, log_scale: bool | None = None) -> Figure:
    """Per-request tok/s (x) against total tok/s (y): one point per decode cell, a line per run's Pareto frontier.

    Queued cells are hollow; frontier points are labelled ``context×requests``. Axes go logarithmic when
    their values span 20× (``log_scale`` None) or as ``log_scale`` says.
    """
    points = compare.tradeoff_points(frame)
    if points.empty:
        return note_figure("No sustained-decode throughput to plot")
    labels = compare.run_labels(frame)
    colors = _colors(labels)
    fig = Figure(figsize=(9, 6), layout="constrained")
    ax = fig.add_subplot()
    for label in labels:
        mine = points[points["run"] == label]
        if mine.empty:
            continue
        color = colors[label]
        queued = mine["status"] == "Requests queued"
        ax.scatter(
            mine.loc[~queued, "per_request_tok_s"], mine.loc[~queued, "total_tok_s"], s=28, color=color, alpha=0.45
        )
        ax.scatter(
            mine.loc[queued, "per_request_tok_s"],
            mine.loc[queued, "total_tok_s"],
            s=40,
            facecolors="white",
            edgecolors=[color],
        )
        frontier = compare.pareto_frontier(frame, label)
        ax.plot(frontier["per_request_tok_s"], frontier["total_tok_s"], marker="o", color=color, label=_plain(label))
        for row in frontier.to_dict("records"):
            ax.annotate(
                f"{row['context']}×{row['concurrency']}",
                (row["per_request_tok_s"], row["total_tok_s"]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
                color=color,
            )
    _log_if_wide(ax, points["per_request_tok_s"].tolist(), "x", log_scale)
    _log_if_wide(ax, points["total_tok_s"].tolist(), "y", log_scale)
    ax.set_xlabel("Per request tok/s")
    ax.set_ylabel("Total tok/s")
    ax.set_title("Trade-off: speed per request against total throughput (lines: Pareto frontier; hollow: queued)")
    ax.legend(title="Run", fontsize=8)
    ax.grid(True, alpha=0.3)
    return fig
