"""benchmarks/ratio_components.py: the two contrasts of two windows' halves and the estimators built on them."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import ratio_components as model


def test_a_common_trend_reaches_only_the_common_contrast() -> None:
    rng = np.random.default_rng(5)
    error, blind, common = model.windows(rng, 200_000, 0.0, 0.0)
    assert np.var(error) == pytest.approx(1.0, rel=0.02)  # the log ratio's error: two means of two unit halves
    assert np.mean(blind) == pytest.approx(1.0, rel=0.02) and np.mean(common) == pytest.approx(1.0, rel=0.02)
    error, blind, common = model.windows(rng, 200_000, 0.0, 1.0)
    assert np.var(error) == pytest.approx(1.0, rel=0.02)  # the trend cancels in the ratio
    assert np.mean(blind) == pytest.approx(1.0, rel=0.02)
    assert np.mean(common) == pytest.approx(2.0, rel=0.02)  # (2 x 1 + e)² / 4 with e of variance 4: 1 + 1


def test_halves_that_share_a_wander_look_steadier_than_the_ratio_is() -> None:
    error, blind, common = model.windows(np.random.default_rng(6), 200_000, 0.5, 0.0)
    assert np.var(error) == pytest.approx(1.5, rel=0.02)  # (1 + rho) / 2 per window, two windows
    assert np.mean(blind) == pytest.approx(0.5, rel=0.03) and np.mean(common) == pytest.approx(0.5, rel=0.03)


def test_each_estimators_variance_by_hand() -> None:
    blind, common = np.array([1.0, 4.0]), np.array([3.0, 2.0])
    assert model.variance("pooled", blind, common).tolist() == [2.0, 3.0]
    assert model.variance("paired", blind, common).tolist() == [1.0, 4.0]
    assert model.variance("smaller", blind, common).tolist() == [1.0, 3.0]
    assert model.variance("weighted", blind, common).tolist() == pytest.approx([1.4, 3.6])
