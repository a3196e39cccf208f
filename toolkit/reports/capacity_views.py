"""The capacity plan of a rate sweep, every figure named with where it came from (toolkit.method.capacity_plan); a
class sweep's with each class's own highest rate and replicas, and the class that binds."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from toolkit.method.capacity_plan import (
    CapacityPlan,
    CapacityTarget,
    ClassCapacity,
    binding_capacity,
    class_capacities,
    plan_capacity,
)
from toolkit.method.goodput import highest_rate_meeting
from toolkit.reports.number_format import as_number
from toolkit.reports.tables import markdown_table

if TYPE_CHECKING:
    from IPython.display import Markdown
from toolkit.results.rate_runs import RateSweep

__all__ = [
    "capacity_classes", "capacity_markdown", "capacity_plan", "capacity_section", "capacity_table", "class_brackets",
    "target_from",
]  # fmt: skip


def target_from(run_info: Mapping[str, Any] | None) -> CapacityTarget | None:
    """The capacity block run.json holds (the params' `capacity:`), or None when it has none."""
    block = (run_info or {}).get("capacity")
    return CapacityTarget(**block) if isinstance(block, dict) else None


def _bracket(sweep: RateSweep) -> tuple[float | None, float | None, str]:
    """The highest rate meeting the service level (low, high) and where it was read."""
    if sweep.search:
        low, high = [*list(sweep.search.get("bracket") or []), None, None][:2]
        return as_number(low), as_number(high), "rates/sweep.json: the search's bracket, each end judged at 95 %"
    steps = sweep.steps
    low, high = highest_rate_meeting(list(zip(steps["offered_rate"], steps["slo_met"], strict=True)))
    return low, high, "rates/steps.jsonl: the highest step meeting the service level and the lowest failing above it"


def capacity_plan(sweep: RateSweep, target: CapacityTarget) -> tuple[CapacityPlan, dict[str, str]]:
    """The plan for `target` from the sweep, and for each input figure where it came from; ValueError when the
    sweep shows no rate meeting its service level."""
    low, high, bracket_source = _bracket(sweep)
    records = sweep.records
    kind: Literal["output", "input"] = "input" if sweep.sweep.endpoint == "embeddings" else "output"
    done = records[records["error"].isna() & (records[f"{kind}_tokens"] > 0)]
    tokens = float(done[f"{kind}_tokens"].mean()) if len(done) else math.nan
    plan = plan_capacity(low or 0.0, high, tokens, target, kind)
    sources = {
        "bracket": bracket_source,
        "tokens": f"rates/step-*.parquet: the mean {kind} tokens of the sweep's {len(done)} completed requests"
        + (" (an embeddings sweep: the tokens it embedded)" if kind == "input" else ""),
    }
    return plan, sources


def class_brackets(sweep: RateSweep) -> dict[str, tuple[float | None, float | None]]:
    """A class sweep's classes, each its bracket of the mix's offered rates: the highest rate at which it met its
    own level below every rate at which it failed, and that lowest failing rate. Judged as the sweep's own bracket
    is: with a search, each step's verdict on the class's interval (undecided steps count neither way); without,
    its point judgement. Empty for another sweep."""
    if "classes" not in sweep.steps:
        return {}
    found: dict[str, list[tuple[float, bool]]] = {}
    for row in sweep.steps.sort_values("step").to_dict("records"):
        for name, c in (row["classes"] if isinstance(row["classes"], dict) else {}).items():
            if sweep.search is None:
                found.setdefault(name, []).append((float(row["offered_rate"]), bool(c.get("slo_met"))))
            elif c.get("slo_verdict") in ("meets", "fails"):
                found.setdefault(name, []).append((float(row["offered_rate"]), c["slo_verdict"] == "meets"))
            else:
                found.setdefault(name, [])
    return {name: highest_rate_meeting(pairs) for name, pairs in found.items()}


def capacity_classes(sweep: RateSweep, plan: CapacityPlan, target: CapacityTarget) -> list[ClassCapacity]:
    """A class sweep's classes in its plan: each one's bracket and the replicas it alone needs at the plan's
    target (empty for another sweep)."""
    return class_capacities(class_brackets(sweep), plan.target_rps, target.headroom)


def _class_rows(classes: Sequence[ClassCapacity], search: Mapping[str, Any] | None) -> list[tuple[str, str, str]]:
    binding = binding_capacity(classes)
    if binding is None:
        return []
    named = ((search or {}).get("binding") or {}).get("class")
    by_search = "" if named is None else f"; the search's binding class: {named}"
    rows = [("Binding class", binding.name if binding.replicas is not None else f"{binding.name} (met its service "
             "level at no rate)", f"the class whose own highest rate needs the most replicas{by_search}")]  # fmt: skip
    for c in classes:
        high = "" if c.rate_high is None else f", fails at {c.rate_high:,.3g} req/s"
        value = ("met its level at no rate" if c.replicas is None else
                 f"{c.replicas} replicas (meets up to {c.rate_low:,.3g} req/s of the mix{high})")  # fmt: skip
        rows.append((f"Class {c.name}", value, "target ÷ (its highest mix rate meeting its own level × (1 − "
                     "headroom)), rounded up"))  # fmt: skip
    return rows


def capacity_table(
    plan: CapacityPlan, target: CapacityTarget, sources: Mapping[str, str], classes: Sequence[ClassCapacity] = (),
    search: Mapping[str, Any] | None = None,
) -> pd.DataFrame:  # fmt: skip
    """The plan as rows: figure, value, how it was reached; a class sweep's `classes` (with its search's own
    binding class named beside) after them."""
    high = "no rate tried failed it" if plan.rate_high is None else f"fails at {plan.rate_high:,.3g} req/s"
    between = (
        f"{plan.replicas} or fewer: no rate tried failed, so the true highest rate may be higher"
        if plan.replicas_fewest is None
        else f"{plan.replicas_fewest} to {plan.replicas} for the true highest rate, which lies in the bracket"
    )
    cost, kind = plan.cost_per_million_tokens, plan.token_kind
    rows = [
        ("Target traffic", f"{plan.target_rps:,.4g} req/s", "the target given" if target.target_multiple is None
         else f"{target.target_multiple:g} × the highest rate meeting the service level"),
        ("Highest rate per server meeting the service level", f"{plan.rate_low:,.3g} req/s ({high})",
         sources["bracket"]),
        ("Usable rate per server", f"{plan.usable_rate:,.3g} req/s", f"the highest rate less {target.headroom:.0%} "
         "headroom"),
        ("Replicas", f"{plan.replicas} ({between})",
         "target ÷ usable rate, rounded up; the range: the same at the bracket's other end"),
        ("GPUs", f"{plan.replicas * target.gpus_per_server}", f"replicas × {target.gpus_per_server} GPUs per server"),
        (f"{kind.capitalize()} tokens per request", f"{plan.tokens_per_request:,.1f}", sources["tokens"]),
        (f"{kind.capitalize()} tok/s per GPU at the target", f"{plan.tok_s_per_gpu:,.1f}",
         f"target × {kind} tokens per request ÷ GPUs"),
        (f"Cost per million {kind} tokens", "-" if cost is None else f"{cost:,.4g} at "
         f"{target.price_per_gpu_hour:g} per GPU-hour", f"GPUs × price per hour ÷ ({kind} tok/s × 3,600) × 10⁶"),
    ]  # fmt: skip
    rows += _class_rows(classes, search)
    return pd.DataFrame(rows, columns=["Figure", "Value", "From"])


def capacity_section(sweep: RateSweep | None, run_info: Mapping[str, Any] | None) -> Markdown | None:
    """The report's "Capacity plan" (markdown), when the run has a sweep and its params a `capacity:` block."""
    target = target_from(run_info)
    if sweep is None or target is None:
        return None
    from IPython.display import Markdown  # the notebook's, not the command line's

    return Markdown(capacity_markdown(sweep, target))


def capacity_markdown(sweep: RateSweep, target: CapacityTarget) -> str:
    """The section's text: a heading and the plan's table, or why there is no plan."""
    heading = "## Capacity plan\n\n"
    try:
        plan, sources = capacity_plan(sweep, target)
    except ValueError as exc:
        return heading + f"No plan: {exc}.\n"
    classes = capacity_classes(sweep, plan, target)
    return heading + markdown_table(capacity_table(plan, target, sources, classes, sweep.search)) + "\n"
