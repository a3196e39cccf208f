"""Figures of a results DataFrame (one row per Measurement): prefill, decode heatmaps, scaling.

Figures are built with :class:`matplotlib.figure.Figure` directly (no pyplot state, Agg-safe);
they are returned, never shown: a notebook displays them, and the reports take their PNGs from the executed
notebook (:class:`toolkit.jupyter.figures.TaggedFigures`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from toolkit.base.schema import RAN_STATUSES
from toolkit.method.disturbed import DISTURBED_MARK, disturbed_mask
from toolkit.reports.figure_style import annotated_heatmap, despine, palette, sequential
from toolkit.reports.number_format import as_number, format_tok_s
from toolkit.reports.tables import QUANTITY_TITLES, QUANTITY_UNITS

__all__ = [
    "ERROR_LABEL",
    "HEATMAP_METRICS",
    "LOG_SCALE_RATIO",
    "MARKED_NOTE",
    "METRIC_TITLES",
    "OVER_LABEL",
    "QUEUED_MARK",
    "WIDE_MARK",
    "WIDE_SPREAD_PCT",
    "decode_heatmaps",
    "log_if_wide",
    "metric_title",
    "note_figure",
    "prefill_figure",
    "scaling_figure",
    "wide_spread",
]

OVER_LABEL = "Over"
ERROR_LABEL = "Err"
QUEUED_MARK = "Q"
WIDE_MARK = "±"
WIDE_SPREAD_PCT = 5.0  # a cell whose 95 % interval is wider than this share of its value gets WIDE_MARK
LOG_SCALE_RATIO = 20.0  # heatmap colours go logarithmic when max / min reaches this
HEATMAP_METRICS = ("total_tok_s", "per_request_tok_s", "ttft_ms")
METRIC_TITLES = {q: f"{title} ({QUANTITY_UNITS[q]})" if q in QUANTITY_UNITS else title
                 for q, title in QUANTITY_TITLES.items()}  # fmt: skip
MARKED_NOTE = "gold star: meets the service level"


def _phase(df: pd.DataFrame, phase: str) -> pd.DataFrame:
    return df[df["phase"] == phase].sort_values(["context_tokens", "concurrency"])


def log_if_wide(ax: Axes, values: Any, axis: str) -> None:
    """A logarithmic `axis` ("x" or "y") when its positive values span more than a decade: below the knee the
    steps would crowd into one corner, and one long TTFT past it would flatten every other point."""
    positive = pd.Series(np.asarray(values, dtype=float).ravel()).replace([np.inf, -np.inf], np.nan).dropna()
    positive = positive[positive > 0]
    if len(positive) > 1 and positive.max() > 10 * positive.min():
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")


def note_figure(note: str) -> Figure:
    """A small figure that only says why there is nothing to plot."""
    fig = Figure(figsize=(6, 1.5))
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, note, ha="center", va="center", fontsize=12)
    ax.set_axis_off()
    return fig


def _number(value: Any) -> float:
    number = as_number(value)
    return np.nan if number is None else number


def _ms_label(value: float) -> str:
    return f"{value:,.0f}"


def metric_title(metric: str) -> str:
    """``Total tok/s`` for ``total_tok_s``; an unnamed column keeps its name."""
    return METRIC_TITLES.get(metric, metric)


def _metric_format(metric: str) -> Callable[[float], str]:
    if metric.endswith("tok_s"):
        return format_tok_s
    if metric == "ttft_ms":
        return _ms_label
    return (lambda v: f"{v:,.1f}") if metric.endswith("_ms") else (lambda v: f"{v:,.3g}")


def _check_metric(df: pd.DataFrame, metric: str) -> None:
    if metric not in df.columns:
        raise ValueError(f"metric {metric!r} is not a results column; e.g. total_tok_s, per_request_tok_s, ttft_ms")


def prefill_figure(df: pd.DataFrame, *, log_scale: bool | None = None) -> Figure:
    """Two panels by context length: prompt tok/s of the cold request, and its TTFT in ms (log axes if asked)."""
    prefill = _phase(df, "prefill")
    if prefill.empty:
        return note_figure("No prefill measurements")
    labels = list(prefill["context"])
    speed = np.array([_number(v) for v in prefill["total_tok_s"]])
    ttft = np.array([_number(v) for v in prefill["ttft_ms"]])
    failed = [str(s) if s not in RAN_STATUSES else "" for s in prefill["status"]]
    disturbed = disturbed_mask(prefill).tolist()
    fig = Figure(figsize=(11, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    panels = (
        (axes[0], speed, "Prompt tok/s", lambda v: format_tok_s(v, trim_zero=True), 0),
        (axes[1], ttft, "TTFT (ms, cold)", _ms_label, 3),
    )
    for ax, values, title, fmt, color in panels:
        heights = np.nan_to_num(values, nan=0.0)
        colors = ["0.8" if d else palette()[color] for d in disturbed]
        bars = ax.bar(labels, heights, color=colors, hatch=["\\\\" if d else "" for d in disturbed])
        texts = [
            (fmt(v) + (f"\n{DISTURBED_MARK}" if d else "")) if np.isfinite(v) else (bad or "—")
            for v, bad, d in zip(values, failed, disturbed, strict=True)
        ]
        ax.bar_label(bars, labels=texts, padding=2, fontsize=9)
        ax.set_title(title)
        ax.set_xlabel("Context length")
        if log_scale:
            ax.set_yscale("log")
        ax.margins(y=0.15)
        despine(ax)
    fig.suptitle("Prefill by context length")
    return fig


def _grid(decode: pd.DataFrame, column: str) -> pd.DataFrame:
    """Contexts × concurrency of ``column`` (NaN for cells without a value)."""
    values = decode.assign(value=[_number(v) for v in decode[column]])
    grid = values.pivot(index="context_tokens", columns="concurrency", values="value")
    return grid.reindex(index=sorted(decode["context_tokens"].unique()), columns=sorted(decode["concurrency"].unique()))


def _flag_grid(decode: pd.DataFrame, flags: pd.Series, shape_like: pd.DataFrame) -> pd.DataFrame:
    """Contexts × concurrency of a boolean Series on ``decode``'s index (False where it has no cell)."""
    grid = decode.assign(flag=flags.reindex(decode.index, fill_value=False).astype(bool))
    grid = grid.pivot(index="context_tokens", columns="concurrency", values="flag")
    return grid.reindex(index=shape_like.index, columns=shape_like.columns).eq(True)


def _status_grid(decode: pd.DataFrame, shape_like: pd.DataFrame) -> pd.DataFrame:
    """Statuses by cell; a cell that ran but stayed disturbed after its retries says ``disturbed`` instead."""
    status = decode.pivot(index="context_tokens", columns="concurrency", values="status")
    status = status.reindex(index=shape_like.index, columns=shape_like.columns)
    disturbed = _flag_grid(decode, disturbed_mask(decode), shape_like) & status.isin(RAN_STATUSES)
    return status.mask(disturbed, DISTURBED_MARK)


def _annotation(value: float, status: Any, fmt: Callable[[float], str], wide: bool = False) -> str:
    if not np.isfinite(value):
        return ""
    return fmt(value) + (f" {QUEUED_MARK}" if status == "Requests queued" else "") + (f" {WIDE_MARK}" if wide else "")


def wide_spread(decode: pd.DataFrame, metric: str, pct: float | None) -> pd.Series:
    """Cells whose 95 % interval of `metric` (its ``<metric>_ci`` column) is wider than `pct` % of the value."""
    column = f"{metric}_ci"
    if pct is None or column not in decode.columns:
        return pd.Series(False, index=decode.index)
    values = [_number(v) for v in decode[metric]]
    widths = [_number(v) for v in decode[column]]
    flags = [bool(v and np.isfinite(w) and w / abs(v) * 100 > pct) for v, w in zip(values, widths, strict=True)]
    return pd.Series(flags, index=decode.index)


def _heatmap(
    ax: Axes,
    grid: pd.DataFrame,
    status: pd.DataFrame,
    labels: list[str],
    title: str,
    fmt: Callable[[float], str],
    cmap: str,
    log_scale: bool | None = None,
    marked: pd.DataFrame | None = None,
    wide: pd.DataFrame | None = None,
) -> None:
    grid = grid.mask(status == DISTURBED_MARK)  # not a usable number: neither coloured nor on the scale
    values, statuses = grid.to_numpy(dtype=float), status.to_numpy()
    finite = values[np.isfinite(values)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if log_scale is None:
        log_scale = vmin > 0 and vmax / vmin >= LOG_SCALE_RATIO  # wide ranges
    norm = LogNorm(vmin, vmax) if log_scale and vmin > 0 else None
    flags = np.zeros(values.shape, dtype=bool) if wide is None else wide.to_numpy(dtype=bool)
    annot = [
        [_annotation(v, s, fmt, w) for v, s, w in zip(*row, strict=True)]
        for row in zip(values, statuses, flags, strict=True)
    ]
    mesh = annotated_heatmap(ax, values, np.array(annot, dtype=object), cmap=cmap, norm=norm or Normalize(vmin, vmax),
                             xticklabels=list(grid.columns), yticklabels=labels, colorbar={"shrink": 0.8})  # fmt: skip
    colorbar = mesh.colorbar
    if norm is not None and colorbar is not None:  # plain labels on a log colour scale
        colorbar.ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: fmt(value).removesuffix(".0")))
        colorbar.ax.yaxis.set_minor_formatter(NullFormatter())
    for i, row_status in enumerate(statuses):
        for j, cell in enumerate(row_status):
            if cell == "Over capacity":
                ax.add_patch(Rectangle((j, i), 1, 1, facecolor="0.88", edgecolor="0.65", hatch="///", lw=0))
                ax.text(j + 0.5, i + 0.5, OVER_LABEL, ha="center", va="center", fontsize=8, color="0.3")
            elif cell == "Error":
                ax.add_patch(Rectangle((j, i), 1, 1, facecolor="#f4c7c3", edgecolor="none"))
                ax.text(j + 0.5, i + 0.5, ERROR_LABEL, ha="center", va="center", fontsize=8, color="#8b0000")
            elif cell == DISTURBED_MARK:
                ax.add_patch(Rectangle((j, i), 1, 1, facecolor="0.94", edgecolor="0.7", hatch="\\\\\\", lw=0))
                ax.text(j + 0.5, i + 0.5, DISTURBED_MARK, ha="center", va="center", fontsize=7, color="0.35")
            elif cell == "Requests queued":
                ax.add_patch(Rectangle((j, i), 1, 1, fill=False, edgecolor="black", lw=2))
    if marked is not None and marked.to_numpy(dtype=bool).any():
        rows, columns = np.nonzero(marked.to_numpy(dtype=bool))
        ax.plot(columns + 0.14, rows + 0.24, ls="none", marker="*", ms=10, mfc="gold", mec="black", mew=0.6)
    ax.tick_params(axis="y", labelrotation=0)
    ax.set_title(title)
    ax.set_xlabel("Simultaneous requests")
    ax.set_ylabel("Context length")


def decode_heatmaps(
    df: pd.DataFrame,
    metrics: Sequence[str] = HEATMAP_METRICS,
    *,
    log_scale: bool | None = None,
    marked: pd.Series | None = None,
    title: str = "Sustained decode · rows are context length, columns are simultaneous requests",
    wide_pct: float | None = WIDE_SPREAD_PCT,
) -> Figure:
    """One heatmap per metric (default: total tok/s, per-request tok/s, TTFT ms): rows contexts, columns concurrency.

    Over-capacity cells are grey and hatched ("Over"), errors are red ("Err"), queued cells are
    outlined and marked "Q"; a cell still disturbed after its retries is hatched the other way and says
    "disturbed" instead of a number (its value sets no colour). Colours go logarithmic for values
    spanning 20× (``log_scale`` None) or as ``log_scale`` says. ``marked``, a boolean Series on ``df``'s
    index, puts a gold star in its cells; ``title`` heads the figure. A value whose 95 % interval (from the
    window's sub-windows) is wider than ``wide_pct`` % of it is marked "±" (None: no marks).
    """
    for metric in metrics:
        _check_metric(df, metric)
    decode = _phase(df, "decode")
    if decode.empty:
        return note_figure("No sustained-decode measurements")
    labels = list(decode.drop_duplicates("context_tokens")["context"])
    status = _status_grid(decode, _grid(decode, "total_tok_s"))
    marks = None if marked is None else _flag_grid(decode, marked, status)
    width = max(7.0, 0.9 * status.shape[1] + 2.5)
    fig = Figure(figsize=(width, len(metrics) * (0.45 * status.shape[0] + 1.2)), layout="constrained")
    any_wide = False
    for ax, metric in zip(np.atleast_1d(fig.subplots(len(metrics), 1)), metrics, strict=True):
        cmap = "magma_r" if metric.endswith("_ms") else "viridis"  # lower is better for times: dark is slow
        wide = _flag_grid(decode, wide_spread(decode, metric, wide_pct), status)
        _heatmap(
            ax,
            _grid(decode, metric),
            status,
            labels,
            metric_title(metric),
            _metric_format(metric),
            cmap,
            log_scale,
            marks,
            wide,
        )
        any_wide = any_wide or bool(wide.to_numpy().any())
    notes = [MARKED_NOTE] * (marks is not None and bool(marks.to_numpy().any()))
    notes += [f"{WIDE_MARK}: 95 % interval wider than {wide_pct:g} % of the value"] * any_wide
    fig.suptitle("\n".join([title, *notes]))
    return fig


def scaling_figure(df: pd.DataFrame, metric: str = "total_tok_s", *, log_scale: bool | None = None) -> Figure:
    """``metric`` (default total tok/s) against simultaneous requests (log2 axis), one line per context.

    Queued cells are drawn with hollow markers; over-capacity, failed and disturbed cells are left out. The
    y axis starts at 0, or is logarithmic with ``log_scale``.
    """
    _check_metric(df, metric)
    decode = _phase(df, "decode")
    decode = decode[decode["status"].isin(RAN_STATUSES) & ~disturbed_mask(decode)]
    decode = decode.assign(total=[_number(v) for v in decode[metric]]).dropna(subset=["total"])
    if decode.empty:
        what = "throughput" if metric == "total_tok_s" else metric_title(metric)
        return note_figure(f"No sustained-decode {what} to plot")
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    groups = list(decode.groupby("context_tokens", sort=True))
    for color, (_, group) in zip(sequential(len(groups)), groups, strict=True):
        ax.plot(group["concurrency"], group["total"], marker="o", color=color, label=group["context"].iloc[0])
        queued = group[group["status"] == "Requests queued"]
        ax.scatter(queued["concurrency"], queued["total"], s=90, facecolors="white", edgecolors=[color], zorder=3)
    levels = sorted(decode["concurrency"].unique())
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(levels))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(n) for n in levels])
    ax.set_xlabel("Simultaneous requests")
    ax.set_ylabel(metric_title(metric))
    if log_scale:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.set_title(f"{metric_title(metric)} by simultaneous requests (hollow: requests queued)")
    ax.legend(title="Context")
    ax.grid(True, alpha=0.3)
    return fig
