"""Figures of an open-loop rate sweep: the latency curve with its knee, goodput against offered rate, the queue,
and two or more runs' curves overlaid (pure: steps DataFrames in, :class:`matplotlib.figure.Figure` out).

Every curve follows the steps in order of offered rate (searched probes included), so past capacity, where the
achieved throughput stops growing or falls back, the line turns instead of zigzagging. Lag-flagged steps (the
client sent late) carry a red ×. An infinite offered rate ("all at once") has no place on an offered-rate axis
and is left out of those figures only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from toolkit.method.goodput import ServiceLevel
from toolkit.reports.figure_style import despine, palette
from toolkit.reports.plots import log_if_wide, note_figure

__all__ = ["LAG_LABEL", "X_AXES", "compare_figure", "goodput_figure", "knee_figure", "queue_figure"]

X_AXES = {
    "output_tok_s": "Achieved output tok/s",
    "request_throughput": "Achieved requests/s (completed)",
    "achieved_rate": "Achieved requests/s (sent)",
    "offered_rate": "Offered requests/s",
    "items_s": "Achieved inputs/s (embeddings)",
}
LAG_LABEL = "lag flagged"
_OFFERED = "offered_rate"


def _ordered(steps: pd.DataFrame, x: str) -> pd.DataFrame:
    """The steps with a finite `x`, in order of offered rate."""
    if x not in X_AXES:
        raise ValueError(f"x: {x!r}; one of {', '.join(X_AXES)}")
    return steps[np.isfinite(steps[x].astype(float))].sort_values([_OFFERED, "step"])  # inf (all at once) last


def _mark_lag(ax: Axes, shown: pd.DataFrame, x: str, columns: list[str]) -> None:
    flagged = shown[shown["lag_flagged"].astype(bool)]
    if flagged.empty:
        return
    xs = np.concatenate([flagged[x].to_numpy(float) for _ in columns])
    ys = np.concatenate([flagged[c].to_numpy(float) for c in columns])
    ax.plot(xs, ys, linestyle="none", marker="x", markersize=10, color="tab:red", label=LAG_LABEL)


def _ttft_source(steps: pd.DataFrame) -> tuple[str, str]:
    """The TTFT columns' prefix a figure leads with and its title: from the scheduled arrival (``ttft_sched``)
    when the steps have it, else from the send (an imported peer's steps)."""
    arrival = "ttft_sched_p50_ms" in steps and steps["ttft_sched_p50_ms"].notna().any()
    return ("ttft_sched", "TTFT from the scheduled arrival (ms)") if arrival else ("ttft", "TTFT from the send (ms)")


def _is_embeddings(steps: pd.DataFrame) -> bool:
    """An embeddings sweep's steps: they count inputs a second (`items_s`), and have no TTFT."""
    return "items_s" in steps and bool(steps["items_s"].notna().any())


def knee_figure(steps: pd.DataFrame, level: ServiceLevel | None = None, *, x: str = "output_tok_s") -> Figure:
    """TTFT (from the scheduled arrival, the send's p99 dashed beside it) and TPOT, p50 and p99, against `x`
    (achieved output tok/s by default): where the curve turns up is the knee. Dashed: the service level's limits.
    Hollow markers: searched probes. An embeddings sweep's: `_embedding_knee`, against inputs/s by default."""
    if _is_embeddings(steps):
        return _embedding_knee(steps, level, "items_s" if x == "output_tok_s" else x)
    shown = _ordered(steps, x)
    if shown.empty:
        return note_figure("No step to plot")
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ttft, ttft_title = _ttft_source(shown)
    panels = (
        (ttft, "TTFT", ttft_title, None if level is None else level.ttft_ms),
        ("tpot", "TPOT", "TPOT (ms)", None if level is None else level.tpot_ms),
    )
    colors = palette()
    for ax, (name, shown_name, title, limit) in zip(fig.subplots(1, 2), panels, strict=True):
        if name == "ttft_sched":
            ax.plot(shown[x], shown["ttft_p99_ms"], linestyle="--", color=colors[3], alpha=0.5,
                    label="TTFT p99 from the send")  # fmt: skip
        for color, q in zip((colors[0], colors[3]), (50, 99), strict=True):
            column = f"{name}_p{q}_ms"
            ax.plot(shown[x], shown[column], marker="o", color=color, label=f"{shown_name} p{q}")
            probes = shown[shown["searched"].astype(bool)]
            if len(probes):
                ax.plot(
                    probes[x],
                    probes[column],
                    linestyle="none",
                    marker="o",
                    markerfacecolor="white",
                    color=color,
                    label=f"{shown_name} p{q} (searched)",
                )
        if limit is not None:
            ax.axhline(limit, linestyle="--", color="0.4", label=f"limit {limit:g} ms")
        _mark_lag(ax, shown, x, [f"{name}_p50_ms", f"{name}_p99_ms"])
        ax.set_title(title)
        ax.set_xlabel(X_AXES[x])
        ax.set_ylim(bottom=0)
        log_if_wide(ax, shown[x], "x")
        log_if_wide(ax, shown[[f"{name}_p50_ms", f"{name}_p99_ms"]], "y")
        ax.legend(fontsize=8)
        despine(ax)
    fig.suptitle("Latency against load: the knee")
    return fig


def _embedding_knee(steps: pd.DataFrame, level: ServiceLevel | None, x: str) -> Figure:
    """An embeddings sweep's knee: its one latency, end to end from the scheduled arrival (p50, p90, p99), against
    `x`; dashed: the end-to-end limit."""
    shown = _ordered(steps, x)
    if shown.empty:
        return note_figure("No step to plot")
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    columns = [f"e2e_sched_p{q}_ms" for q in (50, 90, 99)]
    colors = palette()
    for color, column, q in zip((colors[0], colors[1], colors[3]), columns, (50, 90, 99), strict=True):
        ax.plot(shown[x], shown[column].astype(float), marker="o", color=color, label=f"E2E p{q}")
    if level is not None and level.e2e_ms is not None:
        ax.axhline(level.e2e_ms, linestyle="--", color="0.4", label=f"limit {level.e2e_ms:g} ms")
    _mark_lag(ax, shown, x, columns[:1])
    ax.set_title("End-to-end latency from the scheduled arrival (ms)")
    ax.set_xlabel(X_AXES[x])
    ax.set_ylim(bottom=0)
    log_if_wide(ax, shown[x], "x")
    ax.legend(fontsize=8)
    despine(ax)
    fig.suptitle("Latency against load: the knee (embeddings)")
    return fig


def _search_marks(ax: Axes, search: Mapping[str, Any] | None) -> None:
    if not search:
        return
    bracket = [b for b in list(search.get("bracket") or []) if isinstance(b, int | float)]
    if len(bracket) == 2:
        ax.axvspan(bracket[0], bracket[1], color="tab:green", alpha=0.12, label="search bracket")
    highest = search.get("highest_rate")
    if isinstance(highest, int | float):
        ax.axvline(highest, color="tab:green", label=f"highest meeting: {highest:g} req/s")


def goodput_figure(
    steps: pd.DataFrame, level: ServiceLevel | None = None, search: Mapping[str, Any] | None = None
) -> Figure:
    """Goodput (requests/s meeting the service level) and completed requests/s against the offered rate, with
    the offered rate itself and the target line (target × offered: a step meets the level on or above it);
    the search's bracket shaded and its highest rate drawn."""
    shown = _ordered(steps, _OFFERED)
    if shown.empty:
        return note_figure("No step with a finite offered rate")
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    offered = shown[_OFFERED].to_numpy(float)
    wide = offered.min() > 0 and offered.max() > 10 * offered.min()  # log axes, both: the target line stays straight
    ends = np.array([offered.min() if wide else 0.0, offered.max()])
    ax.plot(ends, ends, color="0.7", label="offered")
    if level is not None:
        ax.plot(ends, ends * level.target, linestyle="--", color="0.4", label=f"target: {level.target * 100:g} %")
    ax.plot(offered, shown["request_throughput"], marker="s", color=palette()[0], label="completed")
    ax.plot(offered, shown["goodput"], marker="o", color=palette()[2], label="goodput")
    _mark_lag(ax, shown, _OFFERED, ["goodput"])
    _search_marks(ax, search)
    ax.set_xlabel(X_AXES[_OFFERED])
    ax.set_ylabel("requests/s")
    if wide:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_title("Goodput against offered rate")
    ax.legend(fontsize=8)
    despine(ax)
    return fig


def queue_figure(steps: pd.DataFrame) -> Figure:
    """The server's waiting requests (mean and peak over the step's samples) and its peak running requests,
    against the offered rate: past capacity the queue builds."""
    shown = _ordered(steps, _OFFERED)
    if shown.empty:
        return note_figure("No step with a finite offered rate")
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    colors = palette()
    series = (
        ("server_waiting_mean", "waiting (mean)", colors[3], "-"),
        ("server_waiting_max", "waiting (peak)", colors[3], ":"),
        ("server_running_max", "running (peak)", colors[0], "-"),
    )
    for column, label, color, style in series:
        ax.plot(shown[_OFFERED], shown[column], marker="o", linestyle=style, color=color, label=label)
    _mark_lag(ax, shown, _OFFERED, ["server_waiting_mean"])
    log_if_wide(ax, shown[_OFFERED], "x")
    ax.set_xlabel(X_AXES[_OFFERED])
    ax.set_ylabel("requests on the server")
    ax.set_ylim(bottom=0)
    ax.set_title("The server's queue")
    ax.legend(fontsize=8)
    despine(ax)
    return fig


def compare_figure(steps_by_run: Mapping[str, pd.DataFrame], *, x: str = "output_tok_s") -> Figure:
    """Runs overlaid, one colour each: goodput against offered rate, and TTFT p99 from the scheduled arrival
    against `x` (a run without it, an imported peer's, from the send, said in its label). Embeddings sweeps have no
    TTFT: where every run is one, the right panel is end-to-end p99 from the scheduled arrival against inputs/s;
    beside generation runs, an embeddings run is in the goodput panel only, and its label says so."""
    if not steps_by_run:
        return note_figure("No run holds a rate sweep")
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    left, right = fig.subplots(1, 2)
    colors = palette(len(steps_by_run))
    embeddings = {label for label, steps in steps_by_run.items() if _is_embeddings(steps)}
    every = len(embeddings) == len(steps_by_run)
    x = "items_s" if every and x == "output_tok_s" else x
    for color, (label, steps) in zip(colors, steps_by_run.items(), strict=True):
        offered = _ordered(steps, _OFFERED)
        alone = label in embeddings and not every
        left.plot(offered[_OFFERED], offered["goodput"], marker="o", color=color,
                  label=f"{label} (embeddings: no TTFT)" if alone else label)  # fmt: skip
        if alone:
            continue
        curve = _ordered(steps, x)
        latency, _ = ("e2e_sched", "") if every else _ttft_source(curve)
        right.plot(curve[x], curve[f"{latency}_p99_ms"], marker="o", color=color,
                   label=label if latency in ("ttft_sched", "e2e_sched") else f"{label} (from the send)")  # fmt: skip
    right_title = ("End-to-end p99 from the scheduled arrival (ms)" if every
                   else "TTFT p99 from the scheduled arrival (ms)")  # fmt: skip
    for ax, title, xlabel in ((left, "Goodput (req/s)", X_AXES[_OFFERED]), (right, right_title, X_AXES[x])):
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylim(bottom=0)
        if ax.get_lines():
            ax.legend(fontsize=8)
        despine(ax)
    fig.suptitle("Open-loop rates by run")
    return fig
