"""A regression gate's decisions (pure): the regressions allowed, each quantity's ratio interval, three verdicts.

A gated quantity has one decision, from one interval of candidate / baseline: the overall ratio over the cells
both sides measured (the geometric mean over the cells of each round, paired over the rounds when the sides
were interleaved). Its interval is on the log scale, `[exp(m - t se), exp(m + t se)]`, and at the family's level:
with k quantities gated together each interval is at 1 - 5 % / k (Bonferroni), so that the chance of any false
"fail" (or of any false "pass") among the gate's k decisions is at most 2.5 % when every quantity sits exactly at
its limit (docs/gate.md, The interval and the family).

- fail: the whole interval lies beyond the allowed regression;
- pass: the whole interval lies on the good side of it;
- inconclusive: it straddles the limit (toolkit.method.gate_plan says how many rounds would likely resolve it).

Direction-aware: for throughput the allowed ratio is at least 1 - limit; for a latency (TTFT, TPOT) at most
1 + limit.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from toolkit.base.errors import ParamsError
from toolkit.method.spread import t_quantile

FAMILY_ALPHA = 0.05  # the gate's family-wise error, both sides together (2.5 % for false fails)
MAX_LIMIT = 100.0  # a regression allowed is a percentage above 0 and below this


@dataclass(frozen=True)
class Quantity:
    """A quantity the gate can judge: its title and whether a higher value is better."""

    name: str
    title: str
    higher_is_better: bool


QUANTITIES: dict[str, Quantity] = {
    q.name: q
    for q in (
        Quantity("total_tok_s", "total tok/s", True),
        Quantity("per_request_tok_s", "per-request tok/s", True),
        Quantity("ttft_ms", "TTFT", False),
        Quantity("tbt_ms", "TPOT", False),
    )
}
ALIASES = {"tpot_ms": "tbt_ms", "itl_ms": "tbt_ms"}
# A bare limit (`3%`) gates the throughputs; a TTFT (the median of few requests, a wide interval) or TPOT (about
# the reciprocal of per-request tok/s) is gated when named (`ttft_ms=10%`).
DEFAULT_QUANTITIES = ("total_tok_s", "per_request_tok_s")
_PERCENT = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*%")


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class RatioInterval:
    """candidate / baseline with its interval `[low, high]` at `level`; `se` the log ratio's standard error,
    `dof` its degrees of freedom, `rounds` how many paired rounds (0: two runs measured apart)."""

    ratio: float
    low: float
    high: float
    level: float
    se: float
    dof: float
    rounds: int


def percent(text: str, what: str) -> float:
    """`3%`, `2.5 %` as a fraction (0.03); a ParamsError naming `what` for anything else (`3`, `-5 %`, `0%`)."""
    shown = text.strip()
    match = _PERCENT.fullmatch(shown)
    if match is None:
        hint = "write it with %, e.g. 3%" if re.fullmatch(r"\d+(\.\d+)?", shown) else "e.g. 3%"
        raise ParamsError(f"{what}: {shown!r} is not a percentage above 0; {hint}")
    value = float(match["number"])
    if not 0 < value < MAX_LIMIT:
        raise ParamsError(f"{what}: {shown!r}; allowed: a percentage above 0 and below {MAX_LIMIT:g} %")
    return value / 100


def quantity_name(text: str) -> str:
    """A gated quantity's name (an alias such as `tpot_ms` resolved); ParamsError listing the known ones."""
    name = ALIASES.get(text.strip(), text.strip())
    if name not in QUANTITIES:
        known = ", ".join([*QUANTITIES, *ALIASES])
        raise ParamsError(f"max-regression: unknown quantity {text.strip()!r}; allowed: {known}")
    return name


def parse_limits(text: str) -> dict[str, float]:
    """`3%` (the default quantities) or `total_tok_s=3%,ttft_ms=10%` (a bare limit may come first): quantity ->
    the regression allowed, as a fraction."""
    named: dict[str, float] = {}
    bare: list[float] = []
    parts = text.split(",")
    if not text.strip() or any(not p.strip() for p in parts):
        raise ParamsError(f"max-regression: {text!r}; allowed: 3% or total_tok_s=3%,ttft_ms=10%")
    for part in parts:
        if "=" not in part:
            bare.append(percent(part, "max-regression"))
            continue
        key, _, value_text = part.partition("=")
        name = quantity_name(key)
        if name in named:
            raise ParamsError(f"max-regression: {key.strip()} given twice")
        named[name] = percent(value_text, f"max-regression: {key.strip()}")
    if len(bare) > 1:
        raise ParamsError(f"max-regression: {text!r} gives the default quantities two limits; give one")
    limits = dict.fromkeys(DEFAULT_QUANTITIES, bare[0]) if bare else {}
    limits |= named
    return {q: limits[q] for q in QUANTITIES if q in limits}


def family_level(count: int) -> float:
    """The level of each of `count` intervals judged together: 1 - FAMILY_ALPHA / count (Bonferroni)."""
    if count < 1:
        raise ValueError(f"count: {count}; allowed: 1 or more")
    return 1 - FAMILY_ALPHA / count


def allowed_ratio(limit: float, higher_is_better: bool) -> float:
    """The worst ratio allowed: 1 - limit for throughput, 1 + limit for a latency."""
    return 1 - limit if higher_is_better else 1 + limit


def paired_interval(baseline: Sequence[float], candidate: Sequence[float], level: float) -> RatioInterval | None:
    """candidate / baseline from paired rounds: the geometric mean of the rounds' ratios, Student's t over the
    rounds on the log scale; None with fewer than two usable pairs."""
    logs = [
        math.log(y / x)
        for x, y in zip(baseline, candidate, strict=True)
        if math.isfinite(x) and math.isfinite(y) and x > 0 and y > 0
    ]
    if len(logs) < 2:
        return None
    mean, se = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(len(logs))
    return log_interval(mean, se, len(logs) - 1, level, len(logs))


def log_interval(log_ratio: float, se: float, dof: float, level: float, rounds: int) -> RatioInterval:
    """The interval `exp(log_ratio ± t(dof, level) se)`."""
    spread = t_quantile(dof, level) * se if se > 0 else 0.0
    return RatioInterval(
        math.exp(log_ratio), math.exp(log_ratio - spread), math.exp(log_ratio + spread), level, se, dof, rounds
    )


def widened(interval: RatioInterval, allowance: float) -> RatioInterval:
    """The interval with the machine's change between two runs measured apart, at most `allowance` either way,
    added whole to each side (a bias bound, not a spread)."""
    factor = 1 + allowance
    return RatioInterval(interval.ratio, interval.low / factor, interval.high * factor, interval.level,
                         interval.se, interval.dof, interval.rounds)  # fmt: skip


def verdict(interval: RatioInterval, limit: float, higher_is_better: bool) -> Verdict:
    """Fail when the whole interval lies beyond the allowed ratio, pass when it lies wholly on the good side."""
    bound = allowed_ratio(limit, higher_is_better)
    worst, best = (interval.low, interval.high) if higher_is_better else (interval.high, interval.low)
    if (best < bound) if higher_is_better else (best > bound):
        return Verdict.FAIL
    if (worst >= bound) if higher_is_better else (worst <= bound):
        return Verdict.PASS
    return Verdict.INCONCLUSIVE


def exit_status(verdicts: Sequence[Verdict], inconclusive: Verdict = Verdict.INCONCLUSIVE) -> int:
    """0 when every verdict passes, 1 when any fails, 3 when none fails and some are inconclusive
    (`inconclusive` = pass or fail counts them so)."""
    counted = [inconclusive if v is Verdict.INCONCLUSIVE else v for v in verdicts]
    if Verdict.FAIL in counted:
        return 1
    return 3 if Verdict.INCONCLUSIVE in counted else 0


def limit_text(limit: float, higher_is_better: bool) -> str:
    """`−3 %` for throughput, `+10 %` for a latency: the change allowed, in the direction of worse."""
    return f"{'−' if higher_is_better else '+'}{100 * limit:g} %"


def gated(limits: Mapping[str, float]) -> list[Quantity]:
    """The quantities of `limits` in the gate's order."""
    return [q for name, q in QUANTITIES.items() if name in limits]
