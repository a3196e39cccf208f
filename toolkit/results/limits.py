"""The plausible ranges of what a results file may hold, as named limits and as the typed fields that apply them.

Every reader of a document (ours: steps.jsonl, results.jsonl; another tool's: `import-results`) validates what
it uses through pydantic models built of these fields: a number is a JSON number (not text, not a boolean),
finite, of the right sign and below its limit; a count is whole. A value past a limit is no measurement of a
server but a damaged or foreign file, refused in one line (toolkit.results.validation).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

MAX_DURATION_S = 7 * 24 * 3600.0  # a run, a step, a request or a latency: a week at most
MAX_LATENCY_MS = MAX_DURATION_S * 1e3
MIN_WINDOW_S = 1e-3  # a measurement window or benchmark duration: at least a millisecond
MAX_CLOCK_S = 1e10  # a timestamp, seconds since the epoch (year 2286) or since a process clock's origin
MAX_RATE_RPS = 1e6  # requests per second, offered or achieved
MAX_TOKENS_PER_S = 1e9
MAX_REQUESTS = 10**8  # requests in one run or step (completed, failed, sent)
MAX_TOKENS = 10**8  # tokens of one request (prompt or output) or one context
MAX_TOTAL_TOKENS = 10**13  # tokens summed over a step or a cell
MAX_CONCURRENCY = 10**6  # streams at once
MAX_STEPS = 10**6  # steps of one sweep, rounds of one matrix
MAX_FIGURE = 1e15  # any other figure (watts, joules, ratios, retries): finite and below this
MAX_TEXT = 1000  # characters of a name or version read from a file (a model, a tool's version)


class FileModel(BaseModel):
    """A part of a file as read: JSON types only (no text for a number), finite numbers, unknown fields ignored."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="ignore", frozen=True)


def _whole(value: float) -> float:
    if value != int(value):
        raise ValueError("should be a whole number")
    return value


def _rate_or_inf(value: Any) -> Any:
    """JSON has no infinity: a rate of "inf" (all at once) is written as text."""
    return math.inf if value == "inf" else value


def _positive_rate(value: float) -> float:
    if not (0 < value <= MAX_RATE_RPS or value == math.inf):  # NaN fails both
        raise ValueError(f'should be a rate above 0 and at most {MAX_RATE_RPS:g} req/s, or "inf"')
    return value


Ms = Annotated[float, Field(ge=0, le=MAX_LATENCY_MS)]
SignedMs = Annotated[float, Field(ge=-MAX_LATENCY_MS, le=MAX_LATENCY_MS)]  # a lag: early is negative
Seconds = Annotated[float, Field(ge=0, le=MAX_DURATION_S)]
Window = Annotated[float, Field(ge=MIN_WINDOW_S, le=MAX_DURATION_S)]
Clock = Annotated[float, Field(ge=0, le=MAX_CLOCK_S)]
ClockNs = Annotated[int, Field(ge=0, le=int(MAX_CLOCK_S * 1e9))]
RequestsPerS = Annotated[float, Field(ge=0, le=MAX_RATE_RPS)]
TokensPerS = Annotated[float, Field(ge=0, le=MAX_TOKENS_PER_S)]
OfferedRate = Annotated[float, Field(allow_inf_nan=True), BeforeValidator(_rate_or_inf), AfterValidator(_positive_rate)]
Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS)]
WholeTokens = Annotated[float, Field(ge=0, le=MAX_TOKENS), AfterValidator(_whole)]  # 16 or 16.0
Count = Annotated[int, Field(ge=0, le=MAX_REQUESTS)]
WholeCount = Annotated[float, Field(ge=0, le=MAX_REQUESTS), AfterValidator(_whole)]  # 24 or 24.0
TotalTokens = Annotated[float, Field(ge=0, le=MAX_TOTAL_TOKENS), AfterValidator(_whole)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Figure = Annotated[float, Field(ge=0, le=MAX_FIGURE)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
