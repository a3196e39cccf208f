"""A gate's rate-sweep quantities (pure): goodput per offered rate, and the highest rate meeting the SLO.

Where both folders hold a rate sweep judged against one service level (`toolkit rates`, or a run folder with a
`rate_sweep:`), the gate judges two more quantities, higher better, from the steps and the SLO search:

- `goodput`: per offered rate both sweeps ran, candidate / baseline. A step's goodput is the requests/s meeting
  the SLO, its rate fixed by the schedule and its uncertainty the SLO fraction's: the step's 95 % interval of the
  fraction, `[low, high]` around `f`, gives its log goodput a standard error of the larger side,
  `max(ln(high / f), ln(f / low)) / z(97.5 %)`. A rate's steps (a search runs some rates again) pool as the mean
  of their logs; the two sides' errors add in quadrature, and the rates combine as the gate's cells do: the
  geometric mean of their ratios, `se = √(Σ se_r²) / k`, the normal quantile at the family's level. A rate where a
  side met no request (its interval reaches 0) has no log ratio and is left out, named: where only the candidate's
  may be 0 the quantity cannot pass, where only the baseline's, it cannot fail.
- `slo_rate`: the highest rate meeting the SLO, from each search's bracket `[low, high]` (low met it, high failed
  it; docs/method/rates.md): the ratio lies in `[low_c / high_b, high_c / low_b]` whenever both brackets hold their
  rates (conservative; the brackets' own coverage, not the family's level). An open or missing bracket makes it
  inconclusive, with the reason.

Two sweeps measured apart: both quantities are judged as runs measured apart are (toolkit.reports.gate_ratios:
widened by the between-run allowance, inconclusive without one). In an interleaved folder goodput is paired over the
rounds instead (toolkit.reports.gate_rate_rounds). A traffic-class sweep adds both per class, named
`goodput[chat]` (toolkit.reports.gate_classes). Each judged quantity keeps its rates' values (`rate_rows`): each
side's mean over the rate's steps and their ratio, shown under a failure.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from toolkit.base.errors import ParamsError
from toolkit.method.gate import (
    ALIASES,
    QUANTITIES,
    Quantity,
    RatioInterval,
    Verdict,
    log_interval,
    parse_limits,
    percent,
)
from toolkit.method.gate import quantity_name as decode_name
from toolkit.method.goodput import ServiceLevel
from toolkit.method.spread import t_quantile
from toolkit.reports.gate_ratios import BetweenRuns, Judged, RateRow, judge
from toolkit.reports.number_format import as_number

RATE_QUANTITIES: dict[str, Quantity] = {
    q.name: q
    for q in (Quantity("goodput", "goodput", True), Quantity("slo_rate", "highest rate meeting the SLO", True))
}
STEP_LEVEL = 0.95  # of each step's SLO fraction interval, and of each search verdict
RATE_TOLERANCE = 1e-6  # offered rates this close (relative) are one rate
CLASS_NAME = re.compile(r"(?P<base>[a-z_]+)\[(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\]")  # goodput[chat]
APART_RATES = ("measured apart: the machine's change between the sweeps is in no interval; to settle it, allow one: "
               "--between-runs 10%")  # fmt: skip


@dataclass(frozen=True)
class Limits:
    """`--max-regression` split: the decode quantities' limits, the rate quantities named, the bare limit, and
    whether a decode quantity was named."""

    decode: dict[str, float]
    rates: dict[str, float]
    bare: float | None
    decode_named: bool


def split_limits(text: str) -> Limits:
    """`3%,goodput=5%,goodput[chat]=10%`: the rate quantities (a class's too) named apart, the rest as
    toolkit.method.gate.parse_limits reads it."""
    rates: dict[str, float] = {}
    rest: list[str] = []
    for part in text.split(","):
        key, equals, value = part.partition("=")
        name = key.strip()
        if not equals or base_name(name) not in RATE_QUANTITIES:
            if equals and name not in ALIASES:
                _known(name)
            rest.append(part)
        elif name in rates:
            raise ParamsError(f"max-regression: {name} given twice")
        else:
            rates[name] = percent(value, f"max-regression: {name}")
    decode = parse_limits(",".join(rest)) if rest else {}
    bare = next((percent(p, "max-regression") for p in rest if "=" not in p), None)
    return Limits(decode, rates, bare, any("=" in p for p in rest))


def _known(name: str) -> None:
    try:
        decode_name(name)
    except ParamsError:
        known = ", ".join([*QUANTITIES, *ALIASES, *RATE_QUANTITIES])
        raise ParamsError(f"max-regression: unknown quantity {name!r}; allowed: {known}") from None


def base_name(name: str) -> str:
    """A class's quantity's base (`goodput[chat]` -> `goodput`); any other name as it is."""
    match = CLASS_NAME.fullmatch(name)
    return match["base"] if match else name


def is_rate(q: Quantity) -> bool:
    """Whether a gated quantity is a rate sweep's (goodput, slo_rate, or one of a class's)."""
    return base_name(q.name) in RATE_QUANTITIES


def class_quantity(base: str, name: str) -> Quantity:
    """Class `name`'s quantity `base`, named and titled `goodput[chat]`."""
    q = RATE_QUANTITIES[base]
    return Quantity(f"{base}[{name}]", f"{q.title}[{name}]", q.higher_is_better)


def has_limits(level: ServiceLevel) -> bool:
    """Whether a service level limits any latency (else every request meets it and goodput says nothing)."""
    return any(x is not None for x in (level.ttft_ms, level.tpot_ms, level.e2e_ms))


def level_text(level: ServiceLevel) -> str:
    """`TTFT ≤ 200 ms, TPOT ≤ 30 ms for 90 % of requests`."""
    named = (("TTFT", level.ttft_ms), ("TPOT", level.tpot_ms), ("end-to-end", level.e2e_ms))
    limits = [f"{name} ≤ {value:g} ms" for name, value in named if value is not None]
    return f"{', '.join(limits) or 'no limit'} for {100 * level.target:g} % of requests"


def quantity_text(q: Quantity) -> str:
    """How a line names a quantity: `goodput`, or a decode quantity's `decode total tok/s`."""
    return q.title if is_rate(q) else f"decode {q.title}"


def step_log_se(fraction: float, low: float, high: float) -> float:
    """A step's log goodput's standard error from its SLO fraction's 95 % interval (the larger side); inf when the
    interval reaches 0 (no request met the level: the log is unbounded)."""
    if not (fraction > 0 and low > 0):
        return math.inf
    return max(math.log(high / fraction), math.log(fraction / low)) / t_quantile(math.inf, STEP_LEVEL)


def rate_goodputs(steps: Iterable[Mapping[Any, Any]]) -> dict[float, tuple[float, float] | None]:
    """Per offered rate: (log goodput, its standard error) pooled over the rate's steps, None where a step's
    goodput interval reaches 0."""
    found = []
    for step in steps:
        numbers = [as_number(step.get(k)) for k in ("goodput", "slo_fraction", "slo_fraction_low", "slo_fraction_high")]
        if any(x is None for x in numbers):
            continue  # a step that recorded no goodput
        goodput, fraction, low, high = (float(x or 0.0) for x in numbers)
        found.append((float(step["offered_rate"]), goodput, step_log_se(fraction, low, high)))
    return pool_goodputs(found)


def pool_goodputs(steps: Iterable[tuple[float, float, float]]) -> dict[float, tuple[float, float] | None]:
    """(offered rate, goodput, its log standard error) of each step pooled per rate: (the mean of the logs, their
    standard error), None where a step's goodput may be 0 (no log, or an infinite error)."""
    pooled: dict[float, list[tuple[float, float]] | None] = {}
    for rate, goodput, se in steps:
        key = same_rate(rate, pooled)
        logs = pooled.setdefault(key, [])
        if logs is not None and goodput > 0 and math.isfinite(se):
            logs.append((math.log(goodput), se))
        else:
            pooled[key] = None
    return {
        rate: None if logs is None else (statistics.fmean(x for x, _ in logs), _quadrature(s for _, s in logs))
        for rate, logs in pooled.items()
    }


def rate_rows(baseline: Iterable[Mapping[Any, Any]], candidate: Iterable[Mapping[Any, Any]],
              value: str) -> tuple[RateRow, ...]:  # fmt: skip
    """Per offered rate both sides ran (within RATE_TOLERANCE), in order: each side's mean of its steps' `value`
    (`goodput`, `slo_fraction`; None where no step recorded it)."""
    a, b = _rate_means(baseline, value), _rate_means(candidate, value)
    common = sorted((r, c) for r in a if (c := same_rate(r, b)) in b)
    return tuple(RateRow(r, a[r], b[c], value) for r, c in common)


def _rate_means(steps: Iterable[Mapping[Any, Any]], value: str) -> dict[float, float | None]:
    found: dict[float, list[float]] = {}
    for step in steps:
        number = as_number(step.get(value))
        mine = found.setdefault(same_rate(float(step["offered_rate"]), found), [])
        if number is not None:
            mine.append(number)
    return {rate: statistics.fmean(xs) if xs else None for rate, xs in found.items()}


def same_rate(rate: float, seen: Iterable[float]) -> float:
    """The rate already seen within RATE_TOLERANCE, else `rate`."""
    return next((r for r in seen if math.isclose(r, rate, rel_tol=RATE_TOLERANCE)), rate)


def _quadrature(errors: Iterable[float]) -> float:
    """The standard error of the mean of independent estimates with these errors."""
    squares = [s * s for s in errors]
    return math.sqrt(sum(squares)) / len(squares)


@dataclass(frozen=True)
class GoodputRatio:
    """Goodput candidate / baseline over the common rates: the interval (None: no rate had both sides above 0),
    the rates it used, and the common rates left out where only the candidate's or only the baseline's goodput
    may be 0."""

    interval: RatioInterval | None
    rates: tuple[float, ...]
    candidate_zero: tuple[float, ...]
    baseline_zero: tuple[float, ...]


def goodput_ratio(baseline: Mapping[float, tuple[float, float] | None],
                  candidate: Mapping[float, tuple[float, float] | None], level: float) -> GoodputRatio:  # fmt: skip
    """The geometric mean of the common rates' goodput ratios, its interval at `level` (normal, log scale);
    ValueError when the sweeps share no offered rate."""
    common = sorted((b, c) for b in baseline if (c := same_rate(b, candidate)) in candidate)
    if not common:
        raise ValueError("no offered rate in common")
    used, diffs, errors, cand_zero, base_zero = [], [], [], [], []
    for b, c in common:
        x, y = baseline[b], candidate[c]
        if x is not None and y is not None:
            used.append(b)
            diffs.append(y[0] - x[0])
            errors.append(math.hypot(x[1], y[1]))
        elif x is not None:
            cand_zero.append(b)
        elif y is not None:
            base_zero.append(b)
    interval = None
    if used:
        interval = log_interval(statistics.fmean(diffs), _quadrature(errors), math.inf, level, 0)
    return GoodputRatio(interval, tuple(used), tuple(cand_zero), tuple(base_zero))


def bracket(search: Any) -> tuple[float, float] | str:
    """sweep.json's search bracket as (low, high) rates, or why there is none ("no SLO search", "open below"…)."""
    if not isinstance(search, Mapping) or not isinstance(search.get("bracket"), list):
        return "no SLO search"
    ends = [_rate_value(x) for x in list(search["bracket"])[:2]]
    if len(ends) < 2 or ends[0] is None:
        return "bracket open below: no rate shown to meet the SLO"
    if ends[1] is None or math.isinf(ends[1]):
        return "bracket open above: no finite rate shown to fail the SLO"
    low, high = ends[0], ends[1]
    return (low, high) if 0 < low < high else f"bracket [{low:g}, {high:g}] is not a range of rates"


def _rate_value(value: Any) -> float | None:
    """A rate as sweep.json writes it (a number, "inf"), None for none."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def slo_rate_interval(baseline: tuple[float, float], candidate: tuple[float, float]) -> RatioInterval:
    """`[low_c / high_b, high_c / low_b]`, the ratio of the brackets' geometric midpoints."""
    (low_b, high_b), (low_c, high_c) = baseline, candidate
    ratio = math.sqrt(low_c * high_c / (low_b * high_b))
    return RatioInterval(ratio, low_c / high_b, high_c / low_b, STEP_LEVEL, 0.0, math.inf, 0)


def rate_list(rates: Sequence[float]) -> str:
    """`2, 4, 8`."""
    return ", ".join(f"{r:g}" for r in rates)


def judge_goodput(found: GoodputRatio, limit: float, between: BetweenRuns | None, q: Quantity | None = None,
                  rows: tuple[RateRow, ...] = (), what: str = "") -> Judged:  # fmt: skip
    """goodput's verdict (`q`: a class's, default the sweep's): as runs measured apart (an interval of paired
    rounds: as interleaved runs), then no pass (fail) where the candidate's (the baseline's) goodput may be 0 at a
    common rate left out; `rows` its rates' values, `what` added to its basis."""
    q = q or RATE_QUANTITIES["goodput"]
    basis = f"over {len(found.rates)} common rate{'s' * (len(found.rates) != 1)}{what}"
    left = [*found.candidate_zero, *found.baseline_zero]
    if left:
        basis += f" (left out: {rate_list(sorted(left))} req/s, where a side met no request)"
    if found.interval is None:
        why = "no common rate where both sides' goodput is above 0"
        return Judged(q, limit, None, Verdict.INCONCLUSIVE, 0, why, basis=basis, rate_rows=rows)
    judged = replace(_apart(q, found.interval, limit, between, len(found.rates), basis), rate_rows=rows)
    if judged.verdict is Verdict.PASS and found.candidate_zero:
        why = f"the candidate's goodput may be 0 at {rate_list(found.candidate_zero)} req/s: it cannot pass"
        return replace(judged, verdict=Verdict.INCONCLUSIVE, reason=why)
    if judged.verdict is Verdict.FAIL and found.baseline_zero:
        why = f"the baseline's goodput may be 0 at {rate_list(found.baseline_zero)} req/s: it cannot fail"
        return replace(judged, verdict=Verdict.INCONCLUSIVE, reason=why)
    return judged


def judge_slo_rate(baseline: tuple[float, float] | str, candidate: tuple[float, float] | str, limit: float,
                   between: BetweenRuns | None, q: Quantity | None = None, rows: tuple[RateRow, ...] = (),
                   what: str = "") -> Judged:  # fmt: skip
    """slo_rate's verdict (`q`: a class's, default the sweep's) from the two brackets (a text: why a side has
    none) as runs measured apart; `rows` its rates' values, `what` added to its basis."""
    q = q or RATE_QUANTITIES["slo_rate"]
    if isinstance(baseline, str) or isinstance(candidate, str):
        why = "; ".join(f"{side}: {text}" for side, text in (("baseline", baseline), ("candidate", candidate))
                        if isinstance(text, str))  # fmt: skip
        return Judged(q, limit, None, Verdict.INCONCLUSIVE, 0, why, rate_rows=rows)
    basis = f"from the brackets [{rate_list(baseline)}] and [{rate_list(candidate)}] req/s{what}"
    judged = _apart(q, slo_rate_interval(baseline, candidate), limit, between, 0, basis)
    return replace(judged, rate_rows=rows)


def _apart(q: Quantity, interval: RatioInterval, limit: float, between: BetweenRuns | None, count: int,
           basis: str) -> Judged:  # fmt: skip
    """Judged as runs measured apart (an interval of paired rounds: as interleaved runs), a class's quantity with its
    base quantity's allowance."""
    base = RATE_QUANTITIES[base_name(q.name)]
    (judged,) = judge({base.name: (interval, count, ())}, [base], {base.name: limit}, between)
    if judged.reason and judged.allowance is None and (between is None or between.stored is None):
        judged = replace(judged, reason=APART_RATES)
    return replace(judged, quantity=q, basis=basis)
