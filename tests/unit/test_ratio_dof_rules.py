"""benchmarks/ratio_dof_rules.py: its rules, and its intervals against the product's own."""

from __future__ import annotations

import math
import random

import pytest

from benchmarks import calibration
from benchmarks import ratio_dof_rules as rules
from toolkit.method.spread import RATIO_WINDOW_DOF, WINDOW_DOF, Interval, ratio_test, t_quantile


def _windows(se_a: float, se_b: float) -> tuple[Interval, Interval]:
    """Two windows of 400 and 420 tok/s whose relative standard errors are `se_a` and `se_b`."""
    at = t_quantile(WINDOW_DOF)
    return Interval(400.0, 400.0 * se_a * at, WINDOW_DOF), Interval(420.0, 420.0 * se_b * at, WINDOW_DOF)


def test_agreement_is_one_for_equal_windows_and_falls_towards_zero_as_one_dominates() -> None:
    assert rules.agreement(*_windows(0.02, 0.02)) == pytest.approx(1.0)
    assert 0.0 < rules.agreement(*_windows(0.02, 0.01)) < 1.0
    assert rules.agreement(*_windows(0.02, 0.0001)) == pytest.approx(0.0, abs=1e-4)


def test_the_constant_rule_is_the_products_ratio_interval() -> None:
    a, b = _windows(0.02, 0.015)
    assert rules.rules()["constant 1.65"](a, b) == RATIO_WINDOW_DOF == ratio_test(a, b).interval.dof
    shown = ratio_test(a, b).interval
    assert rules.held(a, b, RATIO_WINDOW_DOF) is calibration._holds(shown.value, shown.half_width, 1.0)


def test_a_scaled_welch_rule_runs_from_one_windows_dof_to_the_pooled() -> None:
    welch = rules.rules()["1 x Welch"]
    assert welch(*_windows(0.02, 0.02)) == pytest.approx(rules.POOLED)
    assert welch(*_windows(0.02, 0.0001)) == pytest.approx(WINDOW_DOF, abs=1e-4)
    assert rules.rules()["1.4 to 2"](*_windows(0.02, 0.02)) == pytest.approx(2.0)


def test_a_wider_dof_holds_less_and_a_ratio_off_by_more_than_its_interval_is_missed() -> None:
    a, b = _windows(0.001, 0.001)  # 420 / 400 = 1.05, a standard error of 0.14 %: far from 1 at any dof
    assert rules.held(a, b, 1.0) is False
    near = Interval(400.0, 400.0 * 0.05, WINDOW_DOF), Interval(401.0, 401.0 * 0.05, WINDOW_DOF)
    assert rules.held(*near, RATIO_WINDOW_DOF) is True


def test_a_level_gives_every_rule_a_coverage() -> None:
    found = rules.level_coverage("independent", 4, random.Random(1), [])  # no map: independent
    assert set(found) == set(rules.rules())
    assert all(0.0 <= c <= 1.0 and not math.isnan(c) for c in found.values())


def test_a_zero_width_ratio_is_a_miss_as_compare_shows_it() -> None:
    """Two windows whose halves agreed exactly: compare shows the ratio ± 0, which holds only a ratio of 1."""
    a, b = Interval(400.0, 0.0, WINDOW_DOF), Interval(420.0, 0.0, WINDOW_DOF)
    assert ratio_test(a, b).interval.half_width == 0.0
    assert rules.held(a, b, RATIO_WINDOW_DOF) is False
