"""The parts of GuideLLM 0.8.1's benchmarks JSON that `peers.guidellm` reads, as typed models with their limits
(toolkit.results.limits): one benchmark's metrics, strategy, measurement window and saved requests."""

from __future__ import annotations

from typing import Generic, TypeVar

from toolkit.results.limits import (
    Clock,
    Count,
    FileModel,
    Ms,
    OfferedRate,
    RequestsPerS,
    Seconds,
    Text,
    Tokens,
    TokensPerS,
)

V = TypeVar("V")


class Timings(FileModel):
    """A request's times, epoch seconds (`info.timings`)."""

    request_start: Clock | None = None
    resolve_start: Clock | None = None
    targeted_start: Clock | None = None
    first_token_iteration: Clock | None = None
    last_token_iteration: Clock | None = None
    request_end: Clock | None = None
    resolve_end: Clock | None = None
    token_iterations: Tokens | None = None


class RequestInfo(FileModel):
    timings: Timings | None = None
    error: str | None = None


class SavedRequest(FileModel):
    info: RequestInfo | None = None
    prompt_tokens: Tokens | None = None
    output_tokens: Tokens | None = None


class SavedRequests(FileModel):
    successful: list[SavedRequest] | None = None
    errored: list[SavedRequest] | None = None
    incomplete: list[SavedRequest] | None = None


class Distribution(FileModel, Generic[V]):
    mean: V | None = None
    percentiles: dict[str, V | None] | None = None


class ByStatus(FileModel, Generic[V]):
    successful: Distribution[V] | None = None
    total: Distribution[V] | None = None


class Totals(FileModel):
    successful: Count | None = None
    errored: Count | None = None
    incomplete: Count | None = None


class Metrics(FileModel):
    time_to_first_token_ms: ByStatus[Ms] | None = None
    inter_token_latency_ms: ByStatus[Ms] | None = None
    request_latency: ByStatus[Seconds] | None = None
    output_tokens_per_second: ByStatus[TokensPerS] | None = None
    requests_per_second: ByStatus[RequestsPerS] | None = None
    request_totals: Totals | None = None


class Strategy(FileModel):
    type_: Text | None = None
    rate: OfferedRate | None = None


class Backend(FileModel):
    model: Text | None = None


class BenchmarkConfig(FileModel):
    strategy: Strategy | None = None
    backend: Backend | None = None


class SchedulerMetrics(FileModel):
    measure_start_time: Clock | None = None
    measure_end_time: Clock | None = None


class Benchmark(FileModel):
    """One entry of `benchmarks`: what a run at one rate measured."""

    metrics: Metrics | None = None
    requests: SavedRequests | None = None
    config: BenchmarkConfig | None = None
    duration: Seconds | None = None
    scheduler_metrics: SchedulerMetrics | None = None
