"""benchmarks/window_ties.py: whole-token halves and the judging, by hand."""

from __future__ import annotations

import pytest

from benchmarks import window_ties as ties
from toolkit.loadgen.client import StreamResult
from toolkit.method.spread import Interval


def test_whole_token_halves_count_the_tokens_that_arrived_in_each_half() -> None:
    stream = StreamResult(started=0.0, first_token_at=1.0, token_events=[(1.0, 1), (4.0, 3), (6.0, 4), (9.5, 6)])
    assert ties.whole_token_halves([stream, stream], 0.0, 10.0) == [2 * 3 / 5, 2 * 3 / 5]  # a tie: 3 tokens each half


def test_judging_counts_the_windows_that_hold_the_truth_and_leaves_out_those_without_an_interval() -> None:
    windows = [(100.0, Interval(100.0, 10.0, 0.9)), (120.0, Interval(120.0, 0.0, 0.9)), (95.0, None)]
    coverage, width = ties.judged(windows, 101.0)
    assert coverage == 0.5  # 100 ± 10 holds 101; 120 ± 0 does not
    assert width == pytest.approx(100 * (0.1 + 0.0) / 2)
