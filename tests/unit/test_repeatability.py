"""benchmarks/repeatability.py: a ratio's interval judged by its ends, the window ratios from the product's own
`ratio_test`, and the shares, by hand."""

from __future__ import annotations

import math

import pytest

from benchmarks import repeatability as study
from toolkit.method.spread import Interval, ratio_test


def test_a_ratio_holds_one_by_its_ends_as_a_report_shows_them() -> None:
    assert study.holds_one(Interval(1.10, 0.12, log_scale=True)) == (True, pytest.approx(100 * 0.12 / 1.10))
    # 1.10 ± 0.08 on the log scale: from 1.10 / (1 + 0.08 / 1.10) = 1.025 up, so 1 is left out
    assert study.holds_one(Interval(1.10, 0.08, log_scale=True))[0] is False
    assert study.holds_one(Interval(0.95, 0.04, log_scale=True))[0] is False  # up to 0.99
    assert study.holds_one(Interval(0.95, 0.06, log_scale=True))[0] is True


def test_window_ratios_are_ratio_test_of_the_cells_both_runs_measured() -> None:
    a = {(512, 1): Interval(300.0, 150.0, 0.9), (512, 2): Interval(500.0, 40.0, 0.9), (1024, 1): Interval(1.0, 1.0)}
    b = {(512, 1): Interval(330.0, 100.0, 0.9), (512, 2): Interval(700.0, 30.0, 0.9)}
    judged = study.window_pair(a, b)
    assert judged == [study.holds_one(ratio_test(a[c], b[c]).interval) for c in ((512, 1), (512, 2))]
    assert [covered for covered, _ in judged] == [True, False]  # 1.10 on wide windows; 1.40 on narrow ones


def test_shares_are_the_covered_fraction_and_the_median_width() -> None:
    assert study.share([(True, 10.0), (False, 30.0), (True, 20.0), (True, 50.0)]) == (0.75, 25.0)
    coverage, width = study.share([])
    assert math.isnan(coverage) and math.isnan(width)
