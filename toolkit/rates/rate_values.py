"""The values a rate sweep's parameters parse (pure): request rates, and token lengths as a count or a distribution."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["MAX_TOKENS", "Lengths", "checked_lengths", "parse_lengths", "parse_rates", "rate_text"]

MAX_TOKENS = 10_000_000


class Lengths(BaseModel):
    """A distribution of token counts, drawn per request and clipped to [min, max].

    uniform: whole numbers min..max; normal: mean, std (tokens); lognormal: mean (tokens) and sigma (of the log).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    dist: Literal["uniform", "normal", "lognormal"]
    min: int = Field(ge=1, le=MAX_TOKENS)
    max: int = Field(ge=1, le=MAX_TOKENS)
    mean: float | None = Field(None, gt=0)
    std: float | None = Field(None, ge=0)
    sigma: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _complete(self) -> Lengths:
        if self.max < self.min:
            raise ValueError(f"max {self.max} is below min {self.min}")
        needs = {"uniform": (), "normal": ("mean", "std"), "lognormal": ("mean", "sigma")}[self.dist]
        if missing := [name for name in needs if getattr(self, name) is None]:
            raise ValueError(f"{self.dist} needs {' and '.join(missing)}")
        return self


def parse_lengths(value: Any) -> int | Lengths:
    """128, or "uniform:MIN:MAX", "normal:MEAN:STD:MIN:MAX", "lognormal:MEAN:SIGMA:MIN:MAX", or a mapping."""
    if isinstance(value, bool):
        raise ValueError("is true or false; allowed: a token count or a distribution")
    if isinstance(value, int | Lengths):
        return value
    if isinstance(value, dict):
        return Lengths(**value)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        kind, _, rest = text.partition(":")
        parts = rest.split(":") if rest else []
        names = {
            "uniform": ("min", "max"),
            "normal": ("mean", "std", "min", "max"),
            "lognormal": ("mean", "sigma", "min", "max"),
        }.get(kind)
        if names is not None and len(parts) == len(names):
            return Lengths(dist=kind, **dict(zip(names, parts, strict=True)))  # type: ignore[arg-type]
    raise ValueError(
        f"{value!r} is not a token count or a distribution; allowed: e.g. 128, uniform:64:256, "
        "normal:128:32:16:512, lognormal:128:0.5:16:1024 (MEAN:SPREAD:MIN:MAX)"
    )


def checked_lengths(value: Any) -> int | Lengths:
    """`parse_lengths`, with a plain count between 1 and MAX_TOKENS (a field validator's check)."""
    parsed = parse_lengths(value)
    if isinstance(parsed, int) and not 1 <= parsed <= MAX_TOKENS:
        raise ValueError(f"{parsed} is not between 1 and {MAX_TOKENS:,}")
    return parsed


def parse_rates(value: Any) -> list[float]:
    """ "1,2,4,inf" or a list of numbers and "inf": ascending, no duplicates."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ValueError(f"{value!r} is not a list of rates; allowed: e.g. [1, 2, 4, inf] (requests/s)")
    rates: list[float] = []
    for item in items:
        if isinstance(item, bool):
            raise ValueError(f"{item!r} is not a rate; allowed: a positive number of requests/s or inf")
        try:
            rate = float(item.strip() if isinstance(item, str) else item)
        except (TypeError, ValueError):
            raise ValueError(f"{item!r} is not a rate; allowed: a positive number of requests/s or inf") from None
        if math.isnan(rate) or rate <= 0:
            raise ValueError(f"{item!r} is not a positive rate; allowed: a positive number of requests/s or inf")
        rates.append(rate)
    return sorted(set(rates))


def rate_text(rate: float) -> float | str:
    """A rate as JSON can hold it: a number, or "inf"."""
    return "inf" if math.isinf(rate) else rate
