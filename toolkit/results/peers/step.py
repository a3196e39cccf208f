"""One run of another tool at one rate, as the importers give it: its source, its records, its figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.method.goodput import REQUIRED_RECORD_COLUMNS, complete_records

# The quantities compared across tools, by our names (toolkit.method.goodput.StepSummary's columns).
QUANTITIES: tuple[str, ...] = (
    "output_tok_s", "request_throughput", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
    "itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "completed", "failed",
)  # fmt: skip


@dataclass(frozen=True)
class PeerStep:
    """One run of another tool at one rate: where it came from, its records when it saved them, its figures."""

    source: str  # the tool and its version, e.g. "vllm bench serve 0.32.0"
    file: Path
    offered_rate: float  # the rate the tool was asked for; inf: all at once
    records: pd.DataFrame | None  # RECORD_COLUMNS (step 0, offered_rate NaN) when the tool saved per-request data
    reported: dict[str, float | None]  # the tool's own figures, under our names (QUANTITIES)
    reproduced: dict[str, float | None] = field(default_factory=dict)  # the same from its records, its definitions
    model: str | None = None
    duration_s: float | None = None  # the tool's own benchmark duration


def number(value: Any) -> float | None:
    """A JSON number as a float; None for anything else (null, text, a boolean)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def records_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Request rows (RECORD_COLUMNS' keys; times in seconds from the first send) as a records frame."""
    frame = pd.DataFrame(rows, columns=list(REQUIRED_RECORD_COLUMNS))
    frame = frame.astype({"step": "int64", "request": "int64", "input_tokens": "int64", "output_tokens": "int64"})
    return complete_records(frame)
