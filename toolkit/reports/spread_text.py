"""The report's words for a cell's rounds and the run's drift (toolkit.results.rounds, toolkit.method.drift)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from toolkit.method.drift import usable
from toolkit.reports.number_format import as_number, format_tok_s
from toolkit.results.documents.run_blocks import ControlBlock

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


def drift_note(run_info: Mapping[str, Any] | None) -> str | None:
    """The report's note on the control cell: its values at the start and the end, the machine's change with its
    interval (the range, for a run recorded before trends); None without."""
    block = ControlBlock.of_run(run_info)
    values = [m.total_tok_s for m in block.measurements or [] if usable(m)]
    drift, change = block.drift, block.change
    if drift is None or change is None or len(values) < 2:
        return None
    head = (
        f"Drift: the control cell {block.cell} ({block.window_s:g} s window), measured "
        f"{len(values)} times from the run's start to its end, went {values[0]:,.1f} → {values[-1]:,.1f} tok/s"
    )
    low, high = block.change_low, block.change_high
    if block.drift_basis != "trend" or low is None or high is None:
        return (
            f"{head} ({100 * change:+.1f} %), a range of {100 * drift:.1f} %: the machine changed speed by that much "
            "during the run. The ± intervals do not hold it; differences between runs smaller than it can be the "
            "machine (compare marks them within drift)."
        )
    return (
        f"{head}: a trend of {100 * change:+.1f} % over the run (95 %: {100 * low:+.1f} to {100 * high:+.1f} %), the "
        "machine's change of speed with the control's own noise averaged out. The ± intervals do not hold it; "
        "compare divides the throughput ratios by the machine's change between the two cells, and marks a difference "
        "smaller than the drift within drift (it can be a change between the runs, which no control sees)."
    )
