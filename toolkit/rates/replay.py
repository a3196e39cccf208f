"""A step that replays another tool's run (its requests' arrival times and lengths, from its result file) or a
request trace (Mooncake or Azure layout, toolkit.rates.traces).

Replaying `vllm bench serve`'s (or GuideLLM's, AIPerf's) own schedule makes our step and theirs the same workload
request for request, so that `reconcile` compares the measurements and not two draws of a Poisson process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from toolkit.base.errors import ParamsError
from toolkit.rates.traces import (
    MAX_TRACE_TOKENIZE_CALLS,
    TraceFormat,
    TraceWindow,
    read_window,
    tokenize_calls_at_least,
)
from toolkit.results.peers.read import read_peer_result

MOONCAKE_BLOCK_TOKENS = 512  # a hash_ids block of Mooncake's published traces


@dataclass(frozen=True)
class Replay:
    """The requests to send, in the file's order of arrival: when (seconds from the first), how long each is."""

    due: list[float]
    input_tokens: list[int]
    output_tokens: list[int]
    rate: float  # the rate the tool was asked for (a trace: its requests over its span)
    source: str  # the tool and the file
    hash_ids: list[tuple[int, ...]] | None = None  # a Mooncake trace's prompt blocks, per request
    block_tokens: int | None = None  # the tokens of each of those blocks


def load_replay(path: str | Path) -> Replay:
    """The schedule and lengths in a peer's result file; ResultsError or ParamsError in one line naming it."""
    step = read_peer_result(path)
    records = step.records
    if records is None or not len(records):
        raise ParamsError(f"replay: {path}: holds no per-request data to replay (save it with the tool's detailed "
                          "output, e.g. vllm bench serve --save-detailed)")  # fmt: skip
    ordered = records.sort_values("scheduled_s", kind="stable")
    start = float(ordered["scheduled_s"].min())
    answered = [int(n) for n in ordered["output_tokens"] if n > 0]
    if not answered:
        raise ParamsError(f"replay: {path}: no request of it returned tokens; its output lengths are unknown")
    usual = int(median(answered))  # a request that failed there asks for the usual length here
    return Replay(
        due=[float(t) - start for t in ordered["scheduled_s"]],
        input_tokens=[max(1, int(n)) for n in ordered["input_tokens"]],
        output_tokens=[int(n) if n > 0 else usual for n in ordered["output_tokens"]],
        rate=step.offered_rate if math.isfinite(step.offered_rate) else math.inf,
        source=f"{step.source} ({Path(path).name})",
    )


def load_trace(path: str | Path, kind: TraceFormat, chosen: TraceWindow, block_tokens: int) -> Replay:
    """The window of a trace file as a step to replay; DatasetError (malformed, past the file's limits) or
    ParamsError (an empty window, one past the limits of toolkit.rates.traces) in one line naming the file."""
    requests = read_window(path, kind, chosen)
    if not requests:
        raise ParamsError(f"trace: {path}: no request arrives {chosen.between()}")
    if kind == "mooncake" and (calls := tokenize_calls_at_least(requests, block_tokens)) > MAX_TRACE_TOKENIZE_CALLS:
        raise ParamsError(f"trace: {path}: building the prompts of the requests {chosen.between()} takes at least "
                          f"{calls:,} /tokenize calls (its distinct {block_tokens}-token blocks), more than "
                          f"{MAX_TRACE_TOKENIZE_CALLS:,}; choose trace_start_s and trace_duration_s to replay less, or "
                          "larger trace_block_tokens")  # fmt: skip
    due = [r.at_s for r in requests]
    span = due[-1] - due[0]
    scale = "" if chosen.time_scale == 1 else f" at {chosen.time_scale:g}x"
    return Replay(
        due=due,
        input_tokens=[r.input_tokens for r in requests],
        output_tokens=[r.output_tokens for r in requests],
        rate=(len(due) - 1) / span if span > 0 else math.inf,
        source=f"{kind} trace ({Path(path).name}){scale}",
        hash_ids=[r.hash_ids for r in requests] if kind == "mooncake" else None,
        block_tokens=block_tokens if kind == "mooncake" else None,
    )
