"""benchmarks/window_contrasts.py: its two estimators by hand."""

from __future__ import annotations

import math
import random

import pytest

from benchmarks import window_contrasts as contrasts
from benchmarks.token_truth import Cell, Noise


def test_the_trend_free_contrast_ignores_a_level_and_a_linear_trend() -> None:
    assert contrasts.trend_free_se([400.0, 410.0, 420.0, 430.0]) == pytest.approx(0.0, abs=1e-9)
    # one part off by 1: the contrast is 0.5, over sqrt(0.25 + 2.25 + 2.25 + 0.25) = sqrt(5), halved for the mean
    assert contrasts.trend_free_se([401.0, 400.0, 400.0, 400.0]) == pytest.approx(0.5 / math.sqrt(5) / 2)


def test_paired_halves_cancel_a_trend_both_windows_share() -> None:
    assert contrasts.paired_halves_se([100.0, 110.0], [120.0, 132.0]) == pytest.approx(0.0, abs=1e-12)
    # halves' ratios 1.1 and 1.21: log ratios log 1.1 apart, half of that
    assert contrasts.paired_halves_se([100.0, 100.0], [110.0, 121.0]) == pytest.approx(math.log(1.1) / 2)


def test_a_level_gives_every_estimator_a_coverage_and_a_width() -> None:
    found = contrasts.level_coverage(Noise("independent"), Cell(), 3, 400.0, random.Random(1))
    assert set(found) == {*contrasts.WINDOW_ESTIMATORS, *contrasts.RATIO_ESTIMATORS}
    assert all(0.0 <= coverage <= 1.0 and width > 0 for coverage, width in found.values())
