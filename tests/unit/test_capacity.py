"""The Over capacity rule, checked against the patterns of both reference reports."""

from collections.abc import Iterable, Mapping

import pytest

from toolkit.method.capacity import is_over_capacity, request_tokens

Cell = tuple[int, int]  # (context tokens, concurrency)

K = 1024
MAX_OUTPUT = 4096
LEVELS = [1, 2, 4, 8, 16, 32, 64, 128]
# Kimi: 251K = floor((262,144 - 4,096 - 64) / 1024) * 1024 = 257,024 tokens.
KIMI_CONTEXTS = [8 * K, 16 * K, 32 * K, 64 * K, 128 * K, 257_024]
# Largest concurrency that ran per context in the Kimi report; higher ones are Over capacity.
KIMI_LARGEST_RUN = {8 * K: 16, 16 * K: 16, 32 * K: 8, 64 * K: 4, 128 * K: 2, 257_024: 1}
KIMI_PATTERN = {(c, n): n > KIMI_LARGEST_RUN[c] for c in KIMI_CONTEXTS for n in LEVELS}
# LFM: 120K = floor((128,000 - 4,096 - 64) / 1024) * 1024 = 122,880 tokens; only 120K × 128 Over capacity.
LFM_CONTEXTS = [8 * K, 16 * K, 32 * K, 64 * K, 122_880]
LFM_PATTERN = {(c, n): (c, n) == (122_880, 128) for c in LFM_CONTEXTS for n in LEVELS}
# By hand: lo = 64K × 128 = 128 × (65,536 + 4,096) = 8,912,896 (the largest need that ran);
# hi = 120K × 128 = 128 × (122,880 + 4,096) = 16,252,928 (the only over-capacity need).
LFM_INTERVAL = (8_912_896, 16_252_928)


def capacity_pattern(
    contexts: Iterable[int], concurrencies: Iterable[int], max_output: int, budget: int
) -> dict[Cell, bool]:
    """Over-capacity flag for every (context, concurrency) cell of a matrix, by the rule under test."""
    levels = list(concurrencies)
    return {(c, n): is_over_capacity(n, c, max_output, budget) for c in contexts for n in levels}


def budget_interval_for_pattern(pattern: Mapping[Cell, bool], max_output: int) -> tuple[int, int]:
    """The budgets ``[lo, hi)`` that reproduce ``pattern`` exactly: ``lo`` the largest need of a cell that ran
    (0 if none), ``hi`` the smallest need of an Over capacity cell. ValueError when no budget bounds or fits it."""
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


# By hand: lo = 16K × 16 = 16 × 20,480 = 327,680; hi = 8K × 32 = 32 × 12,288 = 393,216.
KIMI_INTERVAL = (327_680, 393_216)


@pytest.mark.parametrize(("context", "max_output", "expected"), [(8 * K, 4096, 12_288), (257_024, 4096, 261_120)])
def test_request_tokens(context: int, max_output: int, expected: int) -> None:
    assert request_tokens(context, max_output) == expected


@pytest.mark.parametrize(
    ("concurrency", "context", "budget", "expected"),
    [
        (32, 8 * K, 393_216, False),  # exactly the budget still fits
        (32, 8 * K, 393_215, True),
        (1, 257_024, 261_120, False),
        (2, 257_024, 522_239, True),
        (1, 8 * K, 0, True),
    ],
)
def test_is_over_capacity(concurrency: int, context: int, budget: int, expected: bool) -> None:
    assert is_over_capacity(concurrency, context, MAX_OUTPUT, budget) is expected


@pytest.mark.parametrize(
    ("contexts", "pattern", "interval"),
    [(KIMI_CONTEXTS, KIMI_PATTERN, KIMI_INTERVAL), (LFM_CONTEXTS, LFM_PATTERN, LFM_INTERVAL)],
    ids=["kimi", "lfm"],
)
def test_budget_interval_reproduces_reference_pattern(
    contexts: list[int], pattern: dict[tuple[int, int], bool], interval: tuple[int, int]
) -> None:
    lo, hi = budget_interval_for_pattern(pattern, MAX_OUTPUT)
    assert (lo, hi) == interval
    for budget in (lo, (lo + hi) // 2, hi - 1):
        assert capacity_pattern(contexts, LEVELS, MAX_OUTPUT, budget) == pattern
    for budget in (lo - 1, hi):
        assert capacity_pattern(contexts, LEVELS, MAX_OUTPUT, budget) != pattern


def test_kimi_pattern_counts() -> None:
    pattern = capacity_pattern(KIMI_CONTEXTS, LEVELS, MAX_OUTPUT, 350_000)
    assert sum(pattern.values()) == 48 - 20  # 20 decode cells ran in the Kimi report (5+5+4+3+2+1)
    assert pattern[(32 * K, 16)] is True
    assert pattern[(257_024, 1)] is False


def test_capacity_pattern_keys() -> None:
    assert capacity_pattern([100], [1, 2], 10, 200) == {(100, 1): False, (100, 2): True}


def test_budget_interval_without_over_capacity_cell() -> None:
    with pytest.raises(ValueError, match="no upper bound"):
        budget_interval_for_pattern({(8 * K, 1): False}, MAX_OUTPUT)


def test_budget_interval_inconsistent_pattern() -> None:
    pattern = {(8 * K, 1): True, (8 * K, 2): False}  # fewer requests over capacity, more ran
    with pytest.raises(ValueError, match="no KV budget reproduces"):
        budget_interval_for_pattern(pattern, MAX_OUTPUT)


def test_budget_interval_only_over_capacity() -> None:
    assert budget_interval_for_pattern({(8 * K, 1): True}, MAX_OUTPUT) == (0, 12_288)
