"""Interleaved comparison: the alternating order, paired ratios, the paired table of two sides' rounds, and each
side's reply shares in it where the rounds' decode requests carried a response format or tools."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from toolkit.base.schema import Measurement
from toolkit.method.paired import alternating_order, paired_ratio
from toolkit.reports.interleaved import interleaved_markdown, overall, paired_table
from toolkit.reports.tables import REPLY_SHARE_NOTE
from toolkit.results.store import to_dataframe


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


def measured(total: float, **shares: float | None) -> pd.DataFrame:
    """A round's results frame as a run folder gives it (every column, the reply shares None unless given)."""
    return to_dataframe([Measurement("decode", 64, "64", n, "Valid", total_tok_s=total * n, per_request_tok_s=total,
                                     ttft_ms=80.0, **shares) for n in (1, 2)])  # fmt: skip


def report(a: dict[int, pd.DataFrame], b: dict[int, pd.DataFrame]) -> tuple[pd.DataFrame, str]:
    table = paired_table(a, b)
    return table, interleaved_markdown(table, ["A", "B"], len(a), overall(a, b))


def test_each_sides_reply_shares_stand_beside_the_ratios_with_the_decode_matrix_note() -> None:
    a = {1: measured(100, schema_valid_share=1.0), 2: measured(90, schema_valid_share=0.5)}
    b = {1: measured(80, schema_valid_share=0.5), 2: measured(70, schema_valid_share=0.0)}
    table, text = report(a, b)
    assert list(table["schema_valid_share_a"]) == [0.75, 0.75] and list(table["schema_valid_share_b"]) == [0.25] * 2
    assert not any(c.startswith("tool_") for c in table.columns)
    assert "| Context | Requests at once | Total tok/s | Per request tok/s | TTFT | A valid | B valid |" in text
    assert text.count(" | 75% | 25% |\n") == 2 and text.endswith(f" |\n\n{REPLY_SHARE_NOTE}\n")
    tools = {"tool_called_share": 1.0, "tool_args_valid_share": 0.5}
    table, text = report({1: measured(100, **tools), 2: measured(90, **tools)},
                         {1: measured(80, tool_called_share=0.0), 2: measured(70, tool_called_share=0.5)})  # fmt: skip
    assert list(table["tool_called_share_b"]) == [0.25, 0.25] and list(table["tool_args_valid_share_a"]) == [0.5] * 2
    assert "tool_args_valid_share_b" not in table.columns  # B's replies carried no call to check
    assert (
        "| TTFT | A called a tool | B called a tool |" in text and " | 100% | 25% |" in text and "valid |" not in text
    )


def test_a_comparison_without_a_response_format_or_tools_is_unchanged() -> None:
    """A plain run's frame holds the share columns, all empty: its table and report are those of a frame without
    them, as an older run folder gives it, and the report ends with its ratios' table as before."""
    a, b = {1: measured(100), 2: measured(90)}, {1: measured(120), 2: measured(110)}
    table, text = report(a, b)
    shares = ["schema_valid_share", "tool_called_share", "tool_args_valid_share"]
    older, older_text = report(*({r: f.drop(columns=shares) for r, f in side.items()} for side in (a, b)))
    assert text == older_text and list(table.columns) == list(older.columns)
    assert not any("share" in c for c in table.columns)
    assert text.endswith("\n\n| Context | Requests at once | Total tok/s | Per request tok/s | TTFT |\n"
                         "|---|---|---|---|---|\n| 64 | 1 | 1.21× ±0.15 | 1.21× ±0.15 | 1.00× ±0.00 n.s. |\n"
                         "| 64 | 2 | 1.21× ±0.15 | 1.21× ±0.15 | 1.00× ±0.00 n.s. |\n")  # fmt: skip
