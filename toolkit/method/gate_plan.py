"""How many interleaved rounds, of what window, a gate needs (pure): power planning from a run's own spread.

One interleaved round gives one log ratio of the overall (each side's geometric mean over its `cells` cells).
Its variance has two parts: the windows' own noise, `2 w² (W0 / W) / cells` (`w` a cell's relative standard error
at the window `W0` it was measured with, which falls as 1 / W and averages over the cells), and what moves
between a round's two runs and is shared by every cell, `b²` (the machine's change inside a round), which
neither longer windows nor more cells shrink. With R rounds the mean log ratio has standard error
`sqrt(V(W) / R)`; a change of size δ = -log(1 - detect) is resolved at `level` with `power` when
`(t(R-1, level) + t(R-1, power one-sided)) sqrt(V(W) / R) <= δ` (Student's t, R - 1 degrees of freedom).
The plan is the window, of `WINDOWS_S` no shorter than the one measured, that needs the least time, R × (W + the
cell's own overhead around its window: ramp, scrapes, drain), at least `MIN_ROUNDS` rounds (A B B A: balanced,
3 degrees of freedom). A server relaunched every round costs more again, which the run cannot know.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from toolkit.method.gate import FAMILY_ALPHA
from toolkit.method.spread import t_quantile

POWER = 0.8
MIN_ROUNDS = 4
MAX_ROUNDS = 1000
WINDOWS_S = (5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0)
DEFAULT_LEVEL = 1 - FAMILY_ALPHA / 2  # the gate's level with its two default quantities


@dataclass(frozen=True)
class Spread:
    """What a run's numbers say about one quantity's noise: a cell's relative standard error `within` at
    `window_s`, over `cells` cells; `between` the log standard deviation shared by the cells of one round's
    paired ratio (None: not measured, taken as 0)."""

    within: float
    window_s: float
    cells: int
    between: float | None
    overhead_s: float = 0.0  # a cell's wall time around its window (readiness, scrapes, drain)

    def round_variance(self, window_s: float) -> float:
        """The variance of one round's paired log ratio of the overall, with windows of `window_s`."""
        own = 2 * self.within**2 * (self.window_s / window_s) / max(self.cells, 1)
        return own + (self.between or 0.0) ** 2


@dataclass(frozen=True)
class Plan:
    """Rounds and window that resolve a change of `detect` with `power`; `rounds` None: more than MAX_ROUNDS."""

    detect: float
    window_s: float
    rounds: int | None
    rounds_at_measured: int | None  # at the window measured


def between_from_rounds(round_logs_variance: float, spread_within: float, cells: int) -> float:
    """The shared part `b` of an interleaved folder's observed variance of the rounds' overall log ratios (what
    the windows' own noise does not explain; 0 when they explain all of it)."""
    own = 2 * spread_within**2 / max(cells, 1)
    return math.sqrt(max(0.0, round_logs_variance - own))


def rounds_needed(variance: float, delta: float, level: float = DEFAULT_LEVEL, power: float = POWER) -> int | None:
    """The fewest rounds (at least 2) with `(t(R-1, level) + t(R-1, power)) sqrt(variance / R) <= delta`;
    None when more than MAX_ROUNDS would be needed or `delta` is 0."""
    if delta <= 0 or not math.isfinite(variance):
        return None
    if variance <= 0:
        return 2
    for rounds in range(2, MAX_ROUNDS + 1):
        dof = rounds - 1
        if (t_quantile(dof, level) + t_quantile(dof, 2 * power - 1)) * math.sqrt(variance / rounds) <= delta:
            return rounds
    return None


def detect_delta(detect: float) -> float:
    """The log size of a regression of `detect` (0.03: 3 %)."""
    return -math.log1p(-detect)


def plan(spread: Spread, detect: float, level: float = DEFAULT_LEVEL, windows_s: Sequence[float] = WINDOWS_S) -> Plan:
    """The window (of `windows_s`, none shorter than the one measured) whose rounds × (window + overhead) is
    least, and its rounds (at least MIN_ROUNDS); ties go to the shorter window."""
    delta = detect_delta(detect)
    choices = sorted({spread.window_s, *(w for w in windows_s if w >= spread.window_s)})

    def rounds_at(window: float) -> int | None:
        found = rounds_needed(spread.round_variance(window), delta, level)
        return None if found is None else max(found, MIN_ROUNDS)

    measured = rounds_at(spread.window_s)
    costed = [(n * (w + spread.overhead_s), w, n) for w in choices if (n := rounds_at(w)) is not None]
    if not costed:
        return Plan(detect, spread.window_s, None, measured)
    _, window, rounds = min(costed)
    return Plan(detect, window, rounds, measured)


def more_rounds(se: float, rounds: int, log_distance: float, level: float) -> int | None:
    """For an inconclusive gate: how many rounds beyond `rounds` would likely (with POWER) resolve it, at the
    noise measured (the rounds' log standard deviation `se √rounds`), if the ratio is where it was measured
    (`log_distance` from the limit); None when the ratio sits on the limit or more than MAX_ROUNDS are needed."""
    needed = rounds_needed(se * se * rounds, abs(log_distance), level)
    return None if needed is None else max(needed - rounds, 1)
