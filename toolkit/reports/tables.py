"""Report tables, the markdown report and its HTML header and notes, from a results DataFrame.

The DataFrame has the schema's columns, one row per :class:`toolkit.base.schema.Measurement`.
Everything here is pure: it builds strings and DataFrames of display strings, and never does I/O.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from toolkit.base.schema import PHASE_TITLES, STATUSES
from toolkit.method.disturbed import DISTURBED_MARK, disturbed_count_text, is_disturbed
from toolkit.method.overhead import matrix_overhead, overhead_line
from toolkit.method.status import concurrency_not_held
from toolkit.reports.embeddings_tables import EMBEDDINGS_CAPTION, embeddings_table, has_embeddings
from toolkit.reports.extras import Row, extras_table, table_rows
from toolkit.reports.markdown_text import inert
from toolkit.reports.number_format import (
    MISSING,
    as_number,
    format_active,
    format_count,
    format_ms,
    format_seconds,
    format_tbt_ms,
    format_tok_s,
)
from toolkit.reports.spread_text import rounds_text, spread_notes

REPORT_TITLE = "Speed test matrix"
PREFILL_CAPTION = "prompt tok/s by context length"
DECODE_CAPTION = "total tok/s · rows are context length, columns are simultaneous requests"
ALL_CAPTION = "Latencies are medians. Total tok/s is output across all simultaneous requests."
STATUS_NOTES: dict[str, str] = {
    "Requests queued": "Requests queued: the server could not run all requests at once, so some waited in a queue.",
    "Over capacity": "Over capacity: not run because this many requests at this context "
    "would exceed the server's KV cache.",
    "Error": "Error: a request failed; see the error column of the results.",
}
SATURATED_MARK = "client saturated"
SATURATED_NOTE = (
    "client saturated: the load generator fell behind (event-loop lag p99 over 20 ms or its CPU over 90 %), "
    "so the cell may measure the client as much as the server."
)
DISTURBED_NOTE = (
    "disturbed: a pause of the machine (no token from any stream for over a second, the client's event loop "
    "blocked, or no server sample) hit every attempt at this measurement, retries included; its numbers "
    "understate the server. They are greyed in the matrix and left out of service levels, best-of figures and "
    "comparisons."
)
SPREAD_NOTE = (
    "±: the 95 % interval of total tok/s from the kept window's sub-windows (docs/method/spread.md). It covers "
    "the noise inside the window, not the machine changing speed between windows or runs."
)
NOT_HELD_MARK = "concurrency not held"
NOT_HELD_NOTE = (
    "concurrency not held: on average fewer than 90 % of the requests were running during the window (the time "
    "between a stream's requests, or a client falling behind), while none waited; the status is unchanged."
)
THROTTLED_MARK = "GPU throttled"
THROTTLED_NOTE = (
    "GPU throttled: during the window a GPU held its clocks down for power or heat (NVML clock event reasons), "
    "so the cell measures a slowed GPU."
)
CLIENT_BASIS_NOTE = (
    "Server-side figures were not available, so statuses are judged client-side: the server's /metrics could not "
    "be read or held none of vLLM's gauges (a gateway's own metrics), so these cells' statuses come from the "
    "client's own count of streams decoding, not from the server's running and waiting requests."
)
METRICS_SOURCE_NOTE = (
    "{source}: their token counters and running and waiting requests are summed, the KV cache use is the highest "
    "of them, and the KV cache size (for Over capacity) is the first one's."
)
# A decode cell whose requests carried a response format or tools: the share of its completed replies that kept to
# it, or called a tool (the run's `response_format`, `tools`); absent from a run without them.
REPLY_SHARE_MARKS = {"schema_valid_share": "valid", "tool_called_share": "called a tool"}
REPLY_SHARE_NOTE = (
    "valid, called a tool: every decode request carried the run's response format (or tools); the share of each "
    "cell's completed requests whose reply parsed as JSON and kept to the format (or called a tool). The server "
    "constrained its decoding to them, so these cells measure that speed, not plain text's."
)
TTFT_NOTE = "TTFT is measured after the benchmark warms the server's prompt cache, so it mostly excludes prefill."
STATUS_CLASSES = dict(zip(STATUSES, ("status-valid", "status-queued", "status-over", "status-error"), strict=True))
DISTURBED_CLASS = "status-disturbed"
ALL_COLUMNS: tuple[str, ...] = (
    "Phase", "Context", "Requests at once", "Status", "Total tok/s", "Per request tok/s", "TTFT",
    "Time between tokens", "Average active requests", "Completed requests", "Output tokens", "Measured for",
)  # fmt: skip
# What figures and comparisons call the result columns, and the units an axis adds.
QUANTITY_TITLES: dict[str, str] = {
    "total_tok_s": "Total tok/s", "per_request_tok_s": "Per request tok/s", "ttft_ms": "TTFT",
    "tbt_ms": "Time between tokens", "avg_active": "Average active requests",
    "joules_per_token": "Energy per output token", "tokens_per_joule": "Output tokens per joule",
}  # fmt: skip
QUANTITY_UNITS: dict[str, str] = {"ttft_ms": "ms", "tbt_ms": "ms", "joules_per_token": "J"}
IMAGE_TITLES: dict[str, str] = {
    "prefill": "Prefill",
    "decode": "Sustained decode heatmaps",
    "scaling": "Total tok/s by simultaneous requests",
}

_INFO_SECTIONS = (("hardware", "Hardware"), ("engine", "Engine"), ("run", "Run"))


def _unique(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def _decode_grid(df: pd.DataFrame) -> tuple[list[str], list[int], dict[tuple[str, int], Row]]:
    rows = table_rows(df, "decode")
    cells = {(r["context"], int(r["concurrency"])): r for r in rows}
    return _unique(r["context"] for r in rows), sorted({n for _, n in cells}), cells


def _matrix_cell(row: Row | None) -> str:
    if row is None:
        return MISSING
    if row["status"] in ("Over capacity", "Error"):
        return str(row["status"])
    half_width = as_number(row.get("total_tok_s_ci"))
    parts = [format_tok_s(row["total_tok_s"]) + ("" if half_width is None else f" ± {format_tok_s(half_width)}")]
    parts += [text for text in [rounds_text(row)] if text]
    if row["status"] != "Valid":
        parts.append(str(row["status"]))
    if as_number(row["ttft_ms"]) is not None:
        parts.append(f"{format_ms(row['ttft_ms'])} TTFT")
    if _saturated(row):
        parts.append(SATURATED_MARK)
    if is_disturbed(row.get("disturbed")):
        parts.append(DISTURBED_MARK)
    if _not_held(row):
        parts.append(NOT_HELD_MARK)
    if _throttled(row):
        parts.append(THROTTLED_MARK)
    parts += [f"{share:.0%} {mark}" for column, mark in REPLY_SHARE_MARKS.items()
              if (share := as_number(row.get(column))) is not None]  # fmt: skip
    return " · ".join(parts)


def _throttled(row: Row) -> bool:
    return row.get("gpu_throttled") in (True, "True", "true", 1)


def _not_held(row: Row) -> bool:
    """A Valid cell whose running count stayed under 90 % of N (a queued cell's is low because it queued)."""
    return row["status"] == "Valid" and concurrency_not_held(as_number(row.get("concurrency_held")))


def _saturated(row: Row) -> bool:
    """Saturated and not disturbed: a pause of the machine also lags the loop, so it cannot be told apart."""
    return bool(row.get("client_saturated")) and not is_disturbed(row.get("disturbed"))


def decode_matrix(df: pd.DataFrame) -> pd.DataFrame:
    """Display strings of the decode matrix: rows context labels, columns simultaneous requests."""
    contexts, levels, cells = _decode_grid(df)
    data = [[_matrix_cell(cells.get((c, n))) for n in levels] for c in contexts]
    return pd.DataFrame(data, index=pd.Index(contexts, name="Context"), columns=pd.Index(levels), dtype=object)


def prefill_table(df: pd.DataFrame) -> pd.DataFrame:
    """Context, prompt tok/s and cold TTFT of every prefill measurement."""
    rows = table_rows(df, "prefill")
    data = [
        [r["context"], _marked(format_tok_s(r["total_tok_s"], trim_zero=True), r), format_ms(r["ttft_ms"])]
        if r["total_tok_s"] is not None
        else [r["context"], str(r["status"]), format_ms(r["ttft_ms"])]
        for r in rows
    ]
    return pd.DataFrame(data, columns=["Context", "Prompt tok/s", "TTFT"], dtype=object)


def _marked(text: str, row: Row) -> str:
    return f"{text} · {DISTURBED_MARK}" if is_disturbed(row.get("disturbed")) else text


def _measurement_cells(row: Row) -> list[str]:
    phase = PHASE_TITLES.get(row["phase"], str(row["phase"]))
    head = [phase, row["context"], format_count(row["concurrency"]), str(row["status"])]
    head += [format_tok_s(row["total_tok_s"])]
    if row["phase"] == "prefill":  # one cold request: the published reports leave decode columns empty
        completed = 1 if row["completed"] is None and row["status"] == "Valid" else row["completed"]
        ttft, done = format_ms(row["ttft_ms"]), format_count(completed)
        return [*head, MISSING, ttft, MISSING, MISSING, done, MISSING, MISSING]
    return [
        *head,
        format_tok_s(row["per_request_tok_s"]),
        format_ms(row["ttft_ms"]),
        format_tbt_ms(row["tbt_ms"]),
        format_active(row["avg_active"]),
        format_count(row["completed"]),
        format_count(row["output_tokens"]),
        format_seconds(row["measured_s"]),
    ]


def all_measurements_table(df: pd.DataFrame) -> pd.DataFrame:
    """Every measurement with exactly the published report's columns."""
    return pd.DataFrame([_measurement_cells(r) for r in table_rows(df)], columns=list(ALL_COLUMNS), dtype=object)


def footnotes(df: pd.DataFrame, *, ttft_note: bool = True, run_info: Mapping[str, Any] | None = None) -> list[str]:
    """Notes for the non-valid statuses present, the marks, the rounds and drift (with `run_info`), then (with decode
    rows) the TTFT note."""
    present = set(df["status"]) if len(df) else set()
    notes = [STATUS_NOTES[s] for s in STATUSES if s in present and s in STATUS_NOTES]
    decode_rows = table_rows(df, "decode")
    if any(_saturated(r) for r in decode_rows):
        notes.append(SATURATED_NOTE)
    if any(is_disturbed(r.get("disturbed")) for r in table_rows(df)):
        notes.append(DISTURBED_NOTE)
    if any(as_number(r.get("total_tok_s_ci")) is not None for r in decode_rows):
        notes.append(SPREAD_NOTE)
    if any(_not_held(r) for r in decode_rows):
        notes.append(NOT_HELD_NOTE)
    if any(_throttled(r) for r in decode_rows):
        notes.append(THROTTLED_NOTE)
    if any(r.get("status_basis") == "client" for r in decode_rows):
        problem = ((run_info or {}).get("server") or {}).get("metrics_problem")
        notes.append(CLIENT_BASIS_NOTE + (f" What /metrics gave: {problem}." if problem else ""))
    server = (run_info or {}).get("server") or {}
    if (source := server.get("metrics_source")) and server.get("metrics_available"):  # server_metrics, read
        notes.append(METRICS_SOURCE_NOTE.format(source=source[:1].upper() + source[1:]))
    if any(as_number(r.get(column)) is not None for r in decode_rows for column in REPLY_SHARE_MARKS):
        notes.append(REPLY_SHARE_NOTE)
    notes += spread_notes(decode_rows, run_info)
    if ttft_note and len(df) and (df["phase"] == "decode").any():
        notes.append(TTFT_NOTE)
    return notes


def _span(items: list[Any]) -> str:
    return str(items[0]) if len(items) == 1 else f"{items[0]}–{items[-1]}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def summary_line(df: pd.DataFrame) -> str:
    """``6 contexts (8K–251K) × 8 concurrency levels (1–128) · prefill at 8K, …`` from the results, then how many
    measurements stayed disturbed after their retries (``· 2 of 14 measurements disturbed``), if any."""
    contexts, levels, _ = _decode_grid(df)
    parts = []
    if contexts:
        parts.append(
            f"{_plural(len(contexts), 'context')} ({_span(contexts)}) × "
            f"{_plural(len(levels), 'concurrency level')} ({_span(levels)})"
        )
    prefill = _unique(r["context"] for r in table_rows(df, "prefill"))
    if prefill:
        parts.append("prefill at " + ", ".join(prefill))
    embedded = table_rows(df, "embeddings")
    if embedded:
        lengths, counts = _unique(r["context"] for r in embedded), _unique(r["concurrency"] for r in embedded)
        parts.append(f"embeddings: {_plural(len(lengths), 'input length')} ({_span(lengths)}) × "
                     f"{_plural(len(counts), 'concurrency level')} ({_span(counts)})")  # fmt: skip
    disturbed = disturbed_count_text(df["disturbed"]) if "disturbed" in df.columns else None
    return " · ".join([*parts, *([disturbed] if disturbed else [])])


def error_lines(df: pd.DataFrame, width: int = 160) -> list[str]:
    """One line per measurement that ended in Error: where, then what the server did (``decode 64 ×1: HTTP 500: …``)."""
    if "error" not in df.columns:
        return []
    failed = df[df["error"].notna() & (df["error"] != "")]
    return [
        f"{row['phase']} {row['context']} ×{row['concurrency']}: {' '.join(str(row['error']).split())}"[:width]
        for _, row in failed.iterrows()
    ]


def engine_line(run_info: Mapping[str, Any]) -> str:
    """``vllm · 0.29.0 · INT4`` from the engine section's Engine, Version and Quantization."""
    engine = {str(k).lower(): v for k, v in (run_info.get("engine") or {}).items()}
    return " · ".join(str(engine[k]) for k in ("engine", "version", "quantization") if engine.get(k))


def _md_cell(value: Any) -> str:
    return inert(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame, *, index: bool = False) -> str:
    """A pipe table of display strings (the index becomes the first column when ``index``)."""
    if index:
        frame = frame.reset_index()
    header = [_md_cell(c) for c in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md_cell(v) for v in values) + " |" for values in frame.itertuples(index=False)]
    return "\n".join(lines)


def _fenced(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}\n{text}\n{fence}"


def _note_paragraphs(notes: list[str]) -> list[str]:
    status = " ".join(n for n in notes if n != TTFT_NOTE)
    return [p for p in (status, TTFT_NOTE if TTFT_NOTE in notes else "") if p]


def _image(key: str, path: str) -> str:
    return f"![{IMAGE_TITLES.get(key, key)}]({path})"


def report_markdown(df: pd.DataFrame, run_info: Mapping[str, Any], images: dict[str, str] | None = None) -> str:
    """The full report in the published section order; ``images`` maps prefill/decode/scaling to paths."""
    images = dict(images or {})
    out = [f"# {REPORT_TITLE}"]
    if run_info.get("title"):
        out.append(f"**{inert(run_info['title'])}**")
    out += [inert(p) for p in (engine_line(run_info), run_info.get("summary") or summary_line(df)) if p]
    for key, heading in _INFO_SECTIONS:
        items = run_info.get(key) or {}
        if items:
            out += [f"## {heading}", "\n".join(f"- **{inert(k)}**: {inert(v)}" for k, v in items.items())]
    if run_info.get("launch_command"):
        out += ["## Launch command", _fenced(str(run_info["launch_command"]))]
    if (df["phase"] == "prefill").any():
        out += ["## Prefill", PREFILL_CAPTION, markdown_table(prefill_table(df))]
    if "prefill" in images:
        out.append(_image("prefill", images.pop("prefill")))
    decode = df[df["phase"] == "decode"]
    if len(decode):
        out += ["## Sustained decode", DECODE_CAPTION, markdown_table(decode_matrix(df), index=True)]
        out += _note_paragraphs(footnotes(decode, run_info=run_info))
    if has_embeddings(df):
        out += ["## Embeddings", EMBEDDINGS_CAPTION, markdown_table(embeddings_table(df))]
    out += [_image(key, path) for key, path in images.items()]
    out += ["## All measurements", ALL_CAPTION, markdown_table(all_measurements_table(df))]
    out += _note_paragraphs(footnotes(df, ttft_note=False))
    extras = extras_table(df)
    if len(extras):
        out += ["## Extras", markdown_table(extras), *overhead_notes(df)]
    return "\n\n".join(out) + "\n"


def overhead_notes(df: pd.DataFrame) -> list[str]:
    """The matrix's measured / wall time by phase (toolkit.method.overhead), when the run recorded cell wall times."""
    spent = matrix_overhead(table_rows(df)) if "cell_wall_s" in df.columns else None
    return [] if spent is None else [f"Time: {overhead_line(spent)}."]


def _esc(value: Any) -> str:
    return html.escape(str(value))


def status_class(cell: str) -> str:
    """CSS class of a displayed status or matrix cell (``status-over`` for "Over capacity", …).

    A cell marked disturbed is greyed whatever its status: its numbers are not to be used.
    """
    if cell in STATUS_CLASSES:
        return STATUS_CLASSES[cell]
    if cell == MISSING:
        return ""
    if any(part.startswith(DISTURBED_MARK) for part in cell.split(" · ")):  # "disturbed", "disturbed in B"
        return DISTURBED_CLASS
    return STATUS_CLASSES["Requests queued" if "Requests queued" in cell else "Valid"]


def notes_html(notes: list[str]) -> str:
    """Footnote paragraphs (status notes together, then the TTFT note), escaped."""
    return "".join(f'<p class="footnote">{_esc(p)}</p>' for p in _note_paragraphs(notes))


def header_html(df: pd.DataFrame, run_info: Mapping[str, Any], *, with_h1: bool = True) -> str:
    """The report's header: its h1 (``with_h1``), title, engine and summary lines, the run_info blocks."""
    parts = [f"<h1>{REPORT_TITLE}</h1>"] if with_h1 else []
    lines = [run_info.get("title"), engine_line(run_info), run_info.get("summary") or summary_line(df)]
    parts += [f"<p>{_esc(line)}</p>" for line in lines if line]
    for key, heading in _INFO_SECTIONS:
        items = run_info.get(key) or {}
        if items:
            rows = "".join(f"<li><b>{_esc(k)}</b>: {_esc(v)}</li>" for k, v in items.items())
            parts.append(f"<h2>{heading}</h2><ul>{rows}</ul>")
    if run_info.get("launch_command"):
        parts.append(f"<h2>Launch command</h2><pre><code>{_esc(run_info['launch_command'])}</code></pre>")
    return "".join(parts)
