"""Context lengths: labels ("8K" = 8,192 tokens) and the context rules of docs/method/matrix.md."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Literal

from toolkit.base.errors import ParamsError
from toolkit.base.schema import PHASES

__all__ = [
    "DEFAULT_DECODE_CANDIDATES",
    "DEFAULT_EMBEDDING_LENGTHS",
    "MARGIN",
    "K",
    "check_contexts",
    "decode_contexts",
    "embedding_lengths",
    "format_context",
    "largest_decode_context",
    "parse_context",
    "parse_contexts",
    "prefill_only_context",
]

K = 1024
MARGIN = 64  # tokens kept free beyond context + max output (chat template, marker)
DEFAULT_DECODE_CANDIDATES: tuple[int, ...] = (8 * K, 16 * K, 32 * K, 64 * K, 128 * K)
# An embeddings matrix's input lengths without `contexts`: those that fit max_model_len with the margin.
DEFAULT_EMBEDDING_LENGTHS: tuple[int, ...] = (128, 512, 2 * K, 8 * K, 32 * K)

_LABEL = re.compile(r"(\d+)([kK]?)")
_ALLOWED = "a whole number of tokens (8192) or a whole number of K = 1024 tokens (8K)"


def parse_context(label: str | int) -> int:
    """Parse a context label: "8K"/"8k" -> 8192, "8192" -> 8192; ints pass through."""
    if isinstance(label, bool) or not isinstance(label, int | str):
        raise ParamsError(f"{label!r} is not a context; use {_ALLOWED}")
    if isinstance(label, int):
        tokens = label
    else:
        match = _LABEL.fullmatch(label.strip())
        if match is None:
            raise ParamsError(f"{label!r} is not a context; use {_ALLOWED}")
        tokens = int(match[1]) * (K if match[2] else 1)
    if tokens <= 0:
        raise ParamsError(f"{label!r} is not a context; use a positive count, {_ALLOWED}")
    return tokens


def parse_contexts(value: str | int | Iterable[str | int], parameter: str = "contexts") -> list[int]:
    """Parse a list of labels/ints or a comma-separated string; errors name ``parameter``."""
    if isinstance(value, str):
        items: list[str | int] = [part.strip() for part in value.split(",")]
    elif isinstance(value, int):
        items = [value]
    else:
        items = list(value)
    if not items or items == [""]:
        raise ParamsError(f"{parameter}: give at least one context, each {_ALLOWED}")
    result: list[int] = []
    for item in items:
        try:
            tokens = parse_context(item)
        except ValueError as exc:
            raise ParamsError(f"{parameter}: {exc}") from None
        if tokens in result:
            raise ParamsError(f"{parameter}: {item!r} is listed twice")
        result.append(tokens)
    return result


def format_context(tokens: int) -> str:
    """Display a context the way the reports do: ``round(tokens / 1024)`` then ``K`` (below 1K: tokens)."""
    return f"{round(tokens / K)}K" if tokens >= K else str(tokens)


def _check_lengths(max_model_len: int, max_output: int) -> None:
    if max_model_len <= MARGIN:
        raise ParamsError(f"max_model_len: {max_model_len:,} must be larger than the {MARGIN}-token margin")
    if max_output < 1:
        raise ParamsError(f"max_output: {max_output:,} must be at least 1")


def largest_decode_context(max_model_len: int, max_output: int) -> int:
    """``floor((max_model_len - max_output - 64) / 1024) * 1024`` (0 when nothing fits)."""
    _check_lengths(max_model_len, max_output)
    return max(0, (max_model_len - max_output - MARGIN) // K * K)


def decode_contexts(
    max_model_len: int, max_output: int, candidates: Sequence[int] = DEFAULT_DECODE_CANDIDATES
) -> list[int]:
    """Candidates that fit with max output and margin, plus the largest fitting context if larger."""
    kept = sorted({c for c in candidates if c + max_output + MARGIN <= max_model_len})
    largest = largest_decode_context(max_model_len, max_output)
    if largest > 0 and (not kept or largest > kept[-1]):
        kept.append(largest)
    if not kept:
        raise ParamsError(
            f"max_model_len: {max_model_len:,} leaves no room for a decode context "
            f"with max_output {max_output:,} and a {MARGIN}-token margin"
        )
    return kept


def prefill_only_context(max_model_len: int) -> int:
    """The prefill-only context: ``max_model_len - 64`` tokens."""
    _check_lengths(max_model_len, 1)
    return max_model_len - MARGIN


def _describe(tokens: int) -> str:
    return format_context(tokens) if tokens % K == 0 else f"{tokens:,} tokens"


def check_contexts(
    contexts: Iterable[int],
    max_model_len: int,
    max_output: int,
    phase: Literal["prefill", "decode"],
    parameter: str = "contexts",
) -> None:
    """Raise ``ParamsError`` naming ``parameter`` when an explicit context cannot fit.

    Decode needs ``context + max_output + 64 <= max_model_len``; prefill (one token out)
    needs ``context + 64 <= max_model_len``, matching the prefill-only context.
    """
    _check_lengths(max_model_len, max_output)
    if phase not in PHASES:
        raise ValueError(f"phase: {phase!r} is not 'prefill' or 'decode'")
    for context in contexts:
        if context <= 0:
            raise ParamsError(f"{parameter}: {context} is not a positive number of tokens")
        if phase == "decode" and context + max_output + MARGIN > max_model_len:
            raise ParamsError(
                f"{parameter}: {_describe(context)} does not fit max_model_len {max_model_len:,} with "
                f"max_output {max_output:,} (needs context + max_output + {MARGIN} <= max_model_len)"
            )
        if phase == "prefill" and context + MARGIN > max_model_len:
            raise ParamsError(
                f"{parameter}: {_describe(context)} does not fit max_model_len {max_model_len:,} "
                f"for prefill (needs context + {MARGIN} <= max_model_len)"
            )


def embedding_lengths(max_model_len: int, candidates: Sequence[int] = DEFAULT_EMBEDDING_LENGTHS) -> list[int]:
    """An embeddings matrix's default input lengths: the candidates with ``length + 64 <= max_model_len``."""
    _check_lengths(max_model_len, 1)
    kept = [c for c in candidates if c + MARGIN <= max_model_len]
    if not kept:
        raise ParamsError(f"max_model_len: {max_model_len:,} leaves no room for an input of {candidates[0]} tokens "
                          f"and a {MARGIN}-token margin; give contexts")  # fmt: skip
    return kept
