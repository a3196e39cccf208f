"""Request traces replayed as one step: arrivals and lengths from a local file (pure; nothing is downloaded).

Mooncake JSONL: one object per line with `timestamp` (ms from the trace's start), `input_length`, `output_length`
and `hash_ids` (the prompt's blocks of `block_tokens` tokens, 512 in Mooncake's traces: requests whose lists start
alike share those blocks of prompt). Azure LLM inference CSV: a header with `TIMESTAMP` (a date and time),
`ContextTokens` and `GeneratedTokens`; its prompts share nothing. A window of the trace (`start_s`, `duration_s`
from its first arrival) is replayed `time_scale` times as fast. A malformed line is a `DatasetError` naming the
file and the line.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from toolkit.base.errors import DatasetError
from toolkit.rates.dataset import json_lines, read_text

TraceFormat = Literal["mooncake", "azure"]
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: arrival (seconds from the trace's first), lengths, and its prompt blocks."""

    at_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class TraceWindow:
    """Which part of a trace, how fast: `start_s` and `duration_s` (None: to the end) of the trace's own time."""

    start_s: float = 0.0
    duration_s: float | None = None
    time_scale: float = 1.0


def read_trace(path: str | Path, kind: TraceFormat) -> list[TraceRequest]:
    """The trace's requests in order of arrival; DatasetError when unreadable, malformed or empty."""
    path = Path(path)
    text = read_text(path, "trace")
    requests = _mooncake(path, text) if kind == "mooncake" else _azure(path, text)
    if not requests:
        raise DatasetError(f"trace: {path} holds no request")
    first = min(r.at_s for r in requests)
    shifted = [TraceRequest(r.at_s - first, r.input_tokens, r.output_tokens, r.hash_ids) for r in requests]
    return sorted(shifted, key=lambda r: r.at_s)


def window(requests: list[TraceRequest], chosen: TraceWindow) -> list[TraceRequest]:
    """The requests inside the window, their arrivals from its start and divided by the time scale."""
    end = math.inf if chosen.duration_s is None else chosen.start_s + chosen.duration_s
    inside = [r for r in requests if chosen.start_s <= r.at_s < end]
    return [
        TraceRequest((r.at_s - chosen.start_s) / chosen.time_scale, r.input_tokens, r.output_tokens, r.hash_ids)
        for r in inside
    ]


def _count(where: str, name: str, value: Any) -> int:
    if type(value) is not int or value < 1:
        raise DatasetError(f"trace: {where}: {name} is not a whole number >= 1 (got {value!r:.40})")
    return value


def _mooncake(path: Path, text: str) -> list[TraceRequest]:
    requests = []
    for where, obj in json_lines(path, text, "trace", "the Mooncake layout has one per line"):
        stamp = obj.get("timestamp")
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp) or stamp < 0:
            raise DatasetError(f"trace: {where}: timestamp is not a number of milliseconds >= 0 (got {stamp!r:.40})")
        hashes = obj.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(type(h) is int for h in hashes):
            raise DatasetError(f"trace: {where}: hash_ids is not a list of whole numbers")
        requests.append(
            TraceRequest(
                stamp / 1e3,
                _count(where, "input_length", obj.get("input_length")),
                _count(where, "output_length", obj.get("output_length")),
                tuple(hashes),
            )
        )
    return requests


def _timestamp(where: str, value: str) -> float:
    """A TIMESTAMP as seconds since the epoch (the Azure traces write 7 digits of a second: 6 are kept)."""
    head, dot, fraction = value.strip().partition(".")
    try:
        moment = datetime.fromisoformat(head + (dot + fraction[:6] if dot else ""))
    except ValueError:
        raise DatasetError(f"trace: {where}: TIMESTAMP {value!r:.40} is not a date and time") from None
    return moment.timestamp()


def _azure(path: Path, text: str) -> list[TraceRequest]:
    rows = csv.reader(text.splitlines())
    header = next(rows, None)
    if header is None or any(name not in header for name in AZURE_COLUMNS):
        raise DatasetError(f"trace: {path}:1: the Azure layout needs a header with {', '.join(AZURE_COLUMNS)}")
    at = {name: header.index(name) for name in AZURE_COLUMNS}
    requests = []
    for number, row in enumerate(rows, start=2):
        if not row or not "".join(row).strip():
            continue
        where = f"{path}:{number}"
        if len(row) != len(header):
            raise DatasetError(f"trace: {where}: {len(row)} fields, the header has {len(header)}")
        counts = []
        for name in AZURE_COLUMNS[1:]:
            value = row[at[name]].strip()
            counts.append(_count(where, name, int(value) if value.isdigit() else value))
        requests.append(TraceRequest(_timestamp(where, row[at["TIMESTAMP"]]), counts[0], counts[1]))
    return requests
