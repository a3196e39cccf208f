"""The server's own clock for one request: the `metrics` object vLLM (>= 0.32, `--enable-per-request-metrics`) puts
on a stream's final usage chunk, read into a `ServerTiming` (pure).

vLLM's engine stamps a request when it is queued, scheduled, and when its first and last tokens are made; the object
holds the differences: `queue_time_ms` (queued to scheduled), `time_to_first_token_ms` (scheduled to first token,
the prefill), `generation_time_ms` (first to last token), `mean_itl_ms` and `tokens_per_second`. A field may be
absent or null (the engine lacked a stamp); any other value that is not a finite number >= 0 makes the whole object
malformed (`ReplyError`): a request keeps its client figures and none of the server's.

With speculative decoding (and `--per-request-spec-decode-metrics summary`; vLLM sends the object then, with or
without `--enable-per-request-metrics`) the object also holds `speculative_decoding`, of which the request's
`acceptance_histogram` is read: entry j counts the verify steps that accepted exactly j draft tokens (0 to
`num_spec_tokens`, the bonus token not counted). It is absent or null, or a list of 2 to `MAX_DRAFT_POSITIONS` + 1
whole numbers >= 0 whose length is `num_spec_tokens` + 1 where that is given; anything else is malformed, as above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from toolkit.base.api_keys import excerpt
from toolkit.base.errors import ReplyError

# The record's field -> the field of vLLM's `metrics` object.
SERVER_FIELDS: dict[str, str] = {
    "server_queue_ms": "queue_time_ms",
    "server_ttft_ms": "time_to_first_token_ms",
    "server_generation_ms": "generation_time_ms",
    "server_itl_ms": "mean_itl_ms",
    "server_tok_s": "tokens_per_second",
}
# A day in milliseconds: a figure above it is no duration (or rate) a stream could have had.
MAX_SERVER_MS = 86_400_000.0
# Draft tokens a verify step may propose: vLLM's configs use 1 to about 16; more is no speculation we know of.
MAX_DRAFT_POSITIONS = 64
# Verify steps of one request: each makes at least one token, and a request makes at most this many.
MAX_SPEC_STEPS = 10**8


@dataclass(frozen=True)
class ServerTiming:
    """One request on the server's clock (None: the server did not say)."""

    queue_ms: float | None = None
    ttft_ms: float | None = None  # from scheduling: the prefill, without the queue
    generation_ms: float | None = None  # first token to last
    itl_ms: float | None = None
    tok_s: float | None = None
    # speculative decoding: [j] = the request's verify steps that accepted exactly j draft tokens (None: not sent)
    acceptance_histogram: tuple[int, ...] | None = None

    def fields(self) -> dict[str, float | None]:
        """The record's `server_*` fields."""
        return {record: getattr(self, field) for record, field in zip(SERVER_FIELDS, _TIMING_FIELDS, strict=True)}


_TIMING_FIELDS = ("queue_ms", "ttft_ms", "generation_ms", "itl_ms", "tok_s")  # SERVER_FIELDS' order


def read_server_timing(metrics: Any) -> ServerTiming | None:
    """The timing and acceptance histogram in a final chunk's `metrics` (None: the object holds neither, e.g. only
    speculative decoding's totals); `ReplyError` saying what is wrong with it."""
    if not isinstance(metrics, dict):
        raise ReplyError(f"metrics is not an object ({excerpt(metrics, 42)})")
    values = {
        field: _duration(metrics, name) for field, name in zip(_TIMING_FIELDS, SERVER_FIELDS.values(), strict=True)
    }
    histogram = _acceptance_histogram(metrics.get("speculative_decoding"))
    if all(v is None for v in values.values()) and histogram is None:
        return None
    return ServerTiming(**values, acceptance_histogram=histogram)


def _duration(metrics: dict[str, Any], name: str) -> float | None:
    value = metrics.get(name)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or not 0 <= value <= MAX_SERVER_MS:
        raise ReplyError(f"metrics.{name} is not a duration or rate >= 0 ({excerpt(value, 42)})")
    return float(value)


def _acceptance_histogram(spec: Any) -> tuple[int, ...] | None:
    """`speculative_decoding.acceptance_histogram`, checked against `num_spec_tokens` where that is given."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ReplyError(f"metrics.speculative_decoding is not an object ({excerpt(spec, 42)})")
    histogram = spec.get("acceptance_histogram")
    if histogram is None:
        return None
    name = "metrics.speculative_decoding.acceptance_histogram"
    if (
        not isinstance(histogram, list)
        or not 2 <= len(histogram) <= MAX_DRAFT_POSITIONS + 1
        or not all(type(n) is int and 0 <= n <= MAX_SPEC_STEPS for n in histogram)
    ):
        most = MAX_DRAFT_POSITIONS + 1
        raise ReplyError(f"{name} is not a list of 2 to {most} step counts ({excerpt(histogram, 42)})")
    tokens = spec.get("num_spec_tokens")
    if tokens is not None and (type(tokens) is not int or tokens != len(histogram) - 1):
        shown = tokens if type(tokens) is int else excerpt(tokens, 24)
        raise ReplyError(f"{name} has {len(histogram)} entries for num_spec_tokens {shown}")
    return tuple(histogram)
