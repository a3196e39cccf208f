"""Token streams whose truth is known: the ground truth the toolkit's intervals are calibrated against (pure).

A decode cell's streams, generated in memory as the client would have recorded them (`StreamResult`: token
arrival times and counts, TTFT), under a chosen noise structure:

- `independent`: every stream its own Poisson process (exponential gaps), the textbook case;
- `lockstep`: all streams get their tokens together at the engine's steps, as vLLM's scheduler makes them; step
  times vary (gamma, CV 0.3) and every 25th step is three times as long (a prefill joining the batch);
- `ar1`: lockstep under a machine speed that wanders: its log follows an AR(1) (Ornstein–Uhlenbeck) process whose
  correlation between points a tenth of the window apart is `rho` (0.5), standard deviation `sigma` (0.15);
- `drift`: lockstep under a speed that changes linearly by `drift` (3 %) across the window;
- `stalls`: lockstep with a `stall_s` (0.25 s) pause every `stall_every_s` (1.7 s), at a random phase.

TTFTs are independent, log-normal around `ttft_ms`. The true value of each quantity is what it averages to over
many windows of the same kind (`benchmarks/calibration.py` estimates it from windows it does not test).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from toolkit.loadgen.client import StreamResult

KINDS = ("independent", "lockstep", "ar1", "drift", "stalls")
LEAD_S = 1.0  # streams are decoding this long before the window opens (the cell's ramp is over)
PREFILL_EVERY = 25  # in lockstep, every 25th step is a prefill step ...
PREFILL_FACTOR = 3.0  # ... three times as long


@dataclass(frozen=True)
class Noise:
    """The structure of a window's noise (see the module's docstring)."""

    kind: str = "independent"
    rho: float = 0.5
    sigma: float = 0.15
    drift: float = 0.03
    stall_s: float = 0.25
    stall_every_s: float = 1.7
    jitter_cv: float = 0.3

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: {self.kind!r}; allowed: {', '.join(KINDS)}")


@dataclass(frozen=True)
class Cell:
    """A decode cell: streams at once, window length, the engine's mean step (one token per stream), a speed
    factor (1.1: every step 10 % faster), and the TTFTs' median and log-normal sigma."""

    streams: int = 8
    window_s: float = 10.0
    step_s: float = 0.02
    speed: float = 1.0
    ttft_ms: float = 80.0
    ttft_sigma: float = 0.5


def _step_times(noise: Noise, cell: Cell, rng: random.Random) -> list[float]:
    """The engine's step end times from -LEAD_S to past the window's end."""
    end = cell.window_s + 0.5
    shape = 1 / noise.jitter_cv**2
    theta = -math.log(noise.rho) / (cell.window_s / 10)
    x = rng.gauss(0.0, noise.sigma)  # the AR(1) log speed, stationary from the start
    stall_at = -LEAD_S + rng.uniform(0, noise.stall_every_s)
    t, n, times = -LEAD_S, 0, []
    while t < end:
        speed = cell.speed
        if noise.kind == "ar1":
            speed *= math.exp(x)
        elif noise.kind == "drift":
            speed *= 1 + noise.drift * (t / cell.window_s - 0.5)
        d = cell.step_s / speed * rng.gammavariate(shape, 1 / shape)
        n += 1
        if n % PREFILL_EVERY == 0:
            d *= PREFILL_FACTOR
        if noise.kind == "stalls" and t + d >= stall_at:
            d += noise.stall_s
            stall_at += noise.stall_every_s
        if noise.kind == "ar1":
            a = math.exp(-theta * d)
            x = a * x + math.sqrt(1 - a * a) * noise.sigma * rng.gauss(0.0, 1.0)
        t += d
        times.append(t)
    return times


def _poisson_times(cell: Cell, rng: random.Random) -> list[float]:
    t, times, end = -LEAD_S, [], cell.window_s + 0.5
    while t < end:
        t += rng.expovariate(cell.speed / cell.step_s)
        times.append(t)
    return times


def window_streams(noise: Noise, cell: Cell, rng: random.Random) -> list[StreamResult]:
    """One window's streams; the window is (0, cell.window_s]."""
    shared = None if noise.kind == "independent" else _step_times(noise, cell, rng)
    results = []
    for _ in range(cell.streams):
        times = shared if shared is not None else _poisson_times(cell, rng)
        ttft_s = cell.ttft_ms / 1000 * math.exp(rng.gauss(0.0, cell.ttft_sigma))
        first = times[0]
        results.append(
            StreamResult(
                started=first - ttft_s,
                first_token_at=first,
                token_events=[(t, i + 1) for i, t in enumerate(times)],
                completion_tokens=len(times),
            )
        )
    return results
