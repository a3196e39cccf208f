"""A gate's rate side over folders on disk: whether both folders' rate sweeps can be compared, which rate quantities
are gated (a class sweep's per class too), and their verdicts (toolkit.reports.gate_rates, gate_classes).

Two sweeps compare when both were judged against one service level: one SLO, or, for traffic-class sweeps, the same
classes each with the same SLO. What cannot be compared is one line (ResultsError, exit 2) where a rate quantity is
named or nothing else would be gated; a bare limit otherwise gates the decode cells without them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolkit.base.errors import ParamsError, ResultsError
from toolkit.method.rate_verdicts import class_steps
from toolkit.reports.gate_classes import class_bracket, class_levels, class_rows, mix_goodputs
from toolkit.reports.gate_rate_rounds import Goodputs, paired_goodput
from toolkit.reports.gate_rates import (
    CLASS_NAME,
    RATE_QUANTITIES,
    GoodputRatio,
    Limits,
    base_name,
    bracket,
    class_quantity,
    goodput_ratio,
    has_limits,
    judge_goodput,
    judge_slo_rate,
    level_text,
    rate_goodputs,
    rate_list,
    rate_rows,
)
from toolkit.reports.gate_ratios import BetweenRuns, Judged, RateRow
from toolkit.results.gate_inputs import INTERLEAVED, GateInput

if TYPE_CHECKING:
    from toolkit.results.rate_runs import RateSweep

__all__ = ["SweepPair", "judge_rates", "rate_limits", "rate_sweeps", "sweep_goodputs"]
ALL_CLASSES = ", all classes"  # the basis of a class sweep's total


@dataclass(frozen=True)
class SweepPair:
    """Both sides' rate sweeps in each round (measured apart: one), and their traffic classes (none: a sweep
    without classes)."""

    rounds: tuple[tuple[RateSweep, RateSweep], ...]
    classes: tuple[str, ...] = ()
    interleaved: bool = False

    @property
    def baseline(self) -> RateSweep:
        return self.rounds[0][0]

    @property
    def candidate(self) -> RateSweep:
        return self.rounds[0][1]


def rate_sweeps(found: GateInput, limits: Limits, share_decode: Callable[[], bool]) -> SweepPair | None:
    """Both sides' rate sweeps (each round's, interleaved) when a rate quantity may be gated; ParamsError or
    ResultsError, one line, where one is named and a side has no sweep or no SLO, or the sweeps were judged against
    different SLOs or classes (a bare limit then gates none of them; `share_decode`: whether the decode cells it
    gates instead are there), or where the highest rate meeting the SLO is named in an interleaved folder."""
    from toolkit.results.rate_runs import has_rates, load_rate_sweep

    named = ", ".join(limits.rates)
    if not (named or limits.bare is not None):
        return None
    interleaved = found.design == INTERLEAVED
    if interleaved and (searched := [n for n in limits.rates if base_name(n) == "slo_rate"]):
        raise ParamsError(f"max-regression: {searched[0]}: not gated in an interleaved folder (a round's bracket is "
                          "an interval, not a value, and the rounds' brackets show no spread); gate goodput there, or "
                          "two sweeps measured apart")  # fmt: skip
    folders = [(found.baseline[r], found.candidate[r]) for r in found.rounds]
    if missing := [f for pair in folders for f in pair if not has_rates(f)]:
        if named:
            raise ResultsError(f"max-regression: {named}: {missing[0]} holds no rate sweep (no rates/sweep.json)")
        return None
    rounds = tuple((load_rate_sweep(a), load_rate_sweep(b)) for a, b in folders)
    classes = [_compatible(pair, limits, share_decode) for pair in rounds]
    if any(c is None for c in classes):
        return None
    if len(set(classes)) > 1:
        raise ResultsError("gate: the rounds' rate sweeps have different traffic classes; gate rounds of one sweep")
    return SweepPair(rounds, classes[0] or (), interleaved)


def _compatible(sweeps: tuple[RateSweep, RateSweep], limits: Limits,
                share_decode: Callable[[], bool]) -> tuple[str, ...] | None:  # fmt: skip
    """The classes two sweeps share (none: sweeps without classes) where they compare; None where a bare limit
    gates none of their quantities; one line where they cannot be compared and a rate quantity is named."""
    named = ", ".join(limits.rates)
    if any(s.sweep.classes for s in sweeps):
        return _class_pair(sweeps, limits, share_decode)
    if classed := [n for n in limits.rates if CLASS_NAME.fullmatch(n)]:
        raise ResultsError(f"max-regression: {classed[0]}: the rate sweeps have no traffic classes")
    if unjudged := [s for s in sweeps if not has_limits(s.level)]:
        if named:
            raise ResultsError(f"max-regression: {named}: {unjudged[0].folder}'s rate sweep has no SLO "
                               "(slo_ttft_ms, slo_tpot_ms, slo_e2e_ms): no request meets or fails one")  # fmt: skip
        return None
    if sweeps[0].level != sweeps[1].level:
        if not named:  # a bare limit gates the rate quantities only where one SLO judged both sweeps
            return None
        raise ResultsError(f"gate: the rate sweeps were judged against different SLOs ({level_text(sweeps[0].level)}"
                           f"; {level_text(sweeps[1].level)}); judge both against one")  # fmt: skip
    return ()


def _class_pair(
    sweeps: tuple[RateSweep, RateSweep], limits: Limits, share_decode: Callable[[], bool]
) -> tuple[str, ...] | None:
    """Two class sweeps of the same classes, each judged against the same SLO on both sides; else one line where a
    rate quantity is named or no decode cell would be gated instead (a bare limit: None)."""
    levels = [class_levels(s.sweep.as_dict(), s.level.target) for s in sweeps]
    problem = None
    if list(levels[0]) != list(levels[1]):
        shown = [", ".join(mine) or "none" for mine in levels]
        problem = (f"gate: the rate sweeps' traffic classes differ (baseline: {shown[0]}; candidate: {shown[1]}): each "
                   "class is judged against its own SLO; gate sweeps of one set of classes")  # fmt: skip
    elif differ := next((n for n in levels[0] if levels[0][n] != levels[1][n]), None):
        problem = (f"gate: class {differ} was judged against different SLOs ({level_text(levels[0][differ])}; "
                   f"{level_text(levels[1][differ])}); judge both against one")  # fmt: skip
    if problem is not None:
        if limits.rates or not share_decode():
            raise ResultsError(problem)
        return None  # a bare limit gates the decode cells both runs measured
    names = tuple(levels[0])
    for name in limits.rates:
        match = CLASS_NAME.fullmatch(name)
        if match and match["name"] not in names:
            raise ResultsError(f"max-regression: {name}: no class {match['name']} in the rate sweeps (classes: "
                               f"{', '.join(names)})")  # fmt: skip
    return names


def rate_limits(limits: Limits, pair: SweepPair | None) -> dict[str, float]:
    """The rate quantities gated, each with its limit: those named, and with a bare limit goodput and (where both
    sweeps searched, measured apart) the highest rate meeting the SLO; a class sweep's per class too, after its total
    (`goodput[chat]`: its own limit, else `goodput`'s, else the bare one)."""
    if pair is None:
        return {}
    wanted = dict(limits.rates)
    if limits.bare is not None:
        wanted.setdefault("goodput", limits.bare)
        if not pair.interleaved and all(s.search is not None for s in (pair.baseline, pair.candidate)):
            wanted.setdefault("slo_rate", limits.bare)
    out: dict[str, float] = {}
    for base in RATE_QUANTITIES:
        classes = [f"{base}[{c}]" for c in pair.classes]
        if base in wanted:
            out[base] = wanted[base]
            out |= {name: wanted.get(name, wanted[base]) for name in classes}
        else:
            out |= {name: wanted[name] for name in classes if name in wanted}
    return out


def judge_rates(pair: SweepPair, limits: dict[str, float], level: float, allowance: BetweenRuns | None) -> list[Judged]:
    """The rate quantities' verdicts in the order of `limits` (interleaved: goodput paired over the rounds);
    ResultsError, one line, when the sweeps share no offered rate."""
    steps = [[_records(s) for s in sweeps] for sweeps in pair.rounds]  # round -> the baseline's, the candidate's
    rows = [[class_rows(mine) for mine in sides] for sides in steps]  # a class sweep's: with its classes' figures
    out = []
    for name, limit in limits.items():
        match = CLASS_NAME.fullmatch(name)
        base, cls = (match["base"], match["name"]) if match else (name, None)
        q = class_quantity(base, cls) if cls else RATE_QUANTITIES[base]
        mix = bool(pair.classes) and cls is None
        sides = [[class_steps(mine, cls) for mine in r] for r in rows] if cls else rows if pair.classes else steps
        what = (ALL_CLASSES if mix else "") + (f", {len(pair.rounds)} rounds paired" if pair.interleaved else "")
        if base == "goodput":
            each = [(_goodputs(r[0], mix), _goodputs(r[1], mix)) for r in sides]
            found = _goodput_ratio(each, level, pair.interleaved)
            out.append(judge_goodput(found, limit, allowance, q, _table(sides, "goodput"), what))
        else:
            sweeps = pair.rounds[0]
            brackets = ([class_bracket(mine, cls, s.level.target) for mine, s in zip(rows[0], sweeps, strict=True)]
                        if cls else [bracket(s.search) for s in sweeps])  # fmt: skip
            table = _table(sides, "slo_fraction")
            out.append(judge_slo_rate(brackets[0], brackets[1], limit, allowance, q, table, what))
    return out


def _records(sweep: RateSweep) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in row.items()} for row in sweep.steps.to_dict("records")]


def sweep_goodputs(sweep: RateSweep) -> dict[float, tuple[float, float] | None]:
    """Per offered rate, a sweep's pooled log goodput and its standard error (a class sweep's: its total, from its
    classes' figures), as the gate gives a side."""
    records = _records(sweep)
    return _goodputs(class_rows(records), True) if sweep.sweep.classes else _goodputs(records, False)


def _goodputs(steps: list[dict[str, Any]], mix: bool) -> dict[float, tuple[float, float] | None]:
    """Per offered rate, the pooled log goodput: a class sweep's total (`mix`) from its classes'."""
    return mix_goodputs(steps) if mix else rate_goodputs(steps)


def _table(sides: list[list[list[dict[str, Any]]]], value: str) -> tuple[RateRow, ...]:
    """The rates behind the quantity: each side's steps of every round."""
    return rate_rows([s for r in sides for s in r[0]], [s for r in sides for s in r[1]], value)


def _goodput_ratio(each: Sequence[tuple[Goodputs, Goodputs]], level: float, interleaved: bool) -> GoodputRatio:
    try:
        return paired_goodput(each, level) if interleaved else goodput_ratio(*each[0], level)
    except ValueError:
        a, b = each[0]
        raise ResultsError(f"gate: the rate sweeps share no offered rate with a goodput ({rate_list(sorted(a))} "
                           f"and {rate_list(sorted(b))} req/s); nothing to compare") from None  # fmt: skip
