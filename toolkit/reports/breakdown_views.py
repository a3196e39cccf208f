"""Where a rate sweep's time went, step by step and request by request (pure: frames in, frames and figures out).

Each step's split (toolkit.method.breakdown, its steps.jsonl row): the server's queue (queued to scheduled), its
prefill (scheduled to first token, the server's TTFT), the wire (the client's TTFT less both: network, HTTP, the API
server's own work, the client) and its decode (first token to last). With basis "per-request" the split is the
medians over the step's steady requests the server timed; with "histograms" (no reply carried timing) the means of
the server's histograms over the step; a step with neither (basis "", or a folder from before the breakdown) is
left out, and a sweep without any shows nothing: the figure is None, the tables are empty.

The figure sorts the steps by offered rate, so past the knee the queue takes over the time to first token. A wire
below zero (the server's queue and TTFT above the client's TTFT: the cross-check broken) is drawn as 0 and marked
with a red ×; the tables show its value as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from toolkit.method.breakdown import CLOCK_TOLERANCE_MS, CLOCK_TOLERANCE_SHARE, request_split
from toolkit.method.goodput import TIMING_COLUMNS
from toolkit.reports.number_format import as_number, format_count, format_tbt_ms
from toolkit.reports.rate_tables import format_rate
from toolkit.reports.tables import markdown_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "BASIS_TEXT", "CAPTION", "HEADING", "HISTOGRAM_MARK", "REQUEST_COLUMNS", "SHOWN_COLUMNS", "SPLIT_COLUMNS",
    "WIRE_CLIPPED", "breakdown_figure", "breakdown_markdown", "breakdown_shown", "breakdown_table", "has_breakdown",
    "mismatch_line", "request_breakdown",
]  # fmt: skip

HEADING = "Where the time goes"
# The steps.jsonl columns each basis shows: queue, prefill, wire, decode (ms).
_SOURCES: dict[str, tuple[str, str, str, str]] = {
    "per-request": ("queue_p50_ms", "server_ttft_p50_ms", "wire_ttft_p50_ms", "decode_p50_ms"),
    "histograms": ("queue_mean_ms", "server_ttft_mean_ms", "wire_ttft_mean_ms", "decode_mean_ms"),
}
BASIS_TEXT = {"per-request": "medians per request", "histograms": "means of the server's histograms"}
HISTOGRAM_MARK = "†"  # a step's tick label in a figure that mixes the two bases: its split is the histograms' means
SPLIT_COLUMNS: tuple[str, ...] = ("step", "offered_rate", "basis", "queue_ms", "prefill_ms", "wire_ms", "decode_ms",
                                  "timed_requests", "timing_mismatches")  # fmt: skip
SHOWN_COLUMNS: tuple[str, ...] = ("Step", "Offered req/s", "Basis", "Queue", "Prefill", "Wire", "Decode",
                                  "Timed requests", "Mismatches")  # fmt: skip
REQUEST_COLUMNS: tuple[str, ...] = ("step", "request", "scheduled (s)", "TTFT (ms)", "queue (ms)", "prefill (ms)",
                                    "wire (ms)", "decode (ms)", "end-to-end (ms)", "mismatch")  # fmt: skip
CAPTION = (
    "Per step, in order of offered rate: the server's queue (queued to scheduled), its prefill (scheduled to first "
    "token), the wire (the client's TTFT less both: network, HTTP, the API server, the client) and its decode (first "
    "token to last) · per request: medians over the step's steady requests the server timed · histograms: means of "
    "the server's histograms over the step · mismatches: requests whose server timing exceeds the client's clock"
)
WIRE_CLIPPED = "wire below 0, drawn as 0 (server timing above the client's clock)"
_BASES = {"per-request": "per request", "histograms": "histograms"}


def _number(value: Any) -> float:
    number = as_number(value)
    return math.nan if number is None else number


def _count(value: Any) -> int:
    number = as_number(value)
    return 0 if number is None else round(number)


def breakdown_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step with a breakdown, in order of offered rate (an infinite one last): its basis, queue, prefill, wire
    and decode in ms (NaN: not known), its requests the server timed and those that broke the cross-check.
    Empty (`SPLIT_COLUMNS`) when no step has one."""
    rows = []
    if "breakdown_basis" in steps:
        for row in steps.sort_values(["offered_rate", "step"]).to_dict("records"):
            basis = row.get("breakdown_basis")
            if not isinstance(basis, str) or basis not in _SOURCES:
                continue
            parts = [_number(row.get(column)) for column in _SOURCES[basis]]
            rows.append([int(row["step"]), float(row["offered_rate"]), basis, *parts,
                         _count(row.get("timed_requests")), _count(row.get("timing_mismatches"))])  # fmt: skip
    table = pd.DataFrame(rows, columns=list(SPLIT_COLUMNS))
    return table.astype({c: "float64" for c in ("offered_rate", "queue_ms", "prefill_ms", "wire_ms", "decode_ms")})


def has_breakdown(steps: pd.DataFrame) -> bool:
    """Whether any step has a split to show (a per-request or histogram basis)."""
    return not breakdown_table(steps).empty


def _labels(table: pd.DataFrame, mark: bool) -> list[str]:
    repeated = table["offered_rate"].duplicated(keep=False)
    labels = []
    for rate, step, twice, basis in zip(table["offered_rate"], table["step"], repeated, table["basis"], strict=True):
        label = format_rate(rate) + (f"\nstep {step}" if twice else "")
        labels.append(label + (HISTOGRAM_MARK if mark and basis == "histograms" else ""))
    return labels


def _title(bases: set[str]) -> str:
    if len(bases) == 1:
        return f"{HEADING}: {BASIS_TEXT[bases.pop()]} over each step"
    return f"{HEADING}: {BASIS_TEXT['per-request']} ({HISTOGRAM_MARK}: {BASIS_TEXT['histograms']})"


def breakdown_figure(steps: pd.DataFrame) -> Figure | None:
    """One bar per step with a breakdown, in order of offered rate: left, its time to first token stacked as
    queue, prefill and wire; right, its decode. The title names the basis (medians per request, or means of the
    server's histograms). A wire below 0 is drawn as 0 and marked (`WIRE_CLIPPED`). None when no step has a
    breakdown."""
    from matplotlib.figure import Figure

    from toolkit.reports.figure_style import despine, palette
    from toolkit.reports.rate_plots import X_AXES

    table = breakdown_table(steps)
    if table.empty:
        return None
    bases = set(table["basis"])
    x = np.arange(len(table))
    queue, prefill, wire, decode = (table[c].fillna(0.0).to_numpy(float) for c in
                                    ("queue_ms", "prefill_ms", "wire_ms", "decode_ms"))  # fmt: skip
    clipped = wire < 0
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    left, right = fig.subplots(1, 2)
    colors = palette()
    left.bar(x, queue, color=colors[3], label="queue (waiting to be scheduled)")
    left.bar(x, prefill, bottom=queue, color=colors[0], label="prefill (the server's TTFT)")
    left.bar(x, np.where(clipped, 0.0, wire), bottom=queue + prefill, color="0.65", label="wire (outside the engine)")
    if clipped.any():
        left.plot(x[clipped], (queue + prefill)[clipped], linestyle="none", marker="x", markersize=10,
                  color="tab:red", label=WIRE_CLIPPED)  # fmt: skip
    handles, names = left.get_legend_handles_labels()
    left.legend(handles[::-1], names[::-1], fontsize=8)  # top to bottom, as the bars stack
    right.bar(x, decode, color=colors[2], label="decode (first token to last)")
    right.legend(fontsize=8)
    labels = _labels(table, mark=len(bases) > 1)
    for ax, title in ((left, "Time to first token"), (right, "Decode")):
        ax.set_xticks(x, labels, rotation=45 if len(x) > 8 else 0)
        ax.set_xlabel(X_AXES["offered_rate"])
        ax.set_ylabel("ms")
        ax.set_ylim(bottom=0)
        ax.set_title(title)
        despine(ax)
    fig.suptitle(_title(bases))
    return fig


def breakdown_shown(steps: pd.DataFrame) -> pd.DataFrame:
    """`breakdown_table` as display strings (`SHOWN_COLUMNS`): rates as req/s, the parts in ms (a negative wire as
    it is), counts."""
    table = breakdown_table(steps)
    parts = {c: table[c].map(format_tbt_ms) for c in ("queue_ms", "prefill_ms", "wire_ms", "decode_ms")}
    shown = table.assign(
        step=table["step"].map(str), offered_rate=table["offered_rate"].map(format_rate),
        basis=table["basis"].map(_BASES), **parts, timed_requests=table["timed_requests"].map(format_count),
        timing_mismatches=table["timing_mismatches"].map(format_count),
    )  # fmt: skip
    return shown.set_axis(list(SHOWN_COLUMNS), axis=1).astype(object)


def _at(rate: Any) -> str:
    text = format_rate(rate)
    return text if text == "all at once" else f"{text} req/s"


def mismatch_line(steps: pd.DataFrame) -> str | None:
    """One line when requests broke the timing cross-check: how many, in which steps, and what it means; else
    None (no step counted one, or the steps are from before the breakdown)."""
    if "timing_mismatches" not in steps:
        return None
    counts = pd.to_numeric(steps["timing_mismatches"], errors="coerce").fillna(0).astype(int)
    broke = steps.assign(_count=counts)[counts > 0].sort_values("step")
    if broke.empty:
        return None
    where = "; ".join(f"{r['_count']} in step {int(r['step'])}, {_at(r['offered_rate'])}"
                      for r in broke.to_dict("records"))  # fmt: skip
    total = int(broke["_count"].sum())
    return (f"Timing cross-check: {total} request{'s' if total != 1 else ''}' server timing exceeds the client's "
            f"clock ({where}): the server's queue and TTFT above the client's TTFT, or its span above the client's "
            f"end-to-end, by more than {CLOCK_TOLERANCE_MS:g} ms + {CLOCK_TOLERANCE_SHARE:.0%}. A proxy rewriting "
            "timing, or a clock problem.")  # fmt: skip


def request_breakdown(records: pd.DataFrame, step: int | None = None, count: int = 5) -> pd.DataFrame | None:
    """`count` requests of one step that the server timed, spread from its first to its last in schedule order,
    each with its client TTFT, its queue, prefill, wire and decode, its end-to-end (ms, from the send) and whether
    it broke the cross-check (`REQUEST_COLUMNS`). `step` None: the highest offered rate with timed requests (of
    several such steps, the first). None when no request of the sweep was timed; empty when the step's were not.
    ValueError for a step the records do not hold."""
    if count < 1:
        raise ValueError(f"count: {count}; at least 1 request")
    held = sorted(int(s) for s in records["step"].unique())
    if step is not None and step not in held:
        raise ValueError(f"step {step}: not a step of this sweep (its steps: {', '.join(map(str, held))})")
    if any(column not in records for column in TIMING_COLUMNS):
        return None
    split = request_split(records)
    timed = records[split["timed"]]
    if timed.empty:
        return None
    if step is None:
        step = int(timed.sort_values(["offered_rate", "step"], ascending=[False, True])["step"].iloc[0])
    mine = records[records["step"] == step]
    first = mine["scheduled_s"].min()
    mine = mine[split.loc[mine.index, "timed"]].sort_values(["scheduled_s", "request"])
    picked = mine.iloc[np.unique(np.linspace(0, len(mine) - 1, min(count, len(mine))).round().astype(int))]
    parts = split.loc[picked.index]
    frame = pd.DataFrame({
        "step": picked["step"].astype(int), "request": picked["request"].astype(int),
        "scheduled (s)": picked["scheduled_s"] - first, "TTFT (ms)": parts["ttft_ms"], "queue (ms)": parts["queue_ms"],
        "prefill (ms)": parts["server_ttft_ms"], "wire (ms)": parts["wire_ttft_ms"], "decode (ms)": parts["decode_ms"],
        "end-to-end (ms)": parts["e2e_ms"], "mismatch": parts["mismatch"],
    }, columns=list(REQUEST_COLUMNS))  # fmt: skip
    return frame.round({c: 3 if c == "scheduled (s)" else 1 for c in REQUEST_COLUMNS[2:-1]}).reset_index(drop=True)


def breakdown_markdown(steps: pd.DataFrame, images: Mapping[str, str]) -> str:
    """report.md's breakdown section: heading, caption, the split table, the cross-check line and the figures
    given; empty when no step has a breakdown."""
    if not has_breakdown(steps):
        return ""
    out = [f"### {HEADING}", CAPTION, markdown_table(breakdown_shown(steps))]
    out += [line for line in [mismatch_line(steps)] if line]
    out += [f"![{key}]({path})" for key, path in images.items()]
    return "\n\n".join(out) + "\n"
