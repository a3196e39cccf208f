"""A line of steps.jsonl as a typed model: every step a sweep ran or `import-results` wrote, and what a resumed
sweep reads back of its own steps.

`StepRow` holds what every line holds (its step and offered rate) and types every figure a line may hold, within
its limit (toolkit.results.limits); `SweepStep` adds what a resumed sweep reads back of every line (the search).
Percentiles (any quantile a sweep asked for) and an imported step's `_as_reported` and `_reproduced` figures are
typed by their names (`EXTRA_KINDS`); other fields pass unread.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from toolkit.base.errors import RateSweepError
from toolkit.results.limits import (
    MAX_STEPS,
    MAX_TOTAL_TOKENS,
    Figure,
    FileModel,
    Fraction,
    Ms,
    OfferedRate,
    RequestsPerS,
    Seconds,
    SignedMs,
    Text,
    TokensPerS,
    TotalTokens,
    WholeCount,
)
from toolkit.results.validation import Loc, first_problem, validated

StepIndex = Annotated[int, Field(ge=0, le=MAX_STEPS)]
MAX_ENDPOINTS = 1000  # `server_metrics` endpoints a line may count tokens of
MAX_SOURCES = 100  # `prompt_tokens_by_source` entries (vLLM 0.32 has 3: local_compute, local_cache_hit, …)
SourceName = Annotated[str, Field(min_length=1, max_length=100)]
SourceTokens = Annotated[int, Field(ge=0, le=MAX_TOTAL_TOKENS)]  # a whole count, as the runner writes it
_COPIES = r"(?:_as_reported|_reproduced)?"  # an imported step's figure as the tool reported it, or reproduced
_EXTRAS: tuple[tuple[str, Any], ...] = (
    (r"lag_(?:p[0-9.]+|max)_ms", SignedMs),  # sent before its due time: negative
    (r"wire_ttft_(?:p[0-9.]+|mean)_ms", SignedMs),  # a server timing that breaks the cross-check: negative
    (rf"[a-z0-9_]+_p[0-9.]+_ms{_COPIES}", Ms),
    (r"[a-z0-9_]+_p[0-9.]+_(?:low|high)_ms", Ms),  # a percentile's bounds (toolkit.method.quantile_bounds)
    (rf"output_tok_s{_COPIES}", TokensPerS),
    (rf"request_throughput{_COPIES}", RequestsPerS),
    (rf"(?:completed|failed){_COPIES}", WholeCount),
)
_STRICT = ConfigDict(strict=True, allow_inf_nan=False)
EXTRA_KINDS: tuple[tuple[re.Pattern[str], TypeAdapter[Any]], ...] = tuple(
    (re.compile(pattern), TypeAdapter(kind | None, config=_STRICT)) for pattern, kind in _EXTRAS
)  # a field beyond StepRow's, by its name's pattern: the kind of its value


ClassName = Annotated[str, Field(min_length=1, max_length=64)]
MAX_CLASSES = 100  # classes (a model mix's models) a line may hold figures of (toolkit.rates.classes)
ModelName = Annotated[str, Field(min_length=1, max_length=256)]


class ClassFigures(FileModel):
    """A class sweep's figures of one class in a step (toolkit.method.class_figures): what the search pools, and
    the share of the arrivals it drew; its latency percentiles pass unread."""

    model_config = ConfigDict(extra="allow")

    requests: WholeCount
    completed: WholeCount | None = None
    steady_requests: WholeCount | None = None
    share: Fraction | None = None
    share_low: Fraction | None = None
    share_high: Fraction | None = None
    weight_share: Fraction | None = None
    goodput: RequestsPerS | None = None
    slo_fraction: Fraction
    slo_fraction_low: Fraction | None = None
    slo_fraction_high: Fraction | None = None
    slo_fraction_se: Figure | None = None
    slo_fraction_dof: Figure | None = None
    slo_fraction_deff: Figure | None = None
    slo_verdict: Literal["meets", "fails", "undecided"] | None = None
    limit_fractions: dict[Literal["ttft", "tpot", "e2e"], Fraction | None] | None = None
    schema_valid_share: Fraction | None = None  # its requests' response format (its own or the sweep's), as a step's
    tool_called_share: Fraction | None = None  # its requests' tools, as a step's
    tool_args_valid_share: Fraction | None = None


class StepRow(FileModel):
    """Any steps.jsonl line: ours (toolkit.rates.step.step_row) or an imported step (toolkit.rates.imported)."""

    model_config = ConfigDict(extra="allow")

    step: StepIndex
    offered_rate: OfferedRate | None  # "inf": all at once; null: a closed loop (an imported concurrency run)
    searched: bool | None = None
    arrival: Text | None = None
    burstiness: Figure | None = None
    scheduled_rate: RequestsPerS | None = None
    achieved_rate: RequestsPerS | None = None
    requests: WholeCount | None = None
    completed: WholeCount | None = None
    failed: WholeCount | None = None
    duration_s: Seconds | None = None
    request_throughput: RequestsPerS | None = None
    output_tok_s: TokensPerS | None = None
    input_tokens: TotalTokens | None = None
    output_tokens: TotalTokens | None = None
    goodput: RequestsPerS | None = None
    slo_fraction: Fraction | None = None
    slo_met: bool | None = None
    slo_fraction_low: Fraction | None = None
    slo_fraction_high: Fraction | None = None
    slo_fraction_se: Figure | None = None
    slo_fraction_dof: Figure | None = None
    slo_fraction_deff: Figure | None = None  # the design effect behind the interval (toolkit.method.effective_n)
    slo_verdict: Literal["meets", "fails", "undecided"] | None = None
    steady_requests: WholeCount | None = None
    held: WholeCount | None = None
    lag_flagged: bool | None = None
    server_running_max: WholeCount | None = None
    server_waiting_max: WholeCount | None = None
    server_waiting_mean: Figure | None = None
    kv_usage_max: Fraction | None = None
    server_prompt_tokens: TotalTokens | None = None
    server_generation_tokens: TotalTokens | None = None
    # each scraped /metrics endpoint's (`server_metrics`, in order) when there were several; None: one failed
    endpoint_generation_tokens: list[TotalTokens | None] | None = Field(None, max_length=MAX_ENDPOINTS)
    client_prompt_tokens: TotalTokens | None = None
    client_generation_tokens: TotalTokens | None = None
    prefix_cache_hit_rate: Fraction | None = None
    external_prefix_cache_hit_rate: Fraction | None = None  # a KV connector's external tier, where exported
    # prompt tokens over the step by where their KV came from (vllm:prompt_tokens_by_source); None: not exported
    prompt_tokens_by_source: dict[SourceName, SourceTokens] | None = Field(None, max_length=MAX_SOURCES)
    expected_hit_rate: Fraction | None = None
    client_cached_tokens: TotalTokens | None = None
    workload: Text | None = None
    control_of: StepIndex | None = None
    warmup_requests: WholeCount | None = None
    schema_valid_share: Fraction | None = None  # structured output: completed replies that kept to the format
    invalid_reply: Text | None = None  # structured output: why the step's first invalid reply broke it, and its start
    tool_called_share: Fraction | None = None  # tools: completed replies that called a tool
    tool_args_valid_share: Fraction | None = None  # tools: completed replies whose first call's arguments were valid
    items: WholeCount | None = None  # embeddings: the inputs of the completed requests
    items_s: RequestsPerS | None = None  # embeddings: those inputs per second
    input_tok_s: TokensPerS | None = None  # embeddings: their prompt tokens per second
    source: Text | None = None
    source_file: Text | None = None
    figures_by: Text | None = None
    breakdown_basis: Literal["per-request", "histograms", ""] | None = None
    timed_requests: WholeCount | None = None
    timing_mismatches: WholeCount | None = None
    queue_mean_ms: Ms | None = None
    server_ttft_mean_ms: Ms | None = None
    decode_mean_ms: Ms | None = None
    api_ttft_mean_ms: Ms | None = None
    # a class sweep's: each class's figures against its own service level
    classes: dict[ClassName, ClassFigures] | None = Field(None, max_length=MAX_CLASSES)
    # a model mix's: each served model's figures against the sweep's service level (toolkit.rates.model_mix)
    models: dict[ModelName, ClassFigures] | None = Field(None, max_length=MAX_CLASSES)


class SweepStep(StepRow):
    """A line the sweep runner wrote, as `--resume` reads it back: the step, its rate, whether the search probed it,
    and what the search pools (toolkit.rates.search: requests, the fraction meeting the level; an all-at-once step's
    request throughput)."""

    offered_rate: OfferedRate
    searched: bool
    requests: WholeCount
    slo_fraction: Fraction


def validated_step(value: Any, where: Callable[[Loc], str], model: type[StepRow] = StepRow) -> StepRow:
    """`value` (a line's JSON, "inf" rates as written) as `model`, its extra figures checked by their names;
    RateSweepError ``WHERE: FIELD: VALUE should be ...`` for the first problem."""
    row = validated(model, value, where, RateSweepError)
    if isinstance(row, SweepStep) and row.offered_rate == math.inf and "request_throughput" not in row.model_fields_set:
        raise RateSweepError(f"{where(('request_throughput',))}: request_throughput: missing; the search bounds an "
                             "all-at-once step by it")  # fmt: skip
    for name, extra in (row.model_extra or {}).items():
        kind = next((adapter for pattern, adapter in EXTRA_KINDS if pattern.fullmatch(name)), None)
        if kind is None:
            continue
        try:
            kind.validate_python(extra)
        except ValidationError as exc:
            loc, text = first_problem(exc, (name,))
            raise RateSweepError(f"{where(loc)}: {text}") from None
    return row
