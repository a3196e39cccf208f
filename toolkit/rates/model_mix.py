"""A model mix: each arrival of a rate sweep sends to one of several served models (a base and its LoRA adapters),
picked by weight.

Given as `model: NAME=W,NAME=W` (the `--model` flag, or a params file's `model:` string). A step's arrivals are
drawn for the whole mix at its rate; each then picks its model by weight from a generator seeded by the sweep's
seed and the step (the same seed, the same models), as a class sweep picks its classes (toolkit.rates.classes).
"""

from __future__ import annotations

import math

import numpy as np

from toolkit.base.errors import ParamsError
from toolkit.base.text import printable

__all__ = ["MAX_MODELS", "MIX_EXAMPLE", "check_mix_models", "draw_models", "is_mix", "model_rng", "parse_model_mix"]

MIX_EXAMPLE = "NAME=WEIGHT,NAME=WEIGHT with weights above 0, e.g. tiny-llama=1,tiny-lora=1"
MAX_MODELS = 100
_MODEL_STREAM = 5  # the step's generator for its models: (seed, step, 5), beside the classes' (4)


def is_mix(model: object) -> bool:
    """Whether a sweep's `model` is a mix of weighted names rather than one served name."""
    return isinstance(model, str) and "=" in model


def parse_model_mix(text: str) -> dict[str, float]:
    """The weights of `NAME=W,NAME=W`, in the order given; ValueError in one line for a part without a name or a
    weight, a weight that is not a finite number above 0, or a name given twice."""
    mix: dict[str, float] = {}
    parts = text.split(",")
    if len(parts) > MAX_MODELS:
        raise ValueError(f"{len(parts)} models; allowed: at most {MAX_MODELS}")
    for part in parts:
        name, _, weight_text = part.strip().partition("=")
        name, weight_text = name.strip(), weight_text.strip()
        shown = printable(part.strip())[:80]
        if not name or not weight_text:
            raise ValueError(f"{shown!r} is not NAME=WEIGHT; allowed: {MIX_EXAMPLE}")
        try:
            weight = float(weight_text)
        except ValueError:
            raise ValueError(f"{shown!r}: the weight {printable(weight_text)[:40]!r} is not a number; allowed: "
                             f"{MIX_EXAMPLE}") from None  # fmt: skip
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"{shown!r}: a weight of {weight:g}; allowed: {MIX_EXAMPLE}")
        if name in mix:
            raise ValueError(f"{printable(name)[:80]!r} is given twice; each model once, with its weight")
        mix[name] = weight
    if not math.isfinite(sum(mix.values())):
        raise ValueError(f"the weights sum past the largest number; allowed: {MIX_EXAMPLE}")
    return mix


def check_mix_models(mix: dict[str, float], served: list[str], base_url: str) -> None:
    """ParamsError in one line for the first model of the mix the server does not serve (its /v1/models), before
    anything is sent."""
    for name in mix:
        if name not in served:
            raise ParamsError(f"model: {printable(name)!r} is not served by {base_url}; served: "
                              f"{', '.join(printable(s) for s in served)}")  # fmt: skip


def model_rng(seed: int, step: int) -> np.random.Generator:
    """The generator of a step's models: the sweep's seed and the step's index decide them."""
    return np.random.default_rng((seed, step, _MODEL_STREAM))


def draw_models(mix: dict[str, float], n: int, rng: np.random.Generator) -> list[str]:
    """Each of `n` arrivals' model, drawn by weight."""
    names = list(mix)
    weights = np.array([mix[name] for name in names], dtype=float)
    return [names[int(i)] for i in rng.choice(len(names), size=n, p=weights / weights.sum())]
