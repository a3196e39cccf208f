"""Tables and lines of an open-loop rate sweep, as display strings (pure; docs/method/rates.md, Open-loop rates).

The steps DataFrame is `toolkit.results.rate_runs.RateSweep.steps`: one row per step, the columns of
`toolkit.method.goodput.StepSummary.row()` plus the server samples and flags the runner adds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from toolkit.method.embeddings import is_embeddings, judge_embedding_steps
from toolkit.method.goodput import ServiceLevel, highest_rate_meeting, judge_steps
from toolkit.method.slo_fraction import requests_to_show
from toolkit.reports.class_tables import CLASSES_CAPTION, MODELS_CAPTION, SHARE_COLUMNS, classes_table, models_table
from toolkit.reports.markdown_text import inert
from toolkit.reports.number_format import (
    MISSING,
    as_number,
    bounds_note,
    format_bounded,
    format_count,
    format_ms,
    format_percent,
    format_rate,
    format_tbt_ms,
    format_tok_s,
)
from toolkit.reports.tables import markdown_table

__all__ = [
    "CLASSES_CAPTION",
    "HITS_COLUMN",
    "LAG_MARK",
    "LAG_NOTE",
    "REJUDGED_COLUMNS",
    "SEARCHED_MARK",
    "SHARE_COLUMNS",
    "STEPS_CAPTION",
    "STEP_COLUMNS",
    "binding_text",
    "classes_table",
    "correlated_text",
    "endpoint_share_line",
    "format_rate",
    "level_line",
    "level_text",
    "rate_markdown",
    "rejudge",
    "rejudge_level",
    "search_line",
    "step_notes",
    "steps_table",
    "too_few_text",
    "verdict_mark",
]

STEPS_CAPTION = (
    "One row per step, in the order run · TTFT from the scheduled arrival, what a user arriving then waited "
    "(from the send in brackets; the difference is the client's lag); TPOT and the rest from the send "
    "(percentiles over the step's requests; – where the step has too few requests for one: p99 needs 100; "
    f"{bounds_note(90, 99)}) · "
    "goodput: requests/s meeting the service level, TTFT and end-to-end counted from the scheduled arrival · ✓: "
    "shown to meet it (the 95 % interval of the fraction meeting it lies at or above the target), ?: undecided "
    "(too few requests to tell, counted for what they are worth when their latencies move together)"
)
STEP_COLUMNS: tuple[str, ...] = (
    "Step", "Offered req/s", "Achieved req/s", "Completed", "Failed", "Output tok/s", "TTFT p50", "TTFT p99",
    "TPOT p50", "TPOT p99", "Goodput req/s", "Meeting SLO", "Lag p99", "Waiting mean / max", "Notes",
)  # fmt: skip
# An embeddings sweep's steps (`items_s` in their rows): inputs and their tokens per second, end-to-end latency, in
# place of the columns of generated tokens (none), TTFT and TPOT (none streamed)
_GENERATION_COLUMNS: tuple[str, ...] = ("Output tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99")
_EMBEDDING_COLUMNS: tuple[str, ...] = ("Items/s", "Input tok/s", "E2E p50", "E2E p90")
HITS_COLUMN = "Prefix-cache hits (expected)"
SEARCHED_MARK = "searched"
LAG_MARK = "lag flagged"
LAG_NOTE = (
    "lag flagged: the client sent this step's requests late (scheduling lag over its limit), so the server saw "
    "less than the offered rate; its numbers describe the client as much as the server."
)
REJUDGED_COLUMNS: tuple[str, ...] = ("step", "offered_rate", "completed", "goodput", "slo_fraction", "slo_met",
                                     "slo_verdict")  # fmt: skip


def level_line(level: ServiceLevel, classes: Sequence[Mapping[str, Any]] | None = None) -> str:
    """``Service level: TTFT ≤ 200 ms, for 90 % of requests.``; a class sweep's: each class's own limits."""
    if not classes:
        return f"Service level: {level_text(level)}."
    levels = [(c["name"], ServiceLevel(c.get("slo_ttft_ms"), c.get("slo_tpot_ms"), c.get("slo_e2e_ms"), level.target))
              for c in classes]  # fmt: skip
    each = [f"{inert(str(name))}: {level_text(own).replace(' of requests', ' of its requests')}"
            for name, own in levels]  # fmt: skip
    return f"Service level: each class its own ({'; '.join(each)})."


def level_text(level: ServiceLevel) -> str:
    """``TTFT ≤ 200 ms · TPOT ≤ 30 ms, for 90 % of requests`` (no limits: every completed request counts)."""
    named = (("TTFT", level.ttft_ms), ("TPOT", level.tpot_ms), ("end-to-end", level.e2e_ms))
    limits = [f"{name} ≤ {value:g} ms" for name, value in named if value is not None]
    head = " · ".join(limits) if limits else "no latency limit (every completed request meets it)"
    return f"{head}, for {level.target * 100:g} % of requests"


def _notes(row: Mapping[Any, Any]) -> str:
    marks = [SEARCHED_MARK if row.get("searched") else "", LAG_MARK if row.get("lag_flagged") else ""]
    return " · ".join(m for m in marks if m)


def _waiting(row: Mapping[Any, Any]) -> str:
    mean, peak = as_number(row.get("server_waiting_mean")), as_number(row.get("server_waiting_max"))
    if mean is None and peak is None:
        return MISSING
    return f"{MISSING if mean is None else f'{mean:,.1f}'} / {format_count(peak)}"


def verdict_mark(row: Mapping[Any, Any]) -> str:
    """✓ shown to meet the level (the fraction's 95 % interval at or above the target), ? undecided (the interval
    holds the target: too few requests to tell), nothing when it failed; a step from before verdicts: ✓ when its
    fraction reached the target."""
    judged = row.get("slo_verdict")
    if not isinstance(judged, str):
        return " ✓" if row.get("slo_met") else ""
    return {"meets": " ✓", "undecided": " ?"}.get(judged, "")


def _bounded(row: Mapping[Any, Any], column: str, show: Callable[[Any], str]) -> str:
    """A percentile with its 95 % distribution-free bounds when the step has them: ``812 ms [640, 1,020]``,
    ``812 ms [640, unbounded]``; the value alone for a step recorded without bounds."""
    return format_bounded(row.get(f"{column}_ms"), row.get(f"{column}_low_ms"), row.get(f"{column}_high_ms"), show)


def _arrival_first(row: Mapping[Any, Any], name: str, q: int) -> str:
    """A latency percentile from the scheduled arrival with its bounds, the same from the send beside it: ``812 ms
    [640, 1,020] (790 ms from send)``; a step without the arrival's (an imported peer's) shows the send's alone,
    labelled."""
    arrival, send = as_number(row.get(f"{name}_sched_p{q}_ms")), as_number(row.get(f"{name}_p{q}_ms"))
    if arrival is None:
        return MISSING if send is None else f"{MISSING} ({format_ms(send)} from send)"
    leading = _bounded(row, f"{name}_sched_p{q}", format_ms)
    return leading if send is None else f"{leading} ({format_ms(send)} from send)"


def _step_cells(row: Mapping[Any, Any]) -> list[str]:
    slo = format_percent(row["slo_fraction"]) + verdict_mark(row)
    return [
        str(int(row["step"])),
        format_rate(row["offered_rate"]),
        format_rate(row["achieved_rate"]),
        format_count(row["completed"]),
        format_count(row["failed"]),
        format_tok_s(row["output_tok_s"]),
        _arrival_first(row, "ttft", 50),
        _arrival_first(row, "ttft", 99),
        _bounded(row, "tpot_p50", format_tbt_ms),
        _bounded(row, "tpot_p99", format_tbt_ms),
        format_rate(row["goodput"]),
        slo,
        format_tbt_ms(row["lag_p99_ms"]),
        _waiting(row),
        _notes(row),
    ]


def _embedding_cells(row: Mapping[Any, Any]) -> list[str]:
    """An embeddings step's `_EMBEDDING_COLUMNS`: end-to-end latency from the scheduled arrival, as TTFT is shown."""
    items_s = as_number(row.get("items_s"))
    return [
        MISSING if items_s is None else f"{items_s:,.1f}",
        format_tok_s(row.get("input_tok_s")),
        _arrival_first(row, "e2e", 50),
        _arrival_first(row, "e2e", 90),
    ]


def _hits(row: Mapping[Any, Any]) -> str:
    measured, expected = as_number(row.get("prefix_cache_hit_rate")), as_number(row.get("expected_hit_rate"))
    shown = MISSING if measured is None else format_percent(measured)
    shown = shown if expected is None else f"{shown} ({format_percent(expected)})"
    external = as_number(row.get("external_prefix_cache_hit_rate"))  # a KV connector's tier, of the GPU's misses
    return shown if external is None else f"{shown}, external {format_percent(external)}"


def steps_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Display strings of every step (✓: shown to meet the service level, ?: undecided; see `verdict_mark`); with
    a shared-prefix workload, the server's prefix-cache hit rate and (in brackets) the one the workload implies, then
    its external tier's where a KV connector exports one ("62.0% (66.7%), external 20.0%"); with a response format
    or tools, the shares of the completed replies that kept to it (`SHARE_COLUMNS`), before the notes; an embeddings
    sweep's `_EMBEDDING_COLUMNS` in place of `_GENERATION_COLUMNS`."""
    ordered = steps.sort_values("step").to_dict("records")
    table = pd.DataFrame([_step_cells(row) for row in ordered], columns=list(STEP_COLUMNS), dtype=object)
    if "items_s" in steps and steps["items_s"].notna().any():
        table = table.drop(columns=list(_GENERATION_COLUMNS))
        cells = [_embedding_cells(row) for row in ordered]
        for i, column in enumerate(_EMBEDDING_COLUMNS):
            table.insert(list(table.columns).index("Failed") + 1 + i, column, [row[i] for row in cells])
    if "expected_hit_rate" in steps and steps["expected_hit_rate"].notna().any():
        table.insert(len(table.columns) - 1, HITS_COLUMN, [_hits(row) for row in ordered])
    for key, column in SHARE_COLUMNS:
        if key in steps and steps[key].notna().any():
            shares = [as_number(row.get(key)) for row in ordered]
            table.insert(len(table.columns) - 1, column, [MISSING if s is None else format_percent(s) for s in shares])
    return table


def step_notes(steps: pd.DataFrame, target: float | None = None) -> list[str]:
    """The note on lag-flagged steps, when any step is; each `/metrics` endpoint's share of the generated tokens,
    when several were scraped (`endpoint_share_line`); per step with invalid replies, why its first one broke the
    response format and how it began (`invalid_reply`); with the level's `target`, per step left undecided by
    requests that moved together (`correlated_text`)."""
    notes = [LAG_NOTE] if "lag_flagged" in steps and steps["lag_flagged"].astype(bool).any() else []
    if target is not None:
        rows = steps.sort_values("step").to_dict("records")
        notes += [text for row in rows if (text := correlated_text(row, target))]
    notes += [line] if (line := endpoint_share_line(steps)) else []
    if "invalid_reply" in steps:
        for row in steps.sort_values("step").to_dict("records"):
            if isinstance(row.get("invalid_reply"), str) and row["invalid_reply"]:
                notes.append(f"Step {int(row['step'])}, the first reply that broke the response format: "
                             f"{inert(row['invalid_reply'])}.")  # fmt: skip
    return notes


def correlated_text(row: Mapping[Any, Any], target: float) -> str:
    """Why a step with enough steady requests to show `target` was left undecided: their latencies moved together
    (a design effect above 1, toolkit.method.effective_n), so they counted as fewer independent ones than showing
    the target takes (`requests_to_show`); empty for any other step, one undecided by a fraction near the target
    included."""
    steady, deff = as_number(row.get("steady_requests")), as_number(row.get("slo_fraction_deff"))
    needed = requests_to_show(target)
    if row.get("slo_verdict") != "undecided" or steady is None or deff is None or deff <= 1 or steady < needed:
        return ""
    if steady / deff >= needed:  # worth enough: undecided by its fraction near the target, not by its count
        return ""
    fraction, rate = as_number(row.get("slo_fraction")), row.get("offered_rate")
    met = "" if fraction is None else f" with {format_percent(fraction)} of them meeting the level"
    offered = format_rate(rate) + (" req/s" if as_number(rate) is not None else "")  # "all at once" for inf
    return (
        f"Step {int(row['step'])} ({offered}) is undecided although its "
        f"{format_count(steady)} steady requests are enough to show {100 * target:g} %{met}: their latencies moved "
        f"together (design effect {deff:.1f}, as when a queue builds), so they count as {steady / deff:.1f} "
        f"independent requests, fewer than the {needed:,} it takes; a longer step would decide it."
    )


def endpoint_share_line(steps: pd.DataFrame) -> str | None:
    """``Generated tokens by /metrics endpoint (server_metrics, in order), over the steps: #0 52.0%, #1 48.0%.``
    from the steps' `endpoint_generation_tokens` (steps where an endpoint's count is unknown left out); None when
    there are none."""
    if "endpoint_generation_tokens" not in steps:
        return None
    totals: list[float] | None = None
    for shares in steps["endpoint_generation_tokens"]:
        if not isinstance(shares, list) or not shares or any(as_number(s) is None for s in shares):
            continue
        if totals is None:
            totals = [0.0] * len(shares)
        if len(shares) == len(totals):
            totals = [t + float(s) for t, s in zip(totals, shares, strict=True)]
    if not totals or not (whole := sum(totals)):
        return None
    parts = ", ".join(f"#{i} {format_percent(t / whole)}" for i, t in enumerate(totals))
    return f"Generated tokens by /metrics endpoint (server_metrics, in order), over the steps: {parts}."


def _listed_line(steps: pd.DataFrame) -> str:
    pairs = [(float(r), bool(m)) for r, m in zip(steps["offered_rate"], steps["slo_met"], strict=True)]
    highest, failing = highest_rate_meeting(pairs)
    if highest is None:
        return "No step met the service level" + (
            f" (the lowest, {format_rate(failing)} req/s, failed it)." if failing is not None else "."
        )
    if failing is None:
        return f"Every step met the service level: the highest, {format_rate(highest)} req/s, is a lower bound."
    return (
        f"Highest rate meeting the service level: {format_rate(highest)} req/s; {format_rate(failing)} req/s failed it."
    )


def too_few_text(search: Mapping[str, Any], target: float | None) -> str:
    """The sentence saying which rates held too few steady requests to be shown to meet the target (sweep.json's
    search ``requests_to_show`` and ``too_few``, toolkit.rates.search); empty when none did, or for a search
    recorded without them."""
    needed, short = search.get("requests_to_show"), search.get("too_few") or []
    if not needed or not short or target is None:
        return ""
    rates = ", ".join(format_rate(float(r)) for r in short)
    return (
        f"Showing {100 * target:g} % takes at least {needed:,} steady requests at a rate (95 %); at {rates} req/s "
        "the steps held fewer, so those rates could only fail or stay undecided: longer steps (duration_s or "
        "requests_per_step) would decide them."
    )


def binding_text(search: Mapping[str, Any], target: float | None) -> str:
    """A class sweep's binding class (sweep.json's search ``binding``, toolkit.rates.search.binding_class) and the
    limit its requests kept least, e.g. ``rag (TTFT p90)`` at a target of 0.9."""
    binding = search.get("binding")
    if not binding:
        return "no class shown to fail"
    limit = binding.get("limit")
    shown = "" if limit is None or target is None else f" ({str(limit).upper()} p{100 * target:g})"
    return f"{inert(str(binding['class']))}{shown}"


def search_line(
    steps: pd.DataFrame, search: Mapping[str, Any] | None = None, precision: Any = None, target: float | None = None
) -> str:
    """The highest rate meeting the service level: the search's answer and bracket when the sweep searched
    (``search``: sweep.json's ``{"highest_rate", "bracket", "undecided"}``, judged by intervals), with the rates
    whose steps were too short to show the `target` (`too_few_text`), else read from the steps' point fractions
    (their `slo_met`)."""
    if not search:
        return _listed_line(steps)
    short = too_few_text(search, target)
    binding = f" Binding class: {binding_text(search, target)}." if "binding" in search else ""
    return _search_line(search, precision) + binding + (" " + short if short else "")


def _search_line(search: Mapping[str, Any], precision: Any) -> str:
    low, high = [*list(search.get("bracket") or []), None, None][:2]
    highest = search.get("highest_rate")
    within = f" to {float(precision) * 100:g} %" if as_number(precision) is not None else ""
    undecided = [format_rate(r) for r in search.get("undecided") or []]
    left = f"; undecided at {', '.join(undecided)} req/s" if undecided else ""
    if highest is None:
        lowest = f" (the lowest shown to fail: {format_rate(high)} req/s{left})" if high is not None else left
        return f"Searched{within}: no rate was shown to meet the service level{lowest}."
    bracket = (
        f"meets at {format_rate(low)} req/s, fails at {format_rate(high)} req/s{left}; the highest rate meeting it "
        "lies between, each verdict at 95 %"
        if high is not None
        else f"meets at {format_rate(low)} req/s, no probed rate was shown to fail{left}"
    )
    return f"Highest rate meeting the service level: {format_rate(highest)} req/s (searched{within}: {bracket})."


def rejudge_level(
    level: ServiceLevel,
    ttft_ms: float | None = None,
    tpot_ms: float | None = None,
    e2e_ms: float | None = None,
    target: float | None = None,
) -> ServiceLevel:
    """`level` with the limits given replaced: None keeps the sweep's own, 0 removes the limit."""

    def pick(new: float | None, old: float | None) -> float | None:
        return old if new is None else (None if new == 0 else float(new))

    return ServiceLevel(
        ttft_ms=pick(ttft_ms, level.ttft_ms),
        tpot_ms=pick(tpot_ms, level.tpot_ms),
        e2e_ms=pick(e2e_ms, level.e2e_ms),
        target=level.target if target is None else float(target),
    )


def rejudge(records: pd.DataFrame, level: ServiceLevel) -> pd.DataFrame:
    """Every step judged again from its per-request records alone: offered rate, completed, goodput (req/s
    meeting `level`), the fraction meeting it and whether that reaches the target."""
    if records.empty:
        return pd.DataFrame(columns=list(REJUDGED_COLUMNS))
    judge = judge_embedding_steps if is_embeddings(records) else judge_steps
    return judge(records, level)[list(REJUDGED_COLUMNS)]


def rate_markdown(
    steps: pd.DataFrame,
    level: ServiceLevel,
    search: Mapping[str, Any] | None = None,
    precision: Any = None,
    images: Mapping[str, str] | None = None,
    classes: Sequence[Mapping[str, Any]] | None = None,
    carried: str = "",
) -> str:
    """The report.md section of a sweep: heading, service level (a class sweep's `classes`: each class's own),
    highest rate and what each request `carried` beyond text (class_compare.images_line), steps table, notes, its
    classes' table, a model mix's table of its models, figures."""
    out = [
        "## Open-loop rates",
        level_line(level, classes),
        search_line(steps, search, precision, level.target) + carried,
        STEPS_CAPTION,
        markdown_table(steps_table(steps)),
        *step_notes(steps, level.target),
    ]
    if (by_class := classes_table(steps)) is not None:
        out += [CLASSES_CAPTION, markdown_table(by_class)]
    if (by_model := models_table(steps)) is not None:
        out += [MODELS_CAPTION, markdown_table(by_model)]
    out += [f"![{key}]({path})" for key, path in (images or {}).items()]
    return "\n\n".join(out) + "\n"
