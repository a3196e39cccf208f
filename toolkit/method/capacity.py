"""The Over capacity rule (docs/METHOD.md, Capacity): N × (context + max_output) > KV budget (tokens)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Cell = tuple[int, int]  # (context tokens, concurrency)


def request_tokens(context: int, max_output: int) -> int:
    """KV cache tokens one request can occupy: its prompt plus its full output."""
    return context + max_output


def is_over_capacity(concurrency: int, context_tokens: int, max_output: int, kv_budget_tokens: int) -> bool:
    """True when ``concurrency`` requests at this context would exceed the KV budget."""
    return concurrency * request_tokens(context_tokens, max_output) > kv_budget_tokens


def capacity_pattern(
    contexts: Iterable[int], concurrencies: Iterable[int], max_output: int, budget: int
) -> dict[Cell, bool]:
    """Over-capacity flag for every (context, concurrency) cell of a matrix."""
    levels = list(concurrencies)
    return {(c, n): is_over_capacity(n, c, max_output, budget) for c in contexts for n in levels}


def budget_interval_for_pattern(pattern: Mapping[Cell, bool], max_output: int) -> tuple[int, int]:
    """The budgets ``[lo, hi)`` that reproduce ``pattern`` exactly.

    ``lo`` is the largest need of a cell that ran (0 if none), ``hi`` the smallest need of
    an over-capacity cell. Raises ``ValueError`` when no over-capacity cell bounds the budget
    from above, or when the pattern is inconsistent (no budget reproduces it).
    """
    needs = {cell: cell[1] * request_tokens(cell[0], max_output) for cell in pattern}
    ran = [needs[cell] for cell, over in pattern.items() if not over]
    over = [needs[cell] for cell, over in pattern.items() if over]
    if not over:
        raise ValueError("pattern has no Over capacity cell, so the budget has no upper bound")
    lo, hi = max(ran, default=0), min(over)
    if lo >= hi:
        raise ValueError(
            f"no KV budget reproduces this pattern: a cell that ran needs {lo:,} tokens "
            f"but an Over capacity cell needs only {hi:,}"
        )
    return lo, hi
