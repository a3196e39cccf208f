"""Number formatting, checked against values printed in the published reports."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest

from toolkit.reports.number_format import (
    MISSING,
    as_number,
    bounds_note,
    format_active,
    format_count,
    format_ms,
    format_percent,
    format_seconds,
    format_tbt_ms,
    format_tok_s,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (17_731.6, "17.7K"),
        (18_700.0, "18.7K"),
        (15_000.0, "15K"),
        (15_012.3, "15K"),
        (14_031.0, "14K"),
        (10_300.0, "10.3K"),
        (143_112.0, "143.1K"),
        (24_312.0, "24.3K"),
        (130_800.0, "130.8K"),
        (10_000.0, "10K"),
        (9_999.96, "10K"),  # rounds to 10,000.0, so it is shown as thousands
        (9_999.94, "9,999.9"),
        (8_828.0, "8,828.0"),
        (8_357.31, "8,357.3"),
        (2_886.0, "2,886.0"),
        (1_113.1, "1,113.1"),
        (959.87, "959.9"),
        (24.33, "24.3"),
        (10.1, "10.1"),
        (0.0, "0.0"),
    ],
)
def test_format_tok_s(value: float, expected: str) -> None:
    assert format_tok_s(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(8_828.0, "8,828"), (8_783.0, "8,783"), (8_357.3, "8,357.3"), (17_700.0, "17.7K"), (15_000.0, "15K")],
)
def test_format_tok_s_trim_zero_as_prefill_cards(value: float, expected: str) -> None:
    assert format_tok_s(value, trim_zero=True) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (136.0, "136 ms"),
        (57.4, "57 ms"),
        (462.5001, "463 ms"),
        (1_036.2, "1,036 ms"),
        (4_579.0, "4,579 ms"),
        (28_591.0, "28,591 ms"),
        (29_310.7, "29,311 ms"),
    ],
)
def test_format_ms(value: float, expected: str) -> None:
    assert format_ms(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(39.24, "39.2 ms"), (1.0, "1.0 ms"), (0.96, "1.0 ms"), (99.4, "99.4 ms"), (23.9, "23.9 ms")],
)
def test_format_tbt_ms(value: float, expected: str) -> None:
    assert format_tbt_ms(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(28_796, "28,796"), (739_238, "739,238"), (728, "728"), (728.0, "728"), (0, "0"), (1, "1")],
)
def test_format_count(value: float, expected: str) -> None:
    assert format_count(value) == expected


@pytest.mark.parametrize(("value", "expected"), [(29.94, "29.9 s"), (30.0, "30.0 s"), (30.5, "30.5 s")])
def test_format_seconds(value: float, expected: str) -> None:
    assert format_seconds(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"), [(1.0, "1.0"), (0.94, "0.9"), (7.8, "7.8"), (126.2, "126.2"), (16, "16.0")]
)
def test_format_active(value: float, expected: str) -> None:
    assert format_active(value) == expected


def test_format_percent() -> None:
    assert format_percent(0.875) == "87.5%"
    assert format_percent(1.0025) == "100.2%"


FORMATTERS: list[Callable[[Any], str]] = [
    format_tok_s,
    format_ms,
    format_tbt_ms,
    format_count,
    format_seconds,
    format_active,
    format_percent,
]


@pytest.mark.parametrize("formatter", FORMATTERS)
@pytest.mark.parametrize("missing", [None, math.nan, float("nan"), pd.NA, math.inf, "n/a"])
def test_missing_values_print_an_em_dash(formatter: Callable[[Any], str], missing: Any) -> None:
    assert formatter(missing) == MISSING == "—"


def test_as_number_accepts_numpy_and_pandas_scalars() -> None:
    series = pd.Series([1.5, None], dtype="Float64")
    assert as_number(series[0]) == 1.5
    assert as_number(series[1]) is None
    assert as_number(pd.Series([7])[0]) == 7.0


def test_the_bounds_note_names_the_fewest_requests_each_percentile_needs_for_an_upper_bound() -> None:
    # the maximum misses the true p90 above with 0.9^n: 0.9^35 > 2.5 % >= 0.9^36; p99: 0.99^367 > 2.5 % >= 0.99^368
    assert 0.9**35 > 0.025 >= 0.9**36 and 0.99**367 > 0.025 >= 0.99**368
    assert bounds_note(90, 99) == ("in brackets the percentile's 95 % distribution-free interval, unbounded above "
                                   "from fewer than 36 requests at p90 and 368 at p99")  # fmt: skip
    assert bounds_note(90).endswith("from fewer than 36 requests at p90")
