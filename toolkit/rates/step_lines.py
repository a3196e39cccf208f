"""The lines a rate step prints when it ends: its figures in one line, and one line each for failed, cut or invalid
replies, unread or mismatched server timing, and the classes' and models' shares (presentation only)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from toolkit.loadgen.stream_events import REPLY_BYTES_PER_TOKEN
from toolkit.method.breakdown import mismatch_text


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"


def failure_text(row: dict[str, Any], frame: pd.DataFrame) -> str | None:
    """One line when requests of the step failed: how many, and what the server did to the first of them (its
    error, as the client cut it)."""
    errors = frame["error"].dropna()
    errors = errors[errors != ""]
    if not len(errors):
        return None
    first = " ".join(str(errors.iloc[0]).split())
    return f"step {row['step']}: {len(errors)} of {row['requests']} requests failed; the first: {first}"


def cut_text(row: dict[str, Any], frame: pd.DataFrame) -> str | None:
    """One line when replies of the step were cut to their byte bound (a conversation's history keeps the head):
    how many, and the first one's note."""
    notes = frame["note"].dropna()
    notes = notes[notes.str.startswith("reply cut")]
    if not len(notes):
        return None
    return (f"step {row['step']}: {len(notes)} of {row['requests']} replies cut to {REPLY_BYTES_PER_TOKEN:,} bytes a "
            f"token asked for; the first: {notes.iloc[0]}")  # fmt: skip


def invalid_text(row: dict[str, Any]) -> str | None:
    """One line when replies of the step broke the response format: the first one's reason and start, so that a
    low valid share explains itself."""
    if not row.get("invalid_reply"):
        return None
    return f"step {row['step']}: the first reply that broke the response format: {row['invalid_reply']}"


def timing_text(row: dict[str, Any], frame: pd.DataFrame) -> str | None:
    """One line when the server's timing of some requests was not read (a malformed `metrics` object) or breaks
    the cross-check against the client's clock (toolkit.method.breakdown)."""
    notes = frame["note"].dropna()
    unread = notes[notes.str.contains("server timing not read", regex=False)]
    lines = []
    if len(unread):
        first = next(n for n in unread.iloc[0].split("; ") if n.startswith("server timing not read"))
        lines.append(f"step {row['step']}: {len(unread)} of {row['requests']} requests' {first}")
    mismatch = mismatch_text(f"step {row['step']}", row, row["requests"])
    if mismatch:
        lines.append(mismatch)
    return "\n".join(lines) or None


def classes_text(row: dict[str, Any]) -> str:
    """One line per finished step of a class sweep: each class's share of the arrivals (its weight's), TTFT p90,
    and the share of its requests meeting its own level, with its interval and verdict."""
    parts = []
    for name, c in row["classes"].items():
        parts.append(
            f"{name} {c['requests']} req ({c['share']:.0%}, weight {c['weight_share']:.0%}), TTFT p90 "
            f"{_ms(c.get('ttft_sched_p90_ms'))}, {c['slo_fraction']:.0%} meet its SLO [{c['slo_fraction_low']:.2f}, "
            f"{c['slo_fraction_high']:.2f}] {c['slo_verdict']}"
        )
    return f"step {row['step']} classes: " + "; ".join(parts)


def models_text(row: dict[str, Any], slo: bool) -> str:
    """One line per finished step of a model mix: each model's requests, share of the arrivals (its weight's),
    achieved rate, TTFT p90 and TPOT p90, and its goodput where the sweep has a service level."""
    parts = []
    for name, m in row["models"].items():
        rate = "-" if m.get("achieved_rate") is None else f"{m['achieved_rate']:.2f} req/s"
        parts.append(
            f"{name} {m['requests']} req ({m['share']:.0%}, weight {m['weight_share']:.0%}), {rate}, TTFT p90 "
            f"{_ms(m.get('ttft_sched_p90_ms'))}, TPOT p90 {_ms(m.get('tpot_p90_ms'))}"
            + (f", goodput {m['goodput']:.2f} req/s" if slo and m.get("goodput") is not None else "")
        )
    seen = row.get("lora_adapters")
    server = "" if not seen else (f" (the server ran adapters {', '.join(seen['running']) or 'none'}, queued "
                                  f"{', '.join(seen['waiting']) or 'none'}; max_lora {seen['max_lora']})")  # fmt: skip
    return f"step {row['step']} models: " + "; ".join(parts) + server


def progress_text(row: dict[str, Any], slo: bool) -> str:
    """One line per finished step."""
    rate = row["offered_rate"]
    offered = "inf" if rate == float("inf") else f"{rate:g}"
    achieved = "-" if row["achieved_rate"] is None else f"{row['achieved_rate']:.2f}"
    unit = "conversations/s" if row.get("workload") == "conversation" else "req/s"
    kind = " (search)" if row["searched"] else ""
    kind = f" (cold control of step {row['control_of']})" if row.get("control_of") is not None else kind
    if row.get("items_s") is not None:  # an embeddings step: inputs and their tokens; no first token
        served = (f"{row['items_s']:.1f} items/s, {row['input_tok_s']:.0f} tok/s in, e2e p50 "
                  f"{_ms(row['e2e_p50_ms'])} p90 {_ms(row['e2e_p90_ms'])}")  # fmt: skip
    else:
        served = (
            f"{row['output_tok_s']:.0f} tok/s out, TTFT p50 {_ms(row['ttft_p50_ms'])} p99 {_ms(row['ttft_p99_ms'])}"
        )
    text = (
        f"step {row['step']}{kind}: {offered} {unit} offered, {achieved} req/s sent, {row['completed']}/"
        f"{row['requests']} ok, {served}, waiting max "
        f"{'-' if row['server_waiting_max'] is None else row['server_waiting_max']}, lag p99 {_ms(row['lag_p99_ms'])}"
    )
    if slo:
        text += f", goodput {row['goodput']:.2f} req/s ({row['slo_fraction']:.0%} meet the SLO)"
    if row.get("schema_valid_share") is not None:
        text += f", {row['schema_valid_share']:.0%} valid"
    if row.get("tool_called_share") is not None:
        text += f", {row['tool_called_share']:.0%} called a tool"
    if row["lag_flagged"]:
        text += " [client lagged: the schedule was not held]"
    return text


def logged_text(row: dict[str, Any]) -> str:
    """What the server's log received during the step (`server_log_requests`), by adapter; or that it named none
    of the step's requests (a server started without vLLM's --enable-log-requests)."""
    logged = row["server_log_requests"]
    counts = [f"{logged['base']} for the base model"] + [f"{n} for {name}" for name, n in logged["adapters"].items()]
    if logged["base"] + sum(logged["adapters"].values()) == 0 and row["requests"]:
        return (f"step {row['step']} server log: none of its {row['requests']} requests logged (start vLLM with "
                "--enable-log-requests)")  # fmt: skip
    return f"step {row['step']} server log: received {', '.join(counts)}"


def step_lines(row: dict[str, Any], frame: pd.DataFrame, slo: bool) -> list[str]:
    """What a finished step prints: its progress line, then each note that applies, in a fixed order."""
    notes = [failure_text(row, frame), cut_text(row, frame), invalid_text(row), timing_text(row, frame),
             classes_text(row) if row.get("classes") else None,
             models_text(row, slo) if row.get("models") else None,
             logged_text(row) if row.get("server_log_requests") else None]  # fmt: skip
    return [progress_text(row, slo)] + [note for note in notes if note is not None]
