"""How much of a matrix's wall time measured something: measured / wall, and where the rest went (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

PHASES: tuple[str, ...] = ("prefill", "readiness", "windows", "retries", "drain", "other")


def _seconds(row: Mapping[str, Any], key: str) -> float:
    value = row.get(key)
    return 0.0 if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def matrix_overhead(rows: Iterable[Mapping[str, Any]]) -> dict[str, float] | None:
    """Measured seconds, wall seconds, their ratio and the wall seconds per phase; None without timed cells.

    Measured: each Valid or queued decode window (`measured_s`) and each prefill request's TTFT. Wall: each
    cell from its start to drained (`cell_wall_s`). Phases split the wall time: prefill requests, the decode
    readiness ramps, the kept windows, disturbed windows or requests measured again, the drains, and the rest
    (prompt building, the per-context cache warm-up).
    """
    timed = [r for r in rows if _seconds(r, "cell_wall_s") > 0]
    if not timed:
        return None
    phases = dict.fromkeys(PHASES, 0.0)
    measured = 0.0
    for r in timed:
        retries = _seconds(r, "retries_s")
        phases["retries"] += retries
        if r.get("phase") == "prefill":
            phases["prefill"] += _seconds(r, "cell_wall_s") - retries
            measured += _seconds(r, "ttft_ms") / 1000
            continue
        phases["readiness"] += _seconds(r, "readiness_s")
        phases["windows"] += _seconds(r, "windows_s") - retries
        phases["drain"] += _seconds(r, "drain_s")
        measured += _seconds(r, "measured_s") if r.get("status") != "Error" else 0.0
    wall = sum(_seconds(r, "cell_wall_s") for r in timed)
    phases["other"] = max(0.0, wall - sum(v for k, v in phases.items() if k != "other"))
    per_phase = {f"{k}_s": v for k, v in phases.items()}
    return {"measured_s": measured, "wall_s": wall, "ratio": measured / wall, **per_phase}


def overhead_line(overhead: Mapping[str, float]) -> str:
    """`measured 36.1 s of 60.2 s wall (0.60): prefill 3.0 s, readiness 8.1 s, ...`."""
    parts = ", ".join(f"{k} {overhead[f'{k}_s']:.1f} s" for k in PHASES)
    return (
        f"measured {overhead['measured_s']:.1f} s of {overhead['wall_s']:.1f} s wall ({overhead['ratio']:.2f}): {parts}"
    )
