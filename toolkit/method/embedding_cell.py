"""An embeddings cell of the matrix judged from its requests (pure; docs/method/embeddings-matrix.md).

`concurrency` loops each send an embeddings request of `batch_size` inputs as soon as the last one's reply came.
Over a fixed window, the requests whose whole reply came inside it count: inputs (`items_s`) and their prompt
tokens (`input_tok_s`) per second, each with a 95 % interval by batch means over the window's `BATCHES` equal
parts, each part counting the share of every request done inside it (toolkit.method.spread, as a decode cell's
total tok/s; `benchmarks/embedding_ties.py`), and the end-to-end latency's p50/p90/p99 with their
95 % distribution-free bounds (toolkit.method.quantile_bounds, as a rate step's). The status follows a decode
cell's rules (toolkit.method.status): Error when a request failed or no reply came in the window, Requests queued
when the server held requests waiting, else Valid. The prompt tokens the server counted over the whole cell are
checked against those the replies counted (`PROMPT_TOKEN_TOLERANCE`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolkit.method.goodput import percentile_of
from toolkit.method.quantile_bounds import quantile_bounds
from toolkit.method.spread import BATCHES, WINDOW_DOF, edges, window_interval
from toolkit.method.status import decode_status, decode_status_client_only

E2E_PERCENTILES: tuple[int, ...] = (50, 90, 99)
PROMPT_TOKEN_TOLERANCE = 0.02  # the server's prompt-token count may differ from the replies' by this share


@dataclass(frozen=True)
class EmbeddingRequest:
    """One request of a cell: when it was sent and its whole reply read (client clock, seconds), the inputs it
    carried, the prompt tokens its reply counted and its error (None: none)."""

    started: float
    ended: float
    items: int
    prompt_tokens: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.prompt_tokens is not None


def ended_in(requests: Sequence[EmbeddingRequest], start: float, end: float) -> list[EmbeddingRequest]:
    """The completed requests whose reply ended in (start, end]."""
    return [r for r in requests if r.ok and start < r.ended <= end]


def _rates(requests: Sequence[EmbeddingRequest], start: float, end: float) -> tuple[float, float]:
    done, seconds = ended_in(requests, start, end), end - start
    return sum(r.items for r in done) / seconds, sum(r.prompt_tokens or 0 for r in done) / seconds


def _share_by(request: EmbeddingRequest, at: float) -> float:
    """How much of a request's work was done by `at`: its items and tokens accrue evenly from its send to its reply."""
    if at >= request.ended:
        return 1.0
    if at <= request.started:
        return 0.0
    return (at - request.started) / (request.ended - request.started)


def _part_rates(requests: Sequence[EmbeddingRequest], start: float, end: float) -> tuple[float, float]:
    """A part's items and tokens per second counted continuously (each completed request's share done inside
    it, `_share_by`), so that two parts in which as many replies came still differ by how far the requests
    in flight at their edges had got; (0, 0) for a part in which no reply came."""
    if not ended_in(requests, start, end):
        return 0.0, 0.0
    shares = [(r, _share_by(r, end) - _share_by(r, start)) for r in requests if r.ok]
    seconds = end - start
    return (sum(r.items * f for r, f in shares) / seconds,
            sum((r.prompt_tokens or 0) * f for r, f in shares) / seconds)  # fmt: skip


def window_rates(requests: Sequence[EmbeddingRequest], start: float, end: float) -> dict[str, float | None]:
    """items_s and input_tok_s over the window (the replies that came in it), each with its 95 % half-width
    (`_ci`) by batch means over the window's equal parts, each part counted continuously (`_part_rates`)."""
    if end <= start:
        raise ValueError(f"window: end {end} is not after start {start}")
    items, tokens = _rates(requests, start, end)
    parts = [_part_rates(requests, a, b) for a, b in edges(start, end, BATCHES)]
    item_spread, token_spread = window_interval([p[0] for p in parts]), window_interval([p[1] for p in parts])
    return {
        "items_s": items,
        "items_s_ci": None if item_spread is None else item_spread.half_width,
        "input_tok_s": tokens,
        "input_tok_s_ci": None if token_spread is None else token_spread.half_width,
    }


def e2e_percentiles(latencies_ms: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p99 of the end-to-end latencies (None: too few values to support one, as a rate step's) with their
    95 % distribution-free bounds (`_low_ms`, `_high_ms`; None: no bound at that end)."""
    out: dict[str, float | None] = {}
    for q in E2E_PERCENTILES:
        bounds = quantile_bounds(latencies_ms, q)
        out[f"e2e_p{q}_ms"] = percentile_of(latencies_ms, q)
        out[f"e2e_p{q}_low_ms"], out[f"e2e_p{q}_high_ms"] = bounds.low, bounds.high
    return out


def prompt_token_problem(server: float | None, client: int) -> str | None:
    """Why the server's prompt-token count of the cell does not match the replies' (off by more than
    `PROMPT_TOKEN_TOLERANCE`); None when it does, or when the server has no count."""
    if server is None:
        return None
    off = abs(server - client) / client if client else (0.0 if server == 0 else float("inf"))
    if off <= PROMPT_TOKEN_TOLERANCE:
        return None
    return (f"the server counted {server:,.0f} prompt tokens, the replies {client:,} (off by more than "
            f"{PROMPT_TOKEN_TOLERANCE:.0%})")  # fmt: skip


def judge_embeddings_window(
    requests: Sequence[EmbeddingRequest],
    start: float,
    end: float,
    *,
    concurrency: int,
    server_samples: Sequence[tuple[float, int, int]] | None,
    error: str | None = None,
) -> dict[str, Any]:
    """The cell's status and window figures as Measurement fields, from its requests (ramp and tail included) and
    the server's (time, running, waiting) samples inside the window (None: judged client-side, without them)."""
    error = error or next((r.error for r in requests if r.error), None)
    done = ended_in(requests, start, end)
    if error is None and not done:
        error = f"no reply ended in the {end - start:g} s window"
    if server_samples:
        status, extras = decode_status(concurrency=concurrency, error=error, readiness_queued=False,
                                       samples=server_samples)  # fmt: skip
    else:
        in_flight = [float(sum(r.started <= t < r.ended for r in requests)) for t in _ticks(start, end)]
        status, extras = decode_status_client_only(concurrency, error, False, in_flight)
    figures: dict[str, Any] = {"status": status, "error": error, "completed": len(done), "measured_s": end - start,
                               "requests_started": len(requests), **extras}  # fmt: skip
    if status == "Error":
        return figures
    latencies = [(r.ended - r.started) * 1000 for r in done]
    halves = {"sub_windows": BATCHES, "window_dof": WINDOW_DOF}
    return figures | window_rates(requests, start, end) | e2e_percentiles(latencies) | halves


def _ticks(start: float, end: float, count: int = 20) -> list[float]:
    """Evenly spaced instants inside the window: where the client counts its requests in flight."""
    return [start + (end - start) * (i + 0.5) / count for i in range(count)]
