"""Raw traces of a decode cell: every token event, server sample, loop-lag probe and window edge, as Parquet.

One file per cell, `traces/decode-<context tokens>x<N>.parquet` beside results.jsonl, written atomically
before the cell's record is appended: a cell's trace is whole or absent, and a cell measured again (a retry
in a later run, `--resume`) replaces it. One tidy table, a row per event, times in seconds from the start of
the window the cell kept (`t_s`; negative before it). `kind` says which columns a row uses:

- ``request``: one row per request (`stream`, `request`, `t_s` sent, `end_s` ended or None)
- ``token``: every chunk that raised a request's count (`stream`, `request`, `t_s`, cumulative `tokens`)
- ``server``: each /metrics sample (`t_s`, `running`, `waiting`, `kv_usage` 0..1 where reported)
- ``lag``: each event-loop lag probe (`t_s`, `lag_ms`)
- ``window``: each measured window (`attempt`, `t_s` start, `end_s` planned end); the last one is kept
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.loadgen.client import StreamResult
from toolkit.matrix.sampler import Samples

__all__ = [
    "COLUMNS",
    "TRACES_DIR",
    "CellTrace",
    "load_trace",
    "token_increments",
    "trace_frame",
    "trace_path",
    "write_trace",
]

TRACES_DIR = "traces"
COLUMNS: tuple[str, ...] = ("kind", "stream", "request", "t_s", "end_s", "tokens", "running", "waiting",
                            "kv_usage", "lag_ms", "attempt")  # fmt: skip


@dataclass(frozen=True)
class CellTrace:
    """What a decode cell saw, on the client's perf_counter clock (converted to window-relative on writing)."""

    streams: Sequence[Sequence[StreamResult]]
    samples: Samples
    windows: Sequence[tuple[float, float]]  # (start, planned end) of each window, the kept one last


def trace_path(results_dir: str | Path, context_tokens: int, concurrency: int) -> Path:
    return Path(results_dir) / TRACES_DIR / f"decode-{context_tokens}x{concurrency}.parquet"


def trace_frame(trace: CellTrace) -> pd.DataFrame:
    """The tidy event table of a cell (pure)."""
    origin = trace.windows[-1][0]
    rows: list[dict[str, Any]] = []
    for stream, results in enumerate(trace.streams):
        for request, r in enumerate(results):
            end = None if r.ended is None else r.ended - origin
            rows.append(
                {"kind": "request", "stream": stream, "request": request, "t_s": r.started - origin, "end_s": end}
            )
            rows += [
                {"kind": "token", "stream": stream, "request": request, "t_s": t - origin, "tokens": count}
                for t, count in r.token_events
            ]
    kv = dict(trace.samples.kv_usage)
    rows += [
        {"kind": "server", "t_s": t - origin, "running": running, "waiting": waiting, "kv_usage": kv.get(t)}
        for t, running, waiting in trace.samples.server
    ]
    rows += [
        {"kind": "lag", "t_s": t - origin, "lag_ms": lag * 1000}
        for t, lag in zip(trace.samples.lag_times, trace.samples.loop_lag_s, strict=True)
    ]
    rows += [
        {"kind": "window", "attempt": i, "t_s": start - origin, "end_s": end - origin}
        for i, (start, end) in enumerate(trace.windows, start=1)
    ]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    for column in ("stream", "request", "tokens", "running", "waiting", "attempt"):
        frame[column] = frame[column].astype("Int64")
    for column in ("t_s", "end_s", "kv_usage", "lag_ms"):
        frame[column] = frame[column].astype("float64")
    frame["kind"] = frame["kind"].astype("category")
    return frame


def write_trace(results_dir: str | Path, context_tokens: int, concurrency: int, trace: CellTrace) -> Path:
    """Write the cell's trace atomically (a temporary file renamed over the old one)."""
    path = trace_path(results_dir, context_tokens, concurrency)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".parquet.partial")
    trace_frame(trace).to_parquet(partial, index=False)
    with open(partial, "rb") as f:
        os.fsync(f.fileno())
    os.replace(partial, path)
    return path


def load_trace(results_dir: str | Path, context_tokens: int, concurrency: int) -> pd.DataFrame:
    """A cell's event table; FileNotFoundError names the file when the cell has no trace."""
    path = trace_path(results_dir, context_tokens, concurrency)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no trace for decode {context_tokens} × {concurrency} in this run")
    return pd.read_parquet(path)


def token_increments(trace: pd.DataFrame) -> pd.DataFrame:
    """The token rows with `new_tokens`: how many tokens each chunk added to its request (pure)."""
    tokens = trace[trace.kind == "token"].sort_values(["stream", "request", "t_s"]).copy()
    previous = tokens.groupby(["stream", "request"])["tokens"].shift(fill_value=0)
    tokens["new_tokens"] = (tokens["tokens"] - previous).astype("int64")
    return tokens
