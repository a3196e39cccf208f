"""Drift: how much the machine changed speed during a run, from its control cell (pure).

Each run measures a short control cell (the smallest context at 1 stream) before its first decode cell, after
each round and at its end (toolkit.matrix.control). The control's relative range over the run, max / min - 1,
is the drift: the machine changing speed by that much while nothing else changed. A difference between two runs
smaller than their drift can be the machine; compare widens each ratio's interval by it and marks such ratios
"within drift" (docs/METHOD.md, Drift).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from toolkit.base.schema import Measurement

CONTROL_KEY = "control"


def usable_control(m: Measurement) -> bool:
    return m.status == "Valid" and bool(m.total_tok_s) and not m.disturbed


def control_summary(records: Sequence[Measurement], window_s: float) -> dict[str, Any]:
    """run.json's `control` block: the cell, its window, every control measurement, and the change and drift
    over the usable ones (None with fewer than two)."""
    first = records[0] if records else None
    good = [m.total_tok_s for m in records if usable_control(m) and m.total_tok_s]
    shown = [
        {
            "after_round": m.round or 0,
            "started_at": m.started_at,
            "status": m.status,
            "total_tok_s": m.total_tok_s,
            "total_tok_s_ci": m.total_tok_s_ci,
            "disturbed": m.disturbed,
        }
        for m in records
    ]
    return {
        "cell": f"{first.context} × 1" if first else None,
        "context_tokens": first.context_tokens if first else None,
        "window_s": window_s,
        "measurements": shown,
        "change": good[-1] / good[0] - 1 if len(good) >= 2 else None,
        "drift": max(good) / min(good) - 1 if len(good) >= 2 else None,
    }


def run_drift(run_info: Mapping[str, Any] | None) -> float | None:
    """The run's drift (a fraction, e.g. 0.2), or None when it measured no usable control twice."""
    block = (run_info or {}).get(CONTROL_KEY) or {}
    value = block.get("drift")
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def pair_drift(a: float | None, b: float | None) -> float | None:
    """The drift two runs are compared under: the larger of theirs (None when neither measured one)."""
    known = [d for d in (a, b) if d is not None and math.isfinite(d)]
    return max(known) if known else None


def within_drift(ratio: float, drift: float | None) -> bool:
    """Whether a ratio differs from 1 by no more than the drift."""
    return drift is not None and abs(ratio - 1) <= abs(ratio) * drift


def widened(ratio: float, half_width: float, drift: float | None) -> float:
    """A ratio's half-width widened by the drift (added, as a bound on the machine's own change of speed)."""
    return half_width + (abs(ratio) * drift if drift is not None else 0.0)


def drift_note(run_info: Mapping[str, Any] | None) -> str | None:
    """The report's note on the control cell: its values at the start and the end and the drift; None without."""
    block = (run_info or {}).get(CONTROL_KEY) or {}
    values = [
        m["total_tok_s"]
        for m in block.get("measurements", [])
        if m.get("total_tok_s") and m.get("status") == "Valid" and not m.get("disturbed")
    ]
    drift, change = block.get("drift"), block.get("change")
    if drift is None or change is None or len(values) < 2:
        return None
    return (
        f"Drift: the control cell {block.get('cell')} ({block.get('window_s'):g} s window), measured "
        f"{len(values)} times from the run's start to its end, went {values[0]:,.1f} → {values[-1]:,.1f} "
        f"tok/s ({100 * change:+.1f} %), a range of {100 * drift:.1f} %: the machine changed speed by that much "
        "during the run. The ± intervals do not hold it; differences between runs smaller than it can be the "
        "machine (compare marks them within drift)."
    )
