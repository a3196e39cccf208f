"""GuideLLM 0.8.1's benchmarks JSON, read into our per-request records (pure parsing of a local file).

`guidellm run --output kind=json,path=…` writes one report (guidellm/benchmark/schemas/report.py): `metadata`
(schema `version` 2, `guidellm_version`), `config`, and `benchmarks`, one per strategy run, each with its `metrics`
(distributions by status: successful, incomplete, errored, total), its measurement window (`scheduler_metrics`)
and `requests`: every request's stats while `--metrics sample_size` is unset (the default). This reads a file of
ONE benchmark (one rate); a sweep's file is refused with a line saying so.

A request's `info.timings` hold its send (`request_start`), its scheduled arrival (`targeted_start`), its first and
last streamed token (`first_token_iteration`, `last_token_iteration`), how many streamed iterations carried tokens
(`token_iterations`) and the end of the response (`request_end`). GuideLLM saves no chunk's arrival in between, so
`chunk_times_s` is None: its file gives no gap-by-gap ITL.

Under our names (docs/peer-definitions.md): GuideLLM's ITL, (last token − first) / (output tokens − 1) per request,
is our TPOT and goes to `tpot_*`; its own TPOT, (last token − send) / output tokens, counts the first token's wait
and has no counterpart here; its request latency (send to the end of the response) goes to `e2e_*`. `failed`
counts its errored and incomplete (cancelled) requests. `reproduced` recomputes its figures from the requests by
its definitions (guidellm/benchmark/schemas/metrics.py, GenerativeMetrics.compile).

Every field read is validated first (peers.guidellm_schema: JSON types, finite, in range), and each request's
times against each other (no token before its send, no last token before the first, all within a week of the
first send); a file that fails is refused in one line naming the file, the line and the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from toolkit.base.errors import ResultsError
from toolkit.results.limits import MAX_DURATION_S, MIN_WINDOW_S
from toolkit.results.peers.guidellm_schema import Benchmark, ByStatus, Metrics, SavedRequest, Strategy
from toolkit.results.peers.step import QUANTITIES, PeerStep, records_frame
from toolkit.results.validation import Loc, document_where, field_name, shown, validated

FORMAT = "GuideLLM's benchmarks JSON (metadata.guidellm_version, benchmarks[].metrics, benchmarks[].requests)"
SCHEMA_VERSION = 2  # metadata.version of GuideLLM 0.8.1's report
STATUSES = ("successful", "errored", "incomplete")
# our name -> GuideLLM's metric, status, statistic ("mean" or a percentile) and the factor to our unit
GUIDELLM_REPORTED: dict[str, tuple[str, str, str, float]] = {
    "output_tok_s": ("output_tokens_per_second", "total", "mean", 1.0),
    "request_throughput": ("requests_per_second", "total", "mean", 1.0),
    "ttft_p50_ms": ("time_to_first_token_ms", "successful", "p50", 1.0),
    "ttft_p99_ms": ("time_to_first_token_ms", "successful", "p99", 1.0),
    "tpot_p50_ms": ("inter_token_latency_ms", "successful", "p50", 1.0),
    "tpot_p99_ms": ("inter_token_latency_ms", "successful", "p99", 1.0),
    "e2e_p50_ms": ("request_latency", "successful", "p50", 1e3),
    "e2e_p99_ms": ("request_latency", "successful", "p99", 1e3),
}


@dataclass(frozen=True)
class Request:
    """One saved request: its status and its times (epoch seconds) as GuideLLM recorded them."""

    status: str  # successful, errored or incomplete
    start: float  # request_start, or resolve_start when it never started
    targeted: float | None
    first: float | None
    last: float | None
    end: float | None  # request_end, or resolve_end
    iterations: int  # streamed iterations that carried tokens
    input_tokens: int
    output_tokens: int
    error: str | None


def read(path: Path, document: Any) -> PeerStep | None:
    """The run in `document`, when it is GuideLLM's benchmarks JSON; None when it is another tool's."""
    if not (isinstance(document, dict) and isinstance(document.get("benchmarks"), list)):
        return None
    metadata = _dict(document.get("metadata"))
    kinds = {kind for bench in document["benchmarks"] if isinstance(kind := _dict(bench).get("type_"), str)}
    if "guidellm_version" not in metadata and "generative_benchmark" not in kinds:
        return None
    if metadata.get("version") != SCHEMA_VERSION:
        raise ResultsError(
            f"{path}: GuideLLM report schema version {shown(metadata.get('version'))}; this reads version "
            f"{SCHEMA_VERSION} (GuideLLM 0.8.1)"
        )
    if len(document["benchmarks"]) != 1:
        raise ResultsError(
            f"{path}: holds {len(document['benchmarks'])} benchmarks; this reads a file of one (one rate per run)"
        )
    version = metadata.get("guidellm_version")
    return _step(path, document["benchmarks"][0], " ".join(version.split())[:40] if isinstance(version, str) else None)


def _step(path: Path, raw: Any, version: str | None) -> PeerStep:
    if not (isinstance(raw, dict) and isinstance(raw.get("metrics"), dict)):
        raise ResultsError(f"{path}: benchmarks[0] has no metrics; the file is damaged")
    bench = validated(Benchmark, raw, document_where(path), within=("benchmarks", 0))
    requests = _requests(path, bench)
    config = bench.config
    return PeerStep(
        source=f"GuideLLM {version}" if version else "GuideLLM",
        file=path,
        offered_rate=_offered(config.strategy if config else None),
        records=_records(requests) if requests else None,
        reported=_reported(bench.metrics or Metrics()),
        reproduced=_reproduced(requests, _window(path, bench)) if requests else {},
        model=config.backend.model if config and config.backend else None,
        duration_s=bench.duration,
    )


def _where(path: Path) -> Callable[[Loc], str]:
    """FILE:LINE of a field of the file's one benchmark."""
    located = document_where(path)
    return lambda loc: located(("benchmarks", 0, *loc))


def _offered(strategy: Strategy | None) -> float:
    """The strategy's rate; inf for `throughput` (all at once); NaN for closed loops (synchronous, concurrent)."""
    if strategy is not None and strategy.rate is not None:
        return strategy.rate
    return math.inf if strategy is not None and strategy.type_ == "throughput" else math.nan


def _reported(metrics: Metrics) -> dict[str, float | None]:
    figures: dict[str, float | None] = {ours: _statistic(metrics, *spec) for ours, spec in GUIDELLM_REPORTED.items()}
    totals = metrics.request_totals
    if totals is not None:
        figures["completed"] = None if totals.successful is None else float(totals.successful)
        if totals.errored is not None and totals.incomplete is not None:
            figures["failed"] = float(totals.errored + totals.incomplete)
    return {name: figures.get(name) for name in QUANTITIES}


def _statistic(metrics: Metrics, name: str, status: str, statistic: str, factor: float) -> float | None:
    by_status: ByStatus[float] | None = getattr(metrics, name)
    summary = getattr(by_status, status) if by_status is not None else None
    if summary is None:
        return None
    saved = summary.mean if statistic == "mean" else (summary.percentiles or {}).get(statistic)
    return None if saved is None else saved * factor


def _requests(path: Path, bench: Benchmark) -> list[Request]:
    groups = bench.requests
    if groups is None:
        raise ResultsError(f"{path}: benchmarks[0] has no requests; the file is damaged")
    requests, places = [], []
    for status in STATUSES:
        saved: list[SavedRequest] = getattr(groups, status) or []
        requests += [_request(path, f"{status}[{i}]", status, raw) for i, raw in enumerate(saved)]
        places += [("requests", status, i) for i in range(len(saved))]
    base = min((request.start for request in requests), default=0.0)
    for request, place in zip(requests, places, strict=True):
        if problem := _times_problem(request, base):
            name = field_name(("benchmarks", 0, *place))
            raise ResultsError(f"{_where(path)(place)}: {name}: {problem}; the file is damaged")
    return requests


def _request(path: Path, where: str, status: str, raw: SavedRequest) -> Request:
    timings = raw.info.timings if raw.info is not None else None
    if timings is None:
        raise ResultsError(f"{path}: benchmarks[0].requests.{where} has no info.timings; the file is damaged")
    start = _either(timings.request_start, timings.resolve_start)
    if start is None:
        raise ResultsError(f"{path}: benchmarks[0].requests.{where} has no request_start time; the file is damaged")
    saved_error = raw.info.error if raw.info is not None else None
    text = saved_error or ("cancelled before it finished" if status == "incomplete" else "no error text")
    error = None if status == "successful" else " ".join(f"{status}: {text}".split())
    return Request(
        status=status, start=start, targeted=timings.targeted_start,
        first=timings.first_token_iteration, last=timings.last_token_iteration,
        end=_either(timings.request_end, timings.resolve_end),
        iterations=timings.token_iterations or 0,
        input_tokens=raw.prompt_tokens or 0,
        output_tokens=raw.output_tokens or 0,
        error=error,
    )  # fmt: skip


def _times_problem(request: Request, base: float) -> str | None:
    """Why a request's times cannot be one request's (its first token before its send, its last before its first,
    a time more than MAX_DURATION_S from the run's first send), else None."""
    first, last, end = request.first, request.last, request.end
    if any(t is not None and t < request.start for t in (first, last, end)):
        return "a token or its end before its send (info.timings)"
    if first is not None and last is not None and last < first:
        return "its last token before its first (info.timings)"
    times = [t for t in (request.targeted, request.start, first, last, end) if t is not None]
    if max(abs(t - base) for t in times) > MAX_DURATION_S:
        return f"a time more than {MAX_DURATION_S:g} s from the first send (info.timings)"
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _either(value: float | None, fallback: float | None) -> float | None:
    return value if value is not None else fallback


def _window(path: Path, bench: Benchmark) -> tuple[float, float]:
    """The measurement window (epoch seconds) GuideLLM computed its metrics over: warm-up and cool-down excluded."""
    scheduler = bench.scheduler_metrics
    low, high = (scheduler.measure_start_time, scheduler.measure_end_time) if scheduler else (None, None)
    if low is None or high is None or not high > low:
        raise ResultsError(f"{path}: benchmarks[0].scheduler_metrics has no measurement window; the file is damaged")
    if not MIN_WINDOW_S <= high - low <= MAX_DURATION_S:
        raise ResultsError(f"{_where(path)(('scheduler_metrics',))}: benchmarks[0].scheduler_metrics: a window of "
                           f"{high - low:.3g} s; expected {MIN_WINDOW_S:g} to {MAX_DURATION_S:g} s")  # fmt: skip
    return low, high


def _records(requests: list[Request]) -> pd.DataFrame:
    base = min(request.start for request in requests)
    rows = []
    for i, request in enumerate(sorted(requests, key=lambda request: request.start)):
        ok = request.error is None
        first = request.first if ok and request.first is not None else math.nan
        last = _either(request.last, request.end) if ok else None
        rows.append({
            "step": 0, "offered_rate": math.nan, "request": i,
            "scheduled_s": (request.start if request.targeted is None else request.targeted) - base,
            "sent_s": request.start - base,
            "first_token_s": first - base, "last_token_s": math.nan if last is None else last - base,
            "chunk_times_s": None, "input_tokens": request.input_tokens, "output_tokens": request.output_tokens,
            "error": request.error,
        })  # fmt: skip
    return records_frame(rows)


def _reproduced(requests: list[Request], window: tuple[float, float]) -> dict[str, float | None]:
    """GuideLLM's figures from its requests, by its definitions (GenerativeMetrics.compile): a request counts when
    its span meets the window; TTFT from its send to its first token; ITL (our TPOT) weighted by output tokens - 1;
    percentiles from the weighted distribution (the first value whose cumulative share reaches q); throughput
    over the window, each request's first token at its arrival and the rest spread evenly to its last."""
    low, high = window
    ok = [request for request in requests if request.status == "successful"]
    ttfts = [((r.first - r.start) * 1e3, 1.0) for r in ok if r.first is not None and _meets(r.start, r.first, window)]
    tpots = [(_tpot_ms(r), max(r.output_tokens, 1) - 1.0) for r in ok if _meets(_either(r.first, r.end), r.end, window)]
    spanned = [request for request in requests if _meets(request.start, request.end, window)]
    tokens = sum(count for request in spanned for time, count in _token_times(request) if low <= time <= high)
    ended = sum(1 for request in spanned if request.end is not None and low <= request.end <= high)
    return {
        "ttft_p50_ms": _weighted_quantile(ttfts, 0.5),
        "ttft_p99_ms": _weighted_quantile(ttfts, 0.99),
        "tpot_p50_ms": _weighted_quantile(tpots, 0.5),
        "tpot_p99_ms": _weighted_quantile(tpots, 0.99),
        "output_tok_s": tokens / (high - low),
        "request_throughput": ended / (high - low),
        "completed": float(len([request for request in ok if _meets(request.start, request.end, window)])),
    }


def _meets(start: float | None, end: float | None, window: tuple[float, float]) -> bool:
    """GuideLLM's get_within_range: a span with an end that overlaps the window (no start: it starts at its end)."""
    if end is None:
        return False
    return end >= window[0] and (end if start is None else start) <= window[1]


def _tpot_ms(request: Request) -> float:
    """GuideLLM's inter_token_latency_ms of one request; 0 where it has none (a weight of 0 then drops it)."""
    if request.first is None or request.last is None or request.output_tokens <= 1:
        return 0.0
    return (request.last - request.first) / (request.output_tokens - 1) * 1e3


def _token_times(request: Request) -> list[tuple[float, float]]:
    """(time, tokens) of a request's output as GuideLLM spreads it (GenerativeRequestStats.output_tokens_timings)."""
    if request.first is None or request.last is None or request.iterations <= 1:
        end = _either(request.last, request.end)
        return [] if end is None else [(end, float(request.output_tokens))]
    times = [(request.first, 1.0 if request.output_tokens else 0.0)]
    if request.output_tokens > 1:
        share = (request.output_tokens - 1) / (request.iterations - 1)
        times += [(float(time), share) for time in np.linspace(request.first, request.last, request.iterations)[1:]]
    return times


def _weighted_quantile(values: list[tuple[float, float]], q: float) -> float | None:
    """GuideLLM's percentile (DistributionSummary.from_values, Percentiles.from_pdf): equal values merged, zero
    weights dropped, the first value whose cumulative weight share reaches q (no interpolation)."""
    if not values:
        return None
    unique, inverse = np.unique([value for value, _ in values], return_inverse=True)
    weights = np.zeros_like(unique, dtype=float)
    np.add.at(weights, inverse, [weight for _, weight in values])
    unique, weights = unique[weights > 0], weights[weights > 0]
    if not len(unique):
        return None
    return float(unique[np.searchsorted(np.cumsum(weights / weights.sum()), q, side="left")])
