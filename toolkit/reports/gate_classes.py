"""A gate's quantities of traffic-class rate sweeps (pure): goodput and the highest rate meeting the SLO per class,
each class judged against its own service level, beside the mix's total.

A class sweep's steps (steps.jsonl) keep, beside the step's totals, a `classes` mapping: each class's figures
against its own level (toolkit.method.class_figures), with its SLO fraction's 95 % interval. Per class:

- `goodput[chat]`: the class's goodput per common offered rate, judged as a sweep's goodput is
  (toolkit.reports.gate_rates: each step's log error from its fraction's interval, the rates' geometric mean).
- `slo_rate[chat]`: the class's bracket, found from its own verdicts per rate as the search finds the sweep's
  (toolkit.method.rate_verdicts: the highest rate meeting its level on 2 steps below every rate failing it, the
  lowest failing it). The search probed for the mix, so a class that never failed has a bracket open above
  (inconclusive, with the reason).

The total: `goodput` is the mix's (the classes' goodput summed) and `slo_rate` the search's bracket (every class
in its own SLO). A step's total has no interval of its own; the gate gives it one from its classes': each class's
interval of its fraction scaled to goodput (by goodput / fraction; a class none of whose requests met its level
by its arrivals per second), each side's half-widths added in quadrature, as independent estimates' are; the
log error is then a step's (`step_log_se`: the larger side over the normal quantile).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from toolkit.method.goodput import ServiceLevel
from toolkit.method.rate_verdicts import bracket, class_steps, pooled_verdicts
from toolkit.reports.gate_rates import pool_goodputs, step_log_se
from toolkit.reports.number_format import as_number

_FIGURES = ("goodput", "slo_fraction", "slo_fraction_low", "slo_fraction_high")


def class_levels(sweep: Mapping[str, Any], target: float) -> dict[str, ServiceLevel]:
    """sweep.json's `classes`: each class's name -> its service level (the sweep's goodput `target`); empty for a
    sweep without classes."""
    found: dict[str, ServiceLevel] = {}
    for item in sweep.get("classes") or []:
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            ttft, tpot, e2e = (as_number(item.get(k)) for k in ("slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms"))
            found[item["name"]] = ServiceLevel(ttft, tpot, e2e, target)
    return found


def class_rows(steps: Iterable[Mapping[Any, Any]]) -> list[dict[str, Any]]:
    """A class sweep's step rows that hold their classes' figures."""
    return [dict(row) for row in steps if isinstance(row.get("classes"), Mapping)]


def mix_interval(classes: Mapping[str, Mapping[str, Any]]) -> tuple[float, float, float] | None:
    """A step's total goodput from its classes' figures with its 95 % interval `(goodput, low, high)` (see the
    module's docstring); None when a class that drew requests recorded no goodput or fraction interval."""
    total, down, up = 0.0, 0.0, 0.0
    for figures in classes.values():
        if not as_number(figures.get("requests")):
            continue  # drew none of the step's arrivals
        numbers = [as_number(figures.get(k)) for k in _FIGURES]
        if any(x is None for x in numbers):
            return None
        goodput, fraction, low, high = (float(x or 0.0) for x in numbers)
        scale = goodput / fraction if fraction > 0 else as_number(figures.get("achieved_rate"))
        if scale is None:
            return None
        total += goodput
        down += (scale * (fraction - low)) ** 2
        up += (scale * (high - fraction)) ** 2
    return total, total - math.sqrt(down), total + math.sqrt(up)


def mix_goodputs(rows: Iterable[Mapping[str, Any]]) -> dict[float, tuple[float, float] | None]:
    """Per offered rate: the mix's (log goodput, its standard error) over its steps, as `rate_goodputs` pools a
    sweep's; a step whose total has no interval is left out."""
    found = []
    for row in rows:
        interval = mix_interval(row["classes"])
        if interval is not None:
            goodput, low, high = interval
            se = step_log_se(goodput, low, high) if low > 0 else math.inf
            found.append((float(row["offered_rate"]), goodput, se))
    return pool_goodputs(found)


def class_bracket(rows: Sequence[dict[str, Any]], name: str, target: float) -> tuple[float, float] | str:
    """Class `name`'s bracket of the highest rate meeting its own level, from its verdicts at the rates its steps
    ran, or why there is none."""
    low, high = bracket(pooled_verdicts(class_steps(rows, name), target))
    if low is None:
        return f"bracket open below: no rate shown to meet {name}'s SLO"
    if high is None or math.isinf(high):
        return f"bracket open above: no finite rate shown to fail {name}'s SLO"
    return low, high
