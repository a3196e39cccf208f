"""A sweep's workload re-sliced from its stored per-request records (pure: frames in, frames and figures out).

TTFT by conversation turn, beside the cold control that sent the same prompt lengths at the same times without
the history cached; TTFT against the share of each prompt the server reported cached; each step's prefix-cache
hit rate (the server's counters), the client's cached-token share (the replies' usage) and the rate the workload's
construction implies. Nothing here needs a server: a finished sweep's records are enough.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pandas as pd

from toolkit.method.goodput import request_latencies
from toolkit.reports.number_format import as_number, format_percent
from toolkit.reports.tables import markdown_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CACHE_CAPTION", "CACHE_COLUMNS", "EXTERNAL_COLUMN", "HEADING", "SHARE_COLUMNS", "TURN_COLUMNS", "cache_shown",
    "cache_table",
    "cached_figure", "has_workload", "turn_figure", "turn_table", "workload_markdown",
]  # fmt: skip

TURN_COLUMNS = ("step", "turn", "requests", "prompt tokens (median)", "history tokens (median)",
                "cached share", "TTFT p50 (ms)", "cold TTFT p50 (ms)", "cached / cold")  # fmt: skip
CACHE_COLUMNS = ("step", "workload", "offered", "server hit rate", "expected hit rate", "client cached share",
                 "warm-up requests")  # fmt: skip
HEADING = "The workload and the prefix cache"
SHARE_COLUMNS = ("server hit rate", "expected hit rate", "client cached share")
# After "server hit rate", only when a step has one: a KV connector's external tier's hits over its queries (what the
# GPU prefix cache missed), from vllm:external_prefix_cache_hits and _queries.
EXTERNAL_COLUMN = "external hit rate"
CACHE_CAPTION = (
    "Prefix-cache hits per step: the server's counters between the step's edge scrapes, the rate the workload's "
    "construction implies, and the share of prompt tokens the replies reported cached"
)


def _ok_with_ttft(records: pd.DataFrame) -> pd.DataFrame:
    """The successful requests, with their TTFT (ms, from the send) and the share of their prompt found cached."""
    latencies = request_latencies(records)
    share = records["cached_tokens"] / records["input_tokens"]
    frame = records.assign(ttft_ms=latencies["ttft_ms"], cached_share=share)
    return frame[latencies["ok"]]


def _median(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(values.median()) if len(values) else None


def _share(cached: pd.Series, prompt: pd.Series) -> float | None:
    reported = cached.notna()
    return float(cached[reported].sum() / prompt[reported].sum()) if reported.any() and prompt[reported].sum() else None


def turn_table(records: pd.DataFrame, controls: pd.DataFrame | None) -> pd.DataFrame:
    """Per conversation step and turn: requests, median prompt and history tokens, the cached share, median TTFT,
    and the same prompts' median TTFT in the step's cold control with their ratio (None where there is none).
    Warm-up turns are included: this table is by turn. Empty when no step sent more than one turn."""
    ok = _ok_with_ttft(records)
    pairs = [] if controls is None else zip(controls["control_of"], controls["step"], strict=True)
    control_of = {int(measured): int(control) for measured, control in pairs}
    talked = ok[~ok["step"].isin(list(control_of.values()))]
    if not (talked["turn"] > 1).any():
        return pd.DataFrame(columns=list(TURN_COLUMNS))
    rows = []
    conversations = talked[talked["step"].isin(talked.loc[talked["turn"] > 1, "step"])]
    for key, group in conversations.groupby(["step", "turn"]):
        step, turn = (int(k) for k in key)  # type: ignore[call-overload]
        ttft = _median(group["ttft_ms"])
        cold = None
        if step in control_of:
            theirs = ok[(ok["step"] == control_of[step]) & (ok["turn"] == turn)]
            cold = _median(theirs["ttft_ms"])
        rows.append([step, turn, len(group), _median(group["input_tokens"]), _median(group["history_tokens"]),
                     _share(group["cached_tokens"], group["input_tokens"]), ttft, cold,
                     None if ttft is None or not cold else ttft / cold])  # fmt: skip
    return pd.DataFrame(rows, columns=list(TURN_COLUMNS))


def turn_figure(records: pd.DataFrame, controls: pd.DataFrame | None) -> Figure:
    """Median TTFT by turn for each conversation step, and its cold control's for the same turns (dashed)."""
    from matplotlib.figure import Figure

    from toolkit.reports.figure_style import despine, palette
    from toolkit.reports.plots import note_figure

    table = turn_table(records, controls)
    if table.empty:
        return note_figure("No conversation: every request was a single turn")
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for color, (step, rows) in zip(palette(), table.groupby("step"), strict=False):
        ax.plot(rows["turn"], rows["TTFT p50 (ms)"], marker="o", color=color, label=f"step {step}: history cached")
        if rows["cold TTFT p50 (ms)"].notna().any():
            ax.plot(rows["turn"], rows["cold TTFT p50 (ms)"], marker="s", linestyle="--", color=color,
                    label=f"step {step}: same lengths, cold")  # fmt: skip
    ax.set_xlabel("turn")
    ax.set_xticks(sorted(table["turn"].unique()))
    ax.set_ylabel("TTFT p50 (ms, from the send)")
    ax.set_ylim(bottom=0)
    ax.set_title("Time to first token by turn")
    ax.legend(fontsize=8)
    despine(ax)
    return fig


def cached_figure(records: pd.DataFrame) -> Figure:
    """Each request's TTFT against the share of its prompt the server reported cached, coloured by turn."""
    from matplotlib.figure import Figure

    from toolkit.reports.figure_style import despine, sequential
    from toolkit.reports.plots import log_if_wide, note_figure

    ok = _ok_with_ttft(records)
    shown = ok[ok["cached_share"].notna()]
    if shown.empty:
        return note_figure("The server reported no cached tokens (vLLM: --enable-prompt-tokens-details)")
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    turns = sorted(shown["turn"].unique())
    for color, turn in zip(sequential(len(turns)), turns, strict=True):
        of_turn = shown[shown["turn"] == turn]
        ax.scatter(of_turn["cached_share"], of_turn["ttft_ms"], s=28, color=color, edgecolors="white", label=str(turn))
    ax.legend(title="turn", fontsize=8)
    log_if_wide(ax, shown["ttft_ms"], "y")
    ax.set_xlabel("share of the prompt found in the prefix cache")
    ax.set_ylabel("TTFT (ms, from the send)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_title("Time to first token against the cached share")
    despine(ax)
    return fig


def cache_table(steps: pd.DataFrame, records: pd.DataFrame, controls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per step (cold controls included): the server's prefix-cache hit rate between the step's edge scrapes (and
    beside it, `EXTERNAL_COLUMN`, its external tier's, when any step has one), the rate its construction implies,
    the share the replies reported cached, and its warm-up requests."""
    every = steps if controls is None else pd.concat([steps, controls], ignore_index=True)
    rows, external = [], []
    for _, row in every.sort_values("step").iterrows():
        mine = records[(records["step"] == row["step"]) & (records["output_tokens"] > 0)]
        workload, warmup = row.get("workload"), row.get("warmup_requests")
        rows.append([int(row["step"]), workload if isinstance(workload, str) else "cold", row["offered_rate"],
                     row.get("prefix_cache_hit_rate"), row.get("expected_hit_rate"),
                     _share(mine["cached_tokens"], mine["input_tokens"]),
                     int(warmup) if pd.notna(warmup) else 0])  # fmt: skip
        external.append(as_number(row.get("external_prefix_cache_hit_rate")))
    table = pd.DataFrame(rows, columns=list(CACHE_COLUMNS))
    if any(rate is not None for rate in external):
        table.insert(CACHE_COLUMNS.index("server hit rate") + 1, EXTERNAL_COLUMN, external)
    return table


def has_workload(steps: pd.DataFrame) -> bool:
    """Whether a sweep sent anything but cold single requests: shared prefixes, conversations, a trace's blocks."""
    kinds = steps["workload"].dropna() if "workload" in steps else pd.Series(dtype=object)
    expected = steps["expected_hit_rate"] if "expected_hit_rate" in steps else pd.Series(dtype=float)
    return bool((kinds != "cold").any() or expected.notna().any())


def cache_shown(steps: pd.DataFrame, records: pd.DataFrame, controls: pd.DataFrame | None = None) -> pd.DataFrame:
    """`cache_table` as display strings (shares as percentages, rates as req/s)."""
    table = cache_table(steps, records, controls)
    shares = {c: table[c].map(format_percent) for c in (*SHARE_COLUMNS, EXTERNAL_COLUMN) if c in table}
    return table.assign(**shares, offered=table["offered"].map(lambda r: f"{r:g}")).astype(str)


def workload_markdown(
    steps: pd.DataFrame, records: pd.DataFrame, controls: pd.DataFrame | None, images: Mapping[str, str]
) -> str:
    """report.md's workload section: the cache table and the figures given; empty for a cold sweep."""
    if not has_workload(steps):
        return ""
    out = [f"### {HEADING}", CACHE_CAPTION, markdown_table(cache_shown(steps, records, controls))]
    out += [f"![{key}]({path})" for key, path in images.items()]
    return "\n\n".join(out) + "\n"
