"""Each offered rate of a sweep judged against its service level, and the bracket of the highest rate meeting it
(pure): the verdicts the SLO search (toolkit.rates.search) decides by, and the gate reads a class's bracket from.

Each rate is judged by the 95 % interval of the fraction of its requests meeting the level, pooled over every
step run at that rate (the wider of Clopper–Pearson at the steps' summed effective counts and the steps' batch
means, toolkit.method.goodput): it *meets* when even the interval's low end reaches the target and each of its
steps met it on its own, *fails* when even the high end stays below, and is *undecided* otherwise. The bracket
is the highest rate that meets on CONFIRM_STEPS steps below every rate that fails, and the lowest rate that fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolkit.method.slo_fraction import fraction_bounds, fraction_interval, verdict

CONFIRM_STEPS = 2  # steps pooled at a rate before its "meets" may end the bracket below


def rate_verdicts(steps: Sequence[dict[str, Any]], target: float) -> dict[float, tuple[str, int]]:
    """Per offered rate: its verdict over the pooled requests of its steps (and their batches and effective
    counts), and how many steps it had. A rate *meets* only when each of its steps met the level on its own as well
    (`_step_meets`): a step without a burst can meet it above capacity, and two steps are too few to estimate the
    spread between steps. A class sweep's rate (its steps hold `classes`) meets only when every class meets its own
    level, fails when any class fails, and is undecided otherwise."""
    names = class_names(steps)
    if not names:
        return pooled_verdicts(steps, target)
    each = [pooled_verdicts(class_steps(steps, name), target) for name in names]
    verdicts = {}
    for rate, (_, count) in each[0].items():
        found = {v[rate][0] for v in each}
        verdicts[rate] = ("fails" if "fails" in found else "meets" if found == {"meets"} else "undecided", count)
    return verdicts


def class_names(steps: Sequence[dict[str, Any]]) -> list[str]:
    """A class sweep's classes, in the order its steps hold them (none for another sweep)."""
    return list(dict.fromkeys(name for s in steps for name in s.get("classes") or {}))


def class_steps(steps: Sequence[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Class `name`'s figures of each step, as steps of their own at the step's offered rate (a step that drew
    none of it: no requests)."""
    return [{"requests": 0, "slo_fraction": 0.0, **(s.get("classes") or {}).get(name, {}),
             "offered_rate": s["offered_rate"]} for s in steps]  # fmt: skip


def pooled_verdicts(steps: Sequence[dict[str, Any]], target: float) -> dict[float, tuple[str, int]]:
    """Per offered rate: the verdict of its steps' requests pooled, and how many steps (one level: no classes)."""
    pooled: dict[float, list[Any]] = {}
    for s in steps:
        entry = pooled.setdefault(float(s["offered_rate"]), [0, 0, 0.0, [], []])
        counted = int(s.get("steady_requests") or s["requests"])  # the fraction's own count
        met = round(float(s["slo_fraction"]) * counted)
        effective = effective_count(s, counted)
        entry[0] += met
        entry[1] += counted
        entry[2] += effective
        se, dof = s.get("slo_fraction_se"), s.get("slo_fraction_dof")
        own = [(float(se), float(dof))] if isinstance(se, int | float) and isinstance(dof, int | float) else []
        entry[3] += own
        entry[4].append(_step_meets(met, counted, own, target, effective))
    verdicts = {}
    for rate, (k, n, n_eff, spread, each) in pooled.items():
        whole = verdict(*fraction_bounds(k, n, spread, n_eff), target)
        verdicts[rate] = ("undecided" if whole == "meets" and not all(each) else whole, len(each))
    return verdicts


def effective_count(step: dict[str, Any], counted: int) -> float:
    """The independent requests a step's `counted` are worth: over its design effect (`slo_fraction_deff`); all of
    them for a step that has none (an older step, a level that limits no latency)."""
    deff = step.get("slo_fraction_deff")
    return counted / deff if isinstance(deff, int | float) and deff >= 1 else float(counted)


def _step_meets(met: int, counted: int, spread: list[tuple[float, float]], target: float, effective: float) -> bool:
    """One step's own verdict is "meets"; for a step too short for any verdict to reach the target (all of 60
    requests meeting, or of as many effective ones, show 0.94 at least, not 0.99), its point fraction reaching it,
    and the pooled steps decide."""
    if fraction_interval(effective, effective)[0] < target:
        return met >= target * counted
    return verdict(*fraction_bounds(met, counted, spread, effective), target) == "meets"


def first_fail(verdicts: dict[float, tuple[str, int]]) -> float | None:
    return min((rate for rate, (v, _) in verdicts.items() if v == "fails"), default=None)


def meeting_rates(verdicts: dict[float, tuple[str, int]], below: float | None) -> list[float]:
    return sorted(r for r, (v, _) in verdicts.items() if v == "meets" and (below is None or r < below))


def bracket(verdicts: dict[float, tuple[str, int]]) -> tuple[float | None, float | None]:
    """(highest rate that meets below every failing one, confirmed by CONFIRM_STEPS steps when one fails; lowest
    failing rate); None where there is none."""
    failing = first_fail(verdicts)
    meeting = meeting_rates(verdicts, failing)
    if failing is not None:
        meeting = [r for r in meeting if verdicts[r][1] >= CONFIRM_STEPS]
    return (meeting[-1] if meeting else None), failing
