"""Arrival schedules for open-loop load: when each request of a step is due, in seconds from the step's start (pure).

`poisson`: exponential gaps (a Poisson process); `gamma`: gamma gaps with shape = burstiness and scale =
1 / (rate × burstiness), as `vllm bench serve --burstiness` draws them (burstiness 1 is Poisson, below 1 burstier,
above 1 more even); `constant`: even gaps of 1 / rate. A rate of `inf` sends every request at once. The first
request is due at 0; a step is bounded by a duration (arrivals before it) or a request count. Seeded: the same
arguments give the same schedule. `rescale`: the draw's gaps are scaled so that the schedule's own rate,
(n - 1) / span, is exactly the rate asked for (as `vllm bench serve` does), and a duration-bound step holds
round(rate × duration) requests; the shape of the gaps (Poisson, bursty) is kept, their sum is not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

Arrival = Literal["poisson", "constant", "gamma"]
ARRIVALS: tuple[str, ...] = ("poisson", "constant", "gamma")
MAX_REQUESTS = 10_000_000  # a schedule longer than this is a mistake in the parameters, not a load


def _gaps(rng: np.random.Generator, n: int, rate: float, arrival: Arrival, burstiness: float) -> np.ndarray:
    if arrival == "constant":
        return np.full(n, 1.0 / rate)
    if arrival == "poisson":
        return rng.exponential(1.0 / rate, n)
    if arrival == "gamma":
        return rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    raise ValueError(f"arrival: {arrival!r}; allowed: {', '.join(ARRIVALS)}")


def schedule(
    rate: float,
    *,
    arrival: Arrival = "poisson",
    burstiness: float = 1.0,
    duration_s: float | None = None,
    count: int | None = None,
    seed: int | Sequence[int] = 0,
    rescale: bool = False,
) -> list[float]:
    """Due times (s, ascending, the first at 0) of one step: arrivals before `duration_s`, or `count` of them.

    `rate` is in requests/s (`math.inf`: all at once, which needs `count`).
    """
    if (duration_s is None) == (count is None):
        raise ValueError("schedule: give either duration_s or count")
    if not rate > 0 or math.isnan(rate):
        raise ValueError(f"rate: {rate} is not a positive number of requests/s")
    if not burstiness > 0 or not math.isfinite(burstiness):
        raise ValueError(f"burstiness: {burstiness} is not a positive number")
    if math.isinf(rate):
        if count is None:
            raise ValueError("rate: inf (all at once) needs a request count, not a duration")
        return [0.0] * count
    rng = np.random.default_rng(seed)
    if rescale and arrival != "constant":
        n = count if count is not None else max(1, round(rate * float(duration_s or 0.0)))
        if n < 0 or n > MAX_REQUESTS:
            raise ValueError(f"count: {n} is not between 0 and {MAX_REQUESTS:,}")
        return _rescaled(_gaps(rng, max(n - 1, 0), rate, arrival, burstiness), rate)
    if count is not None:
        if count < 0 or count > MAX_REQUESTS:
            raise ValueError(f"count: {count} is not between 0 and {MAX_REQUESTS:,}")
        gaps = _gaps(rng, count, rate, arrival, burstiness)
        return [0.0, *np.cumsum(gaps[: max(count - 1, 0)]).tolist()][:count]
    assert duration_s is not None
    if not duration_s > 0 or not math.isfinite(duration_s):
        raise ValueError(f"duration_s: {duration_s} is not a positive number of seconds")
    expected = rate * duration_s
    if expected > MAX_REQUESTS:
        raise ValueError(f"rate × duration_s: {expected:,.0f} requests, over {MAX_REQUESTS:,}")
    times: list[float] = [0.0]
    while True:  # draw in blocks until the duration is passed (one block almost always)
        block = _gaps(rng, int(expected + 6 * math.sqrt(expected) + 16), rate, arrival, burstiness)
        more = times[-1] + np.cumsum(block)
        inside = more[more < duration_s]
        times.extend(inside.tolist())
        if len(inside) < len(more):
            return times


def _rescaled(gaps: np.ndarray, rate: float) -> list[float]:
    """Due times from `gaps`, scaled so that (n - 1) / span is `rate`: the last is due at (n - 1) / rate."""
    times = np.concatenate([[0.0], np.cumsum(gaps)])
    span = float(times[-1])
    return (times * (len(gaps) / rate / span)).tolist() if span > 0 else times.tolist()


def split(times: Sequence[float], clients: int, *, seed: int | Sequence[int] = 0) -> list[list[int]]:
    """Deal the requests of one schedule to `clients` senders: the indices each sends, in order.

    Each arrival goes to a client drawn uniformly at random, so a Poisson stream of rate R becomes `clients`
    independent Poisson streams of rate R / clients (thinning), whose union is the original schedule.
    """
    if clients < 1:
        raise ValueError(f"clients: {clients} is not a whole number >= 1")
    owner = np.random.default_rng(seed).integers(0, clients, len(times))
    return [np.flatnonzero(owner == c).tolist() for c in range(clients)]
