"""The parts of AIPerf 0.13.0's two exports that `peers.aiperf` reads, as typed models with their limits
(toolkit.results.limits): a request's line of profile_export.jsonl, and the aggregate profile_export_aiperf.json."""

from __future__ import annotations

from typing import Generic, TypeVar

from toolkit.results.limits import (
    ClockNs,
    FileModel,
    Ms,
    OfferedRate,
    RequestsPerS,
    Text,
    TokensPerS,
    WholeCount,
    WholeTokens,
    Window,
)

V = TypeVar("V")


class RecordMetadata(FileModel):
    request_start_ns: ClockNs  # wall clock at the send
    credit_issued_ns: ClockNs | None = None  # when the rate limiter released it
    benchmark_phase: Text | None = None


class MsMetric(FileModel):
    value: Ms


class TokensMetric(FileModel):
    value: WholeTokens


class GapsMetric(FileModel):
    value: list[Ms]


class RecordMetrics(FileModel):
    time_to_first_token: MsMetric | None = None
    request_latency: MsMetric | None = None
    inter_chunk_latency: GapsMetric | None = None
    input_sequence_length: TokensMetric | None = None
    output_sequence_length: TokensMetric | None = None


class Record(FileModel):
    """One line of profile_export.jsonl: a request."""

    metadata: RecordMetadata
    metrics: RecordMetrics


class Figure(FileModel, Generic[V]):
    """An aggregate metric: its unit and statistics."""

    unit: Text | None = None
    avg: V | None = None
    p50: V | None = None
    p99: V | None = None


class ErrorCount(FileModel):
    count: WholeCount | None = None


class Phase(FileModel):
    kind: Text | None = None
    rate: OfferedRate | None = None


class ModelItem(FileModel):
    name: Text | None = None


class Models(FileModel):
    items: list[ModelItem] | None = None


class InputConfig(FileModel):
    phases: list[Phase] | None = None
    models: Models | None = None


class Aggregate(FileModel):
    """profile_export_aiperf.json: the run's figures, its configuration and its span."""

    aiperf_version: Text | None = None
    output_token_throughput: Figure[TokensPerS] | None = None
    request_throughput: Figure[RequestsPerS] | None = None
    time_to_first_token: Figure[Ms] | None = None
    inter_token_latency: Figure[Ms] | None = None
    inter_chunk_latency: Figure[Ms] | None = None
    request_latency: Figure[Ms] | None = None
    request_count: Figure[WholeCount] | None = None
    benchmark_duration: Figure[Window] | None = None
    error_summary: list[ErrorCount] | None = None
    input_config: InputConfig | None = None
    start_time: Text | None = None  # ISO 8601: the profiling phase's start
    end_time: Text | None = None
