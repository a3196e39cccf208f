"""Synthetic rate-sweep run folders, laid out as `toolkit.rates.runner.run_rates` writes them (no server).

A made-up server of `capacity` requests/s: below it every request starts within 50 ms; above it requests queue,
so TTFT grows request by request, and the server's waiting count with it. Steps are summarized with
`toolkit.method.goodput`, as the runner does. With `server_timing`, each reply also carried the server's own timing
(queue, prefill, generation) and each step's row its breakdown (toolkit.method.breakdown), as vLLM's per-request
metrics give them; without, the folder is as one from before they were recorded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from toolkit.base.schema import Measurement
from toolkit.method.breakdown import breakdown_row, request_split
from toolkit.method.goodput import (
    REQUIRED_RECORD_COLUMNS,
    TIMING_COLUMNS,
    ServiceLevel,
    highest_rate_meeting,
    steady_mask,
    summarize_step,
)
from toolkit.results.rate_runs import RATES_DIR, STEPS_FILE, SWEEP_FILE, step_file
from toolkit.results.store import RUN_FILE, ResultStore, write_json_atomic

LEVEL = ServiceLevel(ttft_ms=200, tpot_ms=30, target=0.9)
WIRE_MS = 5.0  # with server timing: the client's TTFT less the server's queue and prefill
MISMATCH_MS = 30.0  # a mismatched request's prefill, that much over the client's TTFT


def step_records(step: int, rate: float, *, capacity: float, requests: int, seed: int, lag_s: float = 0.0005,
                 failed: int = 0, server_timing: bool = False, mismatched: int = 0) -> pd.DataFrame:  # fmt: skip
    """One step's per-request records (times in s from the step's start); with `server_timing`, the server's own
    (`TIMING_COLUMNS`): the queue is the TTFT's growth past capacity, the wire `WIRE_MS`, and the first `mismatched`
    requests' prefill `MISMATCH_MS` over the client's TTFT (the cross-check broken)."""
    rng = np.random.default_rng(seed + step)
    scheduled = np.concatenate([[0.0], np.cumsum(rng.exponential(1 / rate, requests - 1))])
    rows = []
    for i, at in enumerate(scheduled):
        sent = float(at) + lag_s * (1 + i % 3)
        ttft = 0.04 + 0.01 * (i % 4) + max(0.0, rate - capacity) * 0.08 * i
        gap = 0.008 + 0.002 * min(rate, capacity) + 0.004 * max(0.0, rate - capacity)
        tokens = 8 + i % 5
        chunks = [sent + ttft + k * gap for k in range(tokens)]
        bad = i >= requests - failed
        rows.append({"step": step, "offered_rate": rate, "request": i, "scheduled_s": float(at), "sent_s": sent,
                     "first_token_s": np.nan if bad else chunks[0], "last_token_s": np.nan if bad else chunks[-1],
                     "chunk_times_s": [] if bad else chunks, "input_tokens": 128, "output_tokens": 0 if bad else tokens,
                     "error": "HTTP 500: overloaded" if bad else None})  # fmt: skip
        if server_timing:
            rows[-1].update(_server_timing(ttft * 1e3, max(0.0, rate - capacity) * 80 * i, chunks, i < mismatched, bad))
    columns = [*REQUIRED_RECORD_COLUMNS, *(TIMING_COLUMNS if server_timing else ())]
    return pd.DataFrame(rows, columns=columns)  # without timing: as a sweep before turns wrote them


def _server_timing(ttft_ms: float, queue_ms: float, chunks: list[float], mismatched: bool, bad: bool) -> dict:
    if bad:
        return dict.fromkeys(TIMING_COLUMNS, np.nan)
    prefill = ttft_ms - queue_ms - WIRE_MS + (WIRE_MS + MISMATCH_MS if mismatched else 0.0)
    generation = (chunks[-1] - chunks[0]) * 1e3 - 0.5
    return {"server_queue_ms": queue_ms, "server_ttft_ms": prefill, "server_generation_ms": generation,
            "server_itl_ms": generation / (len(chunks) - 1), "server_tok_s": len(chunks) / (generation / 1e3),
            "wire_ttft_ms": ttft_ms - queue_ms - prefill}  # fmt: skip


def _server_samples(rate: float, capacity: float, summary: dict[str, Any]) -> dict[str, Any]:
    over = max(0.0, rate - capacity)
    prompt, generated = summary["input_tokens"], summary["output_tokens"]
    return {"server_running_max": min(rate, capacity) * 2, "server_waiting_max": over * 4,
            "server_waiting_mean": over * 1.5, "kv_usage_max": min(1.0, 0.1 * rate), "server_prompt_tokens": prompt,
            "server_generation_tokens": generated, "client_prompt_tokens": prompt,
            "client_generation_tokens": generated}  # fmt: skip


def write_rate_sweep(folder: Path, rates: Sequence[float] = (1.0, 2.0, 4.0, 8.0), *, searched: Sequence[float] = (),
                     capacity: float = 5.0, requests: int = 12, level: ServiceLevel = LEVEL, seed: int = 7,
                     lag_flagged: Sequence[int] = (), run_info: dict[str, Any] | None = None,
                     server_timing: bool = False, mismatched: Mapping[int, int] | None = None) -> Path:  # fmt: skip
    """A run folder with run.json and rates/: the listed rates, then the searched probes (their steps flagged
    `searched`); the step numbers in `lag_flagged` are flagged and lag 40 ms. The last listed step has a failure.
    `server_timing`: the replies carried the server's timing, the steps their breakdown; `mismatched`: by step, how
    many of its first requests break the timing cross-check."""
    rates_dir = folder / RATES_DIR
    rates_dir.mkdir(parents=True)
    all_rates = [*rates, *searched]
    lines, judged = [], []
    for step, rate in enumerate(all_rates):
        flagged = step in lag_flagged
        records = step_records(step, rate, capacity=capacity, requests=requests, seed=seed,
                               lag_s=0.04 if flagged else 0.0005, failed=int(step == len(rates) - 1),
                               server_timing=server_timing, mismatched=(mismatched or {}).get(step, 0))  # fmt: skip
        records.to_parquet(rates_dir / step_file(step), index=False)
        row = summarize_step(records, level).row()
        judged.append((rate, bool(row["slo_met"])))
        split = breakdown_row(request_split(records), {}, steady_mask(records)) if server_timing else {}
        lines.append({"step": step, "searched": step >= len(rates), "arrival": "poisson", "burstiness": 1.0, **row,
                      "lag_flagged": flagged, **_server_samples(rate, capacity, row), **split})  # fmt: skip
    (rates_dir / STEPS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    sweep: dict[str, Any] = {
        "base_url": "http://127.0.0.1:8000", "model": "synthetic", "rates": list(rates), "arrival": "poisson",
        "burstiness": 1.0, "duration_s": None, "requests_per_step": requests, "max_in_flight": None, "seed": seed,
        "input_tokens": 128, "output_tokens": 10, "dataset": None, "slo_ttft_ms": level.ttft_ms,
        "slo_tpot_ms": level.tpot_ms, "slo_e2e_ms": level.e2e_ms, "goodput_target": level.target,
        "search_precision": 0.1,
    }  # fmt: skip
    if searched:
        highest, failing = highest_rate_meeting(judged)
        sweep["search"] = {"highest_rate": highest, "bracket": [highest, failing]}
    else:
        sweep["search"] = False
    (rates_dir / SWEEP_FILE).write_text(json.dumps(sweep, indent=2), encoding="utf-8")
    write_json_atomic(folder / RUN_FILE, {"source": "toolkit", "run_label": "rates", "title": "Synthetic rates",
                                          **(run_info or {})})  # fmt: skip
    return folder


def add_matrix_results(folder: Path) -> Path:
    """A prefill and two decode measurements beside the sweep, as a matrix run of the same folder leaves them."""
    store = ResultStore(folder)
    for m in (Measurement("prefill", 8192, "8K", 1, "Valid", total_tok_s=17_731.6, ttft_ms=462.0, completed=1),
              Measurement("decode", 8192, "8K", 1, "Valid", 24.3, 25.5, 136.0, 39.2, 1.0, 0, 728, 29.9),
              Measurement("decode", 8192, "8K", 2, "Valid", 47.9, 25.0, 158.0, 40.0, 1.9, 3, 1_434, 30.0)):  # fmt: skip
        store.append(m)
    return folder
