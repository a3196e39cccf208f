"""Synthetic run folders for the gate's tests (tests/component/test_gate.py, tests/unit/test_gate_allowance.py):
decode cells of 1K context whose totals and per-request speeds are given, each ±2 % (standard error) over 3
batches of 10 s, as a window's batches give them; no server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolkit.base.schema import Measurement
from toolkit.method.spread import t_quantile
from toolkit.results.store import RESULTS_FILE, RUN_FILE, write_json_atomic

STARTED_AT = "2026-12-03T10:00:00+00:00"


def write_gate_run(folder: Path, cells: dict[int, tuple[float, float]], *, schema: int | None = None,
                   url: str = "http://127.0.0.1:8000", **document: Any) -> Path:  # fmt: skip
    """A run folder: requests at once -> (total tok/s, per-request tok/s); run.json holds `document`'s fields
    beside the label, the URL and the start (`schema`: written as that schema_version, unchecked)."""
    folder.mkdir(parents=True)
    half = 0.02 * t_quantile(1.5)  # a relative standard error of 2 %, as the window's 3 batches give it
    rows = [Measurement(phase="decode", context_tokens=1024, context="1K", concurrency=n, status="Valid",
                        total_tok_s=total, per_request_tok_s=per, ttft_ms=50.0, tbt_ms=1000 / per,
                        total_tok_s_ci=half * total, per_request_tok_s_ci=half * per, sub_windows=3,
                        measured_s=10.0, started_at=STARTED_AT)
            for n, (total, per) in cells.items()]  # fmt: skip
    (folder / RESULTS_FILE).write_text("".join(json.dumps(m.to_dict()) + "\n" for m in rows))
    fields = {"run_label": folder.name, "params": {"base_url": url}, "started_at": STARTED_AT, **document}
    if schema is None:
        write_json_atomic(folder / RUN_FILE, fields)
    else:
        (folder / RUN_FILE).write_text(json.dumps({**fields, "schema_version": schema}))
    return folder
