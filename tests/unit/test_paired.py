"""Interleaved comparison: the alternating order, paired ratios, the paired table of two sides' rounds."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from toolkit.method.paired import alternating_order, paired_ratio
from toolkit.reports.interleaved import interleaved_markdown, overall, paired_table


def test_rounds_alternate_which_side_goes_first() -> None:
    assert alternating_order(3) == [(1, "A"), (1, "B"), (2, "B"), (2, "A"), (3, "A"), (3, "B")]
    with pytest.raises(ValueError, match="rounds"):
        alternating_order(0)


def test_a_machine_drift_shared_by_each_pair_cancels_in_the_paired_ratio() -> None:
    """The machine slows 10 % a round; B is 5 % faster than A in every round. Unpaired, the rounds' values spread
    by 30 %; paired, every round's ratio is 1.05 and the interval is as narrow as the rounding."""
    speed = [1.0, 0.9, 0.81, 0.729]
    a = [300.0 * s for s in speed]
    b = [315.0 * s for s in speed]
    test = paired_ratio(a, b)
    assert test is not None and test.interval.value == pytest.approx(1.05)
    assert test.interval.half_width == pytest.approx(0.0, abs=1e-9) and test.p_value < 1e-9
    noisy = paired_ratio([300.0, 310.0, 290.0], [303.0, 305.0, 298.0])
    assert noisy is not None and noisy.interval.dof == 2 and noisy.p_value > 0.05  # within the rounds' spread
    assert paired_ratio([300.0], [310.0]) is None and paired_ratio([300.0, math.nan], [310.0, 320.0]) is None


def frame(total: float, per_request: float, ttft: float) -> pd.DataFrame:
    rows = [{"phase": "decode", "context_tokens": 64, "context": "64", "concurrency": n, "status": "Valid",
             "total_tok_s": total * n, "per_request_tok_s": per_request, "ttft_ms": ttft, "disturbed": None}
            for n in (1, 2)]  # fmt: skip
    return pd.DataFrame(rows)


def test_the_paired_table_and_its_report() -> None:
    a = {1: frame(100, 50, 80), 2: frame(90, 45, 85), 3: frame(95, 47, 82)}
    b = {1: frame(120, 60, 81), 2: frame(108, 54, 84), 3: frame(114, 57, 83)}
    table = paired_table(a, b)
    assert list(table["concurrency"]) == [1, 2] and (table["rounds"] == 3).all()
    assert list(table["total_tok_s_ratio"]) == pytest.approx([1.2, 1.2])
    assert table["total_tok_s_significant"].all() and not table["ttft_ms_significant"].any()
    sums = overall(a, b)
    assert sums["total_tok_s"][0] == pytest.approx(1.2) and sums["total_tok_s"][2] == 2
    text = interleaved_markdown(table, ["A", "B"], 3, sums)
    assert text.startswith("# Interleaved comparison: B / A") and "Total tok/s 1.20× ±0.00 (2 cells)" in text
    assert "| 64 | 1 | 1.20× ±0.00 |" in text
    assert "No decode cell" in interleaved_markdown(paired_table({}, {}), ["A", "B"], 0, {})
