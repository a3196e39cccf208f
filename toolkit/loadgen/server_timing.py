"""The server's own clock for one request: the `metrics` object vLLM (>= 0.32, `--enable-per-request-metrics`) puts
on a stream's final usage chunk, read into a `ServerTiming` (pure).

vLLM's engine stamps a request when it is queued, scheduled, and when its first and last tokens are made; the object
holds the differences: `queue_time_ms` (queued to scheduled), `time_to_first_token_ms` (scheduled to first token,
the prefill), `generation_time_ms` (first to last token), `mean_itl_ms` and `tokens_per_second`. A field may be
absent or null (the engine lacked a stamp); any other value that is not a finite number >= 0 makes the whole object
malformed (`ReplyError`): a request keeps its client figures and none of the server's.
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


@dataclass(frozen=True)
class ServerTiming:
    """One request on the server's clock (None: the server did not say)."""

    queue_ms: float | None = None
    ttft_ms: float | None = None  # from scheduling: the prefill, without the queue
    generation_ms: float | None = None  # first token to last
    itl_ms: float | None = None
    tok_s: float | None = None

    def fields(self) -> dict[str, float | None]:
        """The record's `server_*` fields."""
        values = (self.queue_ms, self.ttft_ms, self.generation_ms, self.itl_ms, self.tok_s)
        return dict(zip(SERVER_FIELDS, values, strict=True))


def read_server_timing(metrics: Any) -> ServerTiming | None:
    """The timing in a final chunk's `metrics` (None: the object holds no timing, e.g. only speculative decoding's
    acceptance); `ReplyError` saying what is wrong with it."""
    if not isinstance(metrics, dict):
        raise ReplyError(f"metrics is not an object ({excerpt(metrics, 42)})")
    values = [_duration(metrics, name) for name in SERVER_FIELDS.values()]
    if all(v is None for v in values):
        return None
    return ServerTiming(*values)


def _duration(metrics: dict[str, Any], name: str) -> float | None:
    value = metrics.get(name)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or not 0 <= value <= MAX_SERVER_MS:
        raise ReplyError(f"metrics.{name} is not a duration or rate >= 0 ({excerpt(value, 42)})")
    return float(value)
