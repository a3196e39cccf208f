"""How many servers a target traffic needs, and what its output tokens cost (pure; docs/method/capacity-plan.md).

A rate sweep gives, per server, the highest request rate meeting the service level as a bracket: the highest rate
shown to meet it (`low`) and the lowest shown to fail (`high`, None when none failed); the true highest rate lies
between. The plan counts on `low` less the headroom, so the replicas it names carry the target; a server as fast
as `high` would need fewer, and the plan gives that range too. Output tokens per request are the sweep's own mean.
A class sweep's plan also gives each traffic class's own bracket of the mix's rates and the replicas it alone
needs: the class needing the most binds the plan.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class CapacityTarget:
    """The traffic to plan for and the price of the hardware."""

    target_rps: float | None  # requests per second, the sweep's mix of lengths; None: target_multiple
    price_per_gpu_hour: float | None = None  # currency per GPU-hour; None: no cost figure
    gpus_per_server: int = 1
    headroom: float = 0.2  # the share of each server's highest rate kept free
    target_multiple: float | None = None  # instead of target_rps: this many times the highest rate measured

    def rps(self, rate_low: float) -> float:
        """The target in requests per second, given one server's highest rate meeting the service level."""
        return self.target_rps if self.target_rps is not None else (self.target_multiple or 0.0) * rate_low


@dataclass(frozen=True)
class CapacityPlan:
    """The replicas a target needs, with the range the bracket allows, throughput per GPU and cost."""

    target_rps: float  # the traffic planned for
    rate_low: float  # per server: the highest rate shown to meet the service level
    rate_high: float | None  # per server: the lowest rate shown to fail it (None: none failed)
    usable_rate: float  # rate_low less the headroom: what the plan loads each server with at most
    replicas: int  # servers the target needs at usable_rate
    replicas_fewest: int | None  # servers it would need if each were as fast as rate_high (None: unbounded)
    # the tokens a request is served for: generated (`output`), or embedded (`input`, an embeddings sweep)
    tokens_per_request: float
    tok_s_per_gpu: float  # at the target, spread over the planned replicas
    cost_per_million_tokens: float | None
    token_kind: Literal["output", "input"] = "output"


def plan_capacity(
    rate_low: float,
    rate_high: float | None,
    tokens_per_request: float,
    target: CapacityTarget,
    token_kind: Literal["output", "input"] = "output",
) -> CapacityPlan:
    """The plan for `target` from one server's bracket, a request served for `tokens_per_request` tokens of
    `token_kind`; ValueError for a bracket or target that cannot plan."""
    if not rate_low > 0:
        raise ValueError(f"no rate was shown to meet the service level (highest {rate_low!r}); nothing to plan from")
    rps = target.rps(rate_low)
    if not 0 <= target.headroom < 1 or not rps > 0 or target.gpus_per_server < 1:
        raise ValueError("the target must be above 0 req/s, headroom in [0, 1), gpus_per_server 1 or more")
    keep = 1 - target.headroom
    usable = rate_low * keep
    replicas = math.ceil(rps / usable - 1e-9)
    fewest = None if rate_high is None else max(1, math.ceil(rps / (rate_high * keep) - 1e-9))
    gpus = replicas * target.gpus_per_server
    tokens_per_second = rps * tokens_per_request
    cost = (
        None
        if target.price_per_gpu_hour is None or tokens_per_second <= 0
        else gpus * target.price_per_gpu_hour / (tokens_per_second * SECONDS_PER_HOUR) * 1e6
    )
    return CapacityPlan(
        target_rps=rps,
        rate_low=rate_low,
        rate_high=rate_high,
        usable_rate=usable,
        replicas=replicas,
        replicas_fewest=fewest,
        tokens_per_request=tokens_per_request,
        tok_s_per_gpu=tokens_per_second / gpus,
        cost_per_million_tokens=cost,
        token_kind=token_kind,
    )


@dataclass(frozen=True)
class ClassCapacity:
    """A class sweep's class in the plan: the mix's highest rate at which it met its own level, and the servers
    the target mix needs for it alone to meet it (the mix's rates: every class rides on the same arrivals)."""

    name: str
    rate_low: float | None  # the mix's highest offered rate at which the class met its level (None: at none)
    rate_high: float | None  # the lowest rate above it at which it failed (None: none failed)
    replicas: int | None  # servers the target needs for this class at rate_low less the headroom (None: no rate)


def class_capacities(
    brackets: Mapping[str, tuple[float | None, float | None]], target_rps: float, headroom: float
) -> list[ClassCapacity]:
    """Each class's replicas at the target mix rate, from its own bracket of the mix's offered rates."""
    keep = 1 - headroom
    return [
        ClassCapacity(name, low, high, None if not low or low <= 0 else math.ceil(target_rps / (low * keep) - 1e-9))
        for name, (low, high) in brackets.items()
    ]


def binding_capacity(classes: Sequence[ClassCapacity]) -> ClassCapacity | None:
    """The class that needs the most replicas (one that met its level at no rate first; then the lowest rate, then
    the first in the sweep's order); None without classes."""
    if not classes:
        return None
    return min(classes, key=lambda c: (c.replicas is not None, -(c.replicas or 0), c.rate_low or 0.0))
