"""Synthetic run folders for the gate's tests (tests/component/test_gate.py, tests/unit/test_gate_allowance.py):
decode cells of 1K context whose totals and per-request speeds are given, each ±2 % (standard error) over 3
batches of 10 s, as a window's batches give them; and rate sweeps whose steps' goodput and SLO fraction are given
(tests/component/test_gate_rates.py), and traffic-class sweeps (tests/component/test_gate_classes.py); no server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.base.schema import Measurement
from toolkit.method.goodput import REQUIRED_RECORD_COLUMNS
from toolkit.method.spread import t_quantile
from toolkit.results.rate_runs import RATES_DIR, STEPS_FILE, SWEEP_FILE, step_file
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


Step = tuple[float, float, float, float]  # goodput (req/s), SLO fraction, its 95 % interval's low and high ends


def write_gate_sweep(folder: Path, steps: dict[float, Step], bracket: tuple[float | None, float | None] | None,
                     *, slo_ttft_ms: float | None = 200.0) -> Path:  # fmt: skip
    """A rate-sweep run folder as `toolkit rates` leaves it, written directly: one step per offered rate with the
    given goodput and SLO fraction (its records empty), the search's bracket (None: no search) and the SLO."""
    rates = folder / RATES_DIR
    rates.mkdir(parents=True)
    lines = []
    for step, (rate, (goodput, fraction, low, high)) in enumerate(steps.items()):
        pd.DataFrame(columns=list(REQUIRED_RECORD_COLUMNS)).to_parquet(rates / step_file(step), index=False)
        lines.append({"step": step, "offered_rate": rate, "requests": 400, "goodput": goodput, "slo_fraction": fraction,
                      "slo_fraction_low": low, "slo_fraction_high": high})  # fmt: skip
    (rates / STEPS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    search = False if bracket is None else {"highest_rate": bracket[0], "bracket": list(bracket)}
    sweep = {"rates": list(steps), "slo_ttft_ms": slo_ttft_ms, "goodput_target": 0.9, "search": search}
    write_json_atomic(rates / SWEEP_FILE, sweep)
    write_json_atomic(folder / RUN_FILE, {"run_label": folder.name, "started_at": STARTED_AT})
    return folder


ClassSteps = list[tuple[float, dict[str, Step]]]  # per step: its offered rate, each class's figures
CLASS_REQUESTS = 400  # each class's steady requests in a step


def write_gate_class_sweep(folder: Path, steps: ClassSteps, levels: dict[str, dict[str, float]],
                           bracket: tuple[float | None, float | None] | None) -> Path:  # fmt: skip
    """A traffic-class rate sweep's run folder, written directly: each step's classes' figures (their goodput,
    SLO fraction and its interval, CLASS_REQUESTS steady requests each, arrivals at half the step's rate) and the
    step's total as a class sweep keeps it (goodput summed, the share meeting, no interval); `levels` each class's
    SLO limits (`{"chat": {"slo_ttft_ms": 200}}`), the search's bracket (None: no search)."""
    rates = folder / RATES_DIR
    rates.mkdir(parents=True)
    lines = []
    for number, (rate, classes) in enumerate(steps):
        pd.DataFrame(columns=list(REQUIRED_RECORD_COLUMNS)).to_parquet(rates / step_file(number), index=False)
        figures = {name: {"requests": CLASS_REQUESTS, "steady_requests": CLASS_REQUESTS, "goodput": goodput,
                          "slo_fraction": fraction, "slo_fraction_low": low, "slo_fraction_high": high,
                          "achieved_rate": rate / len(classes)}
                   for name, (goodput, fraction, low, high) in classes.items()}  # fmt: skip
        share = sum(f[1] for f in classes.values()) / len(classes)
        lines.append({"step": number, "offered_rate": rate, "requests": CLASS_REQUESTS * len(classes),
                      "goodput": sum(f[0] for f in classes.values()), "slo_fraction": share,
                      "slo_fraction_low": None, "slo_fraction_high": None, "classes": figures})  # fmt: skip
    (rates / STEPS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    search = False if bracket is None else {"highest_rate": bracket[0], "bracket": list(bracket)}
    listed = [{"name": name, "weight": 1.0, **limits} for name, limits in levels.items()]
    sweep = {"rates": sorted({rate for rate, _ in steps}), "goodput_target": 0.9, "search": search,
             "classes": listed}  # fmt: skip
    write_json_atomic(rates / SWEEP_FILE, sweep)
    write_json_atomic(folder / RUN_FILE, {"run_label": folder.name, "started_at": STARTED_AT})
    return folder
