"""What counts as still disturbed, and how a run counts it."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from toolkit.method.disturbed import disturbed_count_text, disturbed_mask, is_disturbed


@pytest.mark.parametrize(
    ("value", "disturbed"),
    [("no token for 2.3 s", True), (None, False), (math.nan, False), ("", False), ("  ", False)],
)
def test_only_a_reason_marks_a_measurement_disturbed(value: object, disturbed: bool) -> None:
    assert is_disturbed(value) is disturbed


def test_rows_and_counts() -> None:
    frame = pd.DataFrame({"context": ["8K", "8K", "16K"], "disturbed": [None, "no server sample for 1.6 s", math.nan]})
    assert disturbed_mask(frame).tolist() == [False, True, False]
    assert disturbed_mask(frame.drop(columns="disturbed")).tolist() == [False] * 3  # an older results.csv
    assert disturbed_count_text(frame["disturbed"]) == "1 of 3 measurements disturbed"
    assert disturbed_count_text(["client event loop blocked 900 ms"]) == "1 of 1 measurement disturbed"
    assert disturbed_count_text([None, None]) is None
