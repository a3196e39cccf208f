"""Status of a sustained-decode cell, by the rules of docs/method/cells.md, "Status of a cell"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolkit.base.schema import Status
from toolkit.method.stats import mean

MIN_WAITING_S = 0.5  # the server's waiting count above 0 for this long means it queued requests
HELD_FRACTION = 0.9  # streams in flight less than this share of the window: "concurrency not held" (a flag)
_TIME_TOLERANCE_S = 1e-6  # so 10.6 - 10.1 counts as 0.5 s despite float rounding


STALL_MIN_S = 1.0  # no token from any stream for this long (or 10 time-between-tokens) disturbs a window
STALL_TBT_MULTIPLE = 10.0
LOOP_BLOCKED_MS = 250.0  # the client's event loop stalled this long: arrival times are not the server's
# docs/method/cells.md samples every 0.5 s at least; a gap of 3 periods leaves the status unfounded
SAMPLE_GAP_MAX_S = 1.5


def disturbance(
    *, silence_s: float, tbt_ms: float | None, loop_lag_max_ms: float | None, max_sample_gap_s: float | None
) -> str | None:
    """Why a decode window cannot be trusted, or None when it can.

    Seen on shared machines: the whole machine pauses for seconds (every process, the server's too), so a
    window holds a few tokens, or the client's loop wakes late and stamps a burst of tokens at once.
    """
    limit = max(STALL_MIN_S, STALL_TBT_MULTIPLE * (tbt_ms or 0.0) / 1000)
    if silence_s > limit:
        return f"no token for {silence_s:.1f} s"
    if loop_lag_max_ms is not None and loop_lag_max_ms > LOOP_BLOCKED_MS:
        return f"client event loop blocked {loop_lag_max_ms:,.0f} ms"
    if max_sample_gap_s is not None and max_sample_gap_s > SAMPLE_GAP_MAX_S:
        return f"no server sample for {max_sample_gap_s:.1f} s"
    return None


def longest_waiting_s(samples: Sequence[tuple[float, int, int]]) -> float:
    """Longest span (last - first sample time) of consecutive samples with waiting > 0.

    A single waiting sample spans 0 s, so one scheduler step of waiting never counts.
    """
    longest, start = 0.0, None
    for time_s, _running, waiting in sorted(samples):
        if waiting > 0:
            start = time_s if start is None else start
            longest = max(longest, time_s - start)
        else:
            start = None
    return longest


def concurrency_not_held(concurrency_held: float | None) -> bool:
    """The streams were in flight less than HELD_FRACTION of the window (re-issue gaps, a client falling behind)."""
    return concurrency_held is not None and concurrency_held < HELD_FRACTION


def decode_status(
    *,
    concurrency: int,
    error: str | None,
    readiness_queued: bool,
    samples: Sequence[tuple[float, int, int]],
    min_waiting_s: float = MIN_WAITING_S,
) -> tuple[Status, dict[str, Any]]:
    """Status from the server's (time_s, running, waiting) samples taken during the window.

    Requests queued means the server queued requests: the readiness gate ended on waiting requests
    (`readiness_queued`), or the waiting count stayed above 0 for `min_waiting_s` inside the window.
    An average running count below N with nothing waiting is not queueing (it is the time between a
    stream's requests); `concurrency_not_held` flags that without changing the status.

    Returns the status and Measurement fields: ``avg_active``, ``max_waiting``, ``waiting_fraction``,
    ``concurrency_held`` (average running / N; None without samples) and ``status_basis`` = "server".
    """
    extras: dict[str, Any] = {
        "avg_active": mean(running for _t, running, _w in samples),
        "max_waiting": max((waiting for _t, _r, waiting in samples), default=None),
        "waiting_fraction": mean(1.0 if waiting > 0 else 0.0 for _t, _r, waiting in samples),
        "status_basis": "server",
    }
    extras["concurrency_held"] = None if extras["avg_active"] is None else extras["avg_active"] / concurrency
    if error is not None:
        return "Error", extras
    if readiness_queued:
        return "Requests queued", extras
    if (extras["max_waiting"] or 0) > 0 and longest_waiting_s(samples) >= min_waiting_s - _TIME_TOLERANCE_S:
        return "Requests queued", extras
    return "Valid", extras


def decode_status_client_only(
    concurrency: int,
    error: str | None,
    readiness_queued: bool,
    client_active_samples: Sequence[float],
) -> tuple[Status, dict[str, Any]]:
    """Fallback when /metrics is unreachable: the client sees a queue only as streams whose first token does
    not come while the others decode (the readiness gate's plateau), so `readiness_queued` decides.

    Returns the status and Measurement fields ``client_avg_active``, ``concurrency_held`` (streams decoding / N;
    None without samples) and ``status_basis`` = "client".
    """
    average = mean(client_active_samples)
    extras: dict[str, Any] = {
        "client_avg_active": average,
        "status_basis": "client",
        "concurrency_held": None if average is None else average / concurrency,
    }
    if error is not None:
        return "Error", extras
    if readiness_queued:
        return "Requests queued", extras
    return "Valid", extras
