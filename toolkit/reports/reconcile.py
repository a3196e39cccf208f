"""Reconciliation: the same workload measured by several tools, step by step, each quantity as a ratio to the first.

Every run folder here holds rate steps: ours, or another tool's imported (`import-results`). A step of each later
run is matched to the first run's step at the same offered rate. Each quantity is computed from the step's records
under our definitions (toolkit.method.goodput) over the step's steady part, as the step's row shows it, with a 95 %
interval: medians (TTFT, TPOT, end-to-end, ITL) by order statistics, output throughput from five consecutive
batches of the step's requests. The ratio other / first gets its interval from both (toolkit.method.spread).
ITL pools the gaps of every request, which are not independent: its interval is too narrow, and is marked so.
The table's ratios are tested together: each p-value adjusted by Benjamini–Hochberg over the whole table (q), and
a ratio marked `*` when its q is below 0.05.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from toolkit.method.goodput import inter_token_ms, request_latencies, steady_mask
from toolkit.method.multiplicity import adjusted_p_values, marked
from toolkit.method.spread import Interval, batch_means, median_interval, ratio_test
from toolkit.reports.markdown_text import inert
from toolkit.reports.tables import markdown_table
from toolkit.results.rate_runs import RateSweep

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "BATCHES", "NO_MATCH", "QUANTITIES", "SAME_RATE", "ratio_figure", "reconciliation", "reconciliation_markdown",
    "reconciliation_text", "sources_text", "step_intervals", "throughput_interval",
]  # fmt: skip

BATCHES = 5  # throughput's interval: the step's requests in this many consecutive batches
QUANTITIES: dict[str, str] = {  # our column -> shown name
    "output_tok_s": "output tok/s",
    "ttft_p50_ms": "TTFT p50 ms",
    "tpot_p50_ms": "TPOT p50 ms",
    "e2e_p50_ms": "e2e p50 ms",
    "itl_p50_ms": "ITL p50 ms (interval too narrow)",
}
NO_MATCH = "No step of a later run matches a rate of the first."
SAME_RATE = 0.01  # steps of two runs match when their offered rates differ by at most 1 %


def step_intervals(records: pd.DataFrame) -> dict[str, Interval | None]:
    """Each quantity of one step, from its records over its steady part, with its 95 % interval (None: too few)."""
    steady = records[steady_mask(records)]
    latencies = request_latencies(steady)
    ok = latencies["ok"]
    several = ok & (steady["output_tokens"] > 1)
    return {
        "output_tok_s": throughput_interval(records),
        "ttft_p50_ms": median_interval(list(latencies.loc[ok, "ttft_ms"])),
        "tpot_p50_ms": median_interval(list(latencies.loc[several, "tpot_ms"])),
        "e2e_p50_ms": median_interval(list(latencies.loc[ok, "e2e_ms"])),
        "itl_p50_ms": median_interval(inter_token_ms(steady)),
    }


def throughput_interval(records: pd.DataFrame, batches: int = BATCHES) -> Interval | None:
    """Output tokens per second from the first send to the last token (the step's own figure), with the relative
    spread of the same figure over `batches` consecutive batches of its requests (in send order)."""
    done = records[records["error"].isna() & records["last_token_s"].notna()].sort_values("sent_s")
    if len(done) < 2 * batches:
        return None
    span = float(done["last_token_s"].max() - records["sent_s"].min())
    whole = float(done["output_tokens"].sum()) / span if span > 0 else math.nan
    rates = []
    for part in (done.iloc[i::batches] for i in range(batches)):  # interleaved: each batch spans the whole step
        part_span = float(part["last_token_s"].max() - part["sent_s"].min())
        rates.append(float(part["output_tokens"].sum()) / part_span if part_span > 0 else math.nan)
    spread = batch_means([r for r in rates if math.isfinite(r)])
    if spread is None or not math.isfinite(whole):
        return None
    return Interval(whole, whole * spread.relative, spread.dof)


def _matching_step(sweep: RateSweep, rate: float) -> int | None:
    for step, offered in zip(sweep.steps["step"], sweep.steps["offered_rate"], strict=True):
        if offered == rate or (math.isfinite(rate) and abs(offered - rate) <= SAME_RATE * rate):
            return int(step)
    return None


def _reported(sweep: RateSweep, step: int, name: str) -> float | None:
    row = sweep.steps[sweep.steps["step"] == step].iloc[0]
    value = row.get(f"{name}_as_reported")
    return None if value is None or pd.isna(value) else float(value)


def reconciliation(sweeps: Mapping[str, RateSweep]) -> pd.DataFrame:
    """One row per (offered rate, run after the first, quantity): both values, the other tool's own figure, the
    ratio other / first with its interval and p-value. Steps without a match in the first run are left out."""
    labels = list(sweeps)
    base_label, base = labels[0], sweeps[labels[0]]
    rows: list[dict[str, Any]] = []
    for step, rate in zip(base.steps["step"], base.steps["offered_rate"], strict=True):
        ours = step_intervals(base.records[base.records["step"] == step])
        for label in labels[1:]:
            other = sweeps[label]
            matched = _matching_step(other, float(rate))
            if matched is None:
                continue
            theirs = step_intervals(other.records[other.records["step"] == matched])
            for name, shown in QUANTITIES.items():
                a, b = ours[name], theirs[name]
                ratio = ratio_test(a, b) if a is not None and b is not None and a.value > 0 else None
                low, high = (None, None) if ratio is None else ratio.interval.bounds  # log scale, not symmetric
                rows.append({
                    "offered_rate": float(rate), "run": label, "quantity": shown,
                    base_label: None if a is None else a.value, "value": None if b is None else b.value,
                    "as_reported": _reported(other, matched, name),
                    "ratio": None if ratio is None else ratio.interval.value,
                    "low": low, "high": high,
                    "p_value": None if ratio is None else ratio.p_value,
                })  # fmt: skip
    table = pd.DataFrame(rows)
    if not table.empty:  # every ratio of the table is one family: Benjamini–Hochberg over all of them
        table["q_value"] = adjusted_p_values([None if pd.isna(p) else float(p) for p in table["p_value"]])
    return table


def reconciliation_text(table: pd.DataFrame, base_label: str) -> pd.DataFrame:
    """The table as display strings: values to 3 significant figures, the ratio as `1.03 [0.98, 1.08]`."""
    if table.empty:
        return table
    number = lambda v: "-" if v is None or pd.isna(v) else f"{v:,.3g}"  # noqa: E731
    return pd.DataFrame({
        "rate": [f"{r:g} req/s" if math.isfinite(r) else "all at once" for r in table["offered_rate"]],
        "run": table["run"], "quantity": table["quantity"],
        base_label: table[base_label].map(number), "value (our definitions)": table["value"].map(number),
        "as the tool reported": table["as_reported"].map(number),
        "ratio [95 %]": [
            "-" if pd.isna(r) else f"{r:.3f} [{lo:.3f}, {hi:.3f}]"
            for r, lo, hi in zip(table["ratio"], table["low"], table["high"], strict=True)
        ],
        "q (the table's tests together)": table["q_value"].map(
            lambda q: "-" if q is None or pd.isna(q) else f"{q:.3f}" + (" *" if marked(q) else "")
        ),
    })  # fmt: skip


def sources_text(sweeps: Mapping[str, RateSweep]) -> str:
    """Which tool measured each run, the first named as the reference (markdown)."""
    labels = list(sweeps)
    lines = [f"Each quantity as a ratio to **{labels[0]}**, computed from every run's request records under the "
             "toolkit's definitions over each step's steady part; the tool's own figure beside it. q: the ratio's "
             "p-value adjusted over all of the table's tests (Benjamini–Hochberg); *: q below 0.05.", ""]  # fmt: skip
    return "\n".join(lines + [f"- **{inert(label)}**: {inert(_source(sweep))}" for label, sweep in sweeps.items()])


def reconciliation_markdown(sweeps: Mapping[str, RateSweep]) -> str:
    """reconcile.md: the sources, then the table."""
    table = reconciliation_text(reconciliation(sweeps), next(iter(sweeps)))
    body = markdown_table(table) if not table.empty else NO_MATCH
    return "\n".join(["# Reconciliation", "", sources_text(sweeps), "", body, ""])


def ratio_figure(table: pd.DataFrame) -> Figure:
    """Each ratio with its interval, one row per (rate, run, quantity); the line at 1 is "the same"."""
    import matplotlib.pyplot as plt

    shown = table.dropna(subset=["ratio"])
    figure, axis = plt.subplots(figsize=(8, 0.4 * max(len(shown), 3) + 1))
    names = [f"{r:g} req/s · {run} · {q}" for r, run, q in zip(shown["offered_rate"], shown["run"], shown["quantity"],
                                                                 strict=True)]  # fmt: skip
    positions = range(len(shown))
    axis.errorbar(shown["ratio"], positions, xerr=[shown["ratio"] - shown["low"], shown["high"] - shown["ratio"]],
                  fmt="o", capsize=3)  # fmt: skip
    axis.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    axis.set_yticks(list(positions), names)
    axis.invert_yaxis()
    axis.set_xlabel("ratio to the first run (95 % interval)")
    plt.close(figure)
    return figure


def _source(sweep: RateSweep) -> str:
    source = sweep.sweep.source
    return f"imported from {source} ({', '.join(sweep.sweep.imported_from or [])})" if source else "toolkit"
