"""benchmarks/window_dof_sweep.py judges an interval again at another dof by rescaling its t quantile: the rescaled
half-width must be the one the product itself shows at that dof (issue 42)."""

from __future__ import annotations

import math

import pytest

import benchmarks.window_dof_sweep as sweep
import toolkit.method.spread as spread
from toolkit.method.spread import RATIO_WINDOW_DOF, WINDOW_DOF, batch_means, ratio_test, t_quantile

HALVES_A, HALVES_B = (402.0, 371.0), (388.0, 395.0)


def _rejudged(kind: str, rows: list[tuple[float, float, float]]) -> dict[float, float]:
    tally = sweep.KeptTally()
    tally.kept[kind] = rows
    tally.hits[kind] = [abs(v - t) <= hw for v, hw, t in rows]  # calibration's own judgement at the product's dof
    for other in sweep.WINDOW_KINDS + sweep.RATIO_KINDS:
        if other != kind:
            tally.kept[other], tally.hits[other] = [(1.0, 1.0, 1.0)], [True]
    return sweep.swept(tally)[kind]


def test_a_ratio_rejudged_at_another_dof_is_the_products_ratio_at_that_dof(monkeypatch: pytest.MonkeyPatch) -> None:
    base, other = (spread.window_interval(h) for h in (HALVES_A, HALVES_B))
    assert base is not None and other is not None
    shown = ratio_test(base, other).interval
    r, hw = shown.value, shown.half_width
    for dof in sweep.RATIO_DOFS[1:]:
        monkeypatch.setattr(spread, "RATIO_WINDOW_DOF", dof)
        at_dof = ratio_test(base, other).interval
        assert at_dof.dof == dof
        rescaled = r * math.expm1(t_quantile(dof) * math.log1p(hw / r) / t_quantile(RATIO_WINDOW_DOF))
        assert rescaled == pytest.approx(at_dof.half_width, rel=1e-12)
        # held at the product's dof and at this one exactly when the rescaled half-width says so
        truth = r - 0.999 * at_dof.half_width
        assert _rejudged("ratio", [(r, hw, truth)])[dof] == 1.0
        assert _rejudged("ratio", [(r, hw, r - 1.001 * at_dof.half_width)])[dof] == 0.0


def test_a_window_rejudged_at_another_dof_is_batch_means_at_that_dof() -> None:
    shown = spread.window_interval(HALVES_A)
    assert shown is not None and shown.dof == pytest.approx(WINDOW_DOF)
    for dof in sweep.WINDOW_DOFS[1:]:
        at_dof = batch_means(HALVES_A, spread.BATCHES - 1 - dof)
        assert at_dof is not None and at_dof.dof == pytest.approx(dof)
        inside = (shown.value, shown.half_width, shown.value + 0.999 * at_dof.half_width)
        outside = (shown.value, shown.half_width, shown.value + 1.001 * at_dof.half_width)
        assert _rejudged("total_tok_s", [inside])[dof] == 1.0
        assert _rejudged("total_tok_s", [outside])[dof] == 0.0


def test_a_rejudging_that_disagrees_with_calibration_at_the_products_dof_is_refused() -> None:
    tally = sweep.KeptTally()
    for kind in sweep.WINDOW_KINDS + sweep.RATIO_KINDS:
        tally.kept[kind], tally.hits[kind] = [(1.0, 0.1, 1.0)], [True]
    tally.hits["tbt_ms"] = [False]  # calibration judged it missed; the kept row says it held
    with pytest.raises(AssertionError, match="tbt_ms"):
        sweep.swept(tally)


def test_only_dofs_inside_the_band_at_every_goal_level_fit() -> None:
    levels = {name: {"ratio": {1.65: 0.95, 1.8: 0.95}} for name in sweep.GOAL}
    levels["drift"]["ratio"][1.65] = 0.975
    levels["ar1@0.7"] = {"ratio": {1.65: 0.85, 1.8: 0.84}}  # named, not asked
    assert sweep.fitting(levels, "ratio") == [1.8]
