"""A rate sweep's token lengths: drawn per request from a fixed length or a distribution, checked against the
server's context (the sweep's and each class's, a shared prefix's room included), and the shared-prefix group each
request draws. Pure: no request is built or sent here (toolkit.rates.workload builds them).
"""

from __future__ import annotations

import math

import numpy as np

from toolkit.params import ParamsError
from toolkit.rates.params import Lengths, RateParams
from toolkit.rates.prompt_sources import prompt_source
from toolkit.rates.traces import MIN_UNIQUE_TOKENS

__all__ = ["check_lengths", "draw_lengths", "longest", "prefix_groups"]


def draw_lengths(spec: int | Lengths, n: int, rng: np.random.Generator) -> list[int]:
    """`n` token counts: the fixed count, or draws of the distribution clipped to its bounds."""
    if isinstance(spec, int):
        return [spec] * n
    if spec.dist == "uniform":
        values = rng.integers(spec.min, spec.max + 1, n)
    elif spec.dist == "normal":
        assert spec.mean is not None and spec.std is not None
        values = np.rint(rng.normal(spec.mean, spec.std, n))
    else:
        assert spec.mean is not None and spec.sigma is not None
        mu = math.log(spec.mean) - spec.sigma**2 / 2  # so that the mean of the draws is `mean`
        values = np.rint(rng.lognormal(mu, spec.sigma, n))
    return [int(v) for v in np.clip(values, spec.min, spec.max)]


def longest(spec: int | Lengths) -> int:
    return spec if isinstance(spec, int) else spec.max


def check_lengths(params: RateParams, max_model_len: int) -> None:
    """ParamsError when the longest planned request (an embeddings input) would not fit the server's context
    (synthetic prompts), or a shared prefix would leave no room for a prompt's unique rest."""
    for c in params.classes or ():
        if c.input_tokens is None:  # a dataset's prompts
            continue
        if (total := longest(c.input_tokens) + longest(c.output_tokens)) > max_model_len:
            raise ParamsError(f"classes.{c.name}: input_tokens + output_tokens: up to {total:,} tokens, over the "
                              f"server's max_model_len {max_model_len:,}")  # fmt: skip
        if problem := _prefix_room(c.input_tokens, prompt_source(params, c).prefix_tokens):
            raise ParamsError(f"classes.{c.name}: {problem}")
    if params.classes is not None:
        return  # the sweep's own lengths are not used
    if params.endpoint == "embeddings":  # each input on its own, nothing generated
        if (total := longest(params.input_tokens)) > max_model_len:
            raise ParamsError(f"input_tokens: up to {total:,} tokens, over the server's max_model_len "
                              f"{max_model_len:,}")  # fmt: skip
    elif params.dataset is None and (total := longest(params.input_tokens) + longest(params.output_tokens)) > (
        max_model_len
    ):
        raise ParamsError(
            f"input_tokens + output_tokens: up to {total:,} tokens, over the server's max_model_len {max_model_len:,}"
        )
    if problem := _prefix_room(params.input_tokens, params.prefix_tokens):
        raise ParamsError(problem)


def _prefix_room(spec: int | Lengths, prefix_tokens: int | None) -> str | None:
    """Why a shared prefix of `prefix_tokens` leaves too little of the shortest prompt for its unique rest, or None."""
    shortest = spec if isinstance(spec, int) else spec.min
    if prefix_tokens is None or shortest >= prefix_tokens + MIN_UNIQUE_TOKENS:
        return None
    return (f"input_tokens: from {shortest:,}; a shared prefix of {prefix_tokens:,} tokens needs at least "
            f"{MIN_UNIQUE_TOKENS} more for each prompt's unique rest")  # fmt: skip


def prefix_groups(rng: np.random.Generator, n: int, prefixes: int, choice: str | None) -> list[int]:
    """Which shared prefix each of `n` requests starts with: uniform, or Zipf's law over the prefixes (1/k)."""
    if choice == "zipf":
        weights = 1.0 / np.arange(1, prefixes + 1)
        return [int(g) for g in rng.choice(prefixes, size=n, p=weights / weights.sum())]
    return [int(g) for g in rng.integers(0, prefixes, size=n)]
