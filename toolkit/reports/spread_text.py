"""The report's words for a cell's rounds and the run's drift (toolkit.results.rounds, toolkit.method.drift)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from toolkit.method.drift import drift_note
from toolkit.method.number_format import as_number, format_tok_s

REPEATS_NOTE = (
    "N rounds low–high: the whole matrix was measured N times, round after round; the cell shows the median of its "
    "undisturbed rounds and their range (± stays the window's own interval, the median of the rounds')."
)


def rounds_text(row: Mapping[str, Any]) -> str | None:
    """``3 rounds 300.0–360.0`` for a cell combined from more than one round; None otherwise."""
    repeats = as_number(row.get("repeats"))
    low, high = as_number(row.get("total_tok_s_repeat_min")), as_number(row.get("total_tok_s_repeat_max"))
    if repeats is None or repeats < 2 or low is None or high is None:
        return None
    return f"{int(repeats)} rounds {format_tok_s(low)}–{format_tok_s(high)}"


def spread_notes(rows: Iterable[Mapping[str, Any]], run_info: Mapping[str, Any] | None) -> list[str]:
    """The repeats note when a cell has rounds, then the drift note when the run measured its control twice."""
    notes = [REPEATS_NOTE] if any(rounds_text(r) for r in rows) else []
    return notes + [n for n in [drift_note(run_info)] if n]
