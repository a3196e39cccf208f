"""The gate's traffic-class quantities (pure), by hand: limits named per class, a step's total goodput interval from
its classes', each class's bracket from its own verdicts, the rates behind a failure."""

from __future__ import annotations

import math

import pytest

from toolkit.base.errors import ParamsError
from toolkit.method.gate import Verdict
from toolkit.method.goodput import ServiceLevel
from toolkit.reports.gate_classes import class_bracket, class_levels, mix_goodputs, mix_interval
from toolkit.reports.gate_rates import class_quantity, is_rate, quantity_text, rate_rows, split_limits, step_log_se
from toolkit.reports.gate_ratios import Judged, RateRow
from toolkit.reports.gate_text import GateContext, failing_rates, summary_markdown

pytestmark = pytest.mark.unit


def figures(fraction: float, low: float, high: float, goodput: float, requests: int = 400, **more: float) -> dict:
    return {"requests": requests, "steady_requests": requests, "goodput": goodput, "slo_fraction": fraction,
            "slo_fraction_low": low, "slo_fraction_high": high, **more}  # fmt: skip


def test_limits_name_a_class_quantity_beside_the_others() -> None:
    limits = split_limits("3%,goodput[chat]=10%,slo_rate[rag.v2]=20%,ttft_ms=15%")
    assert limits.rates == {"goodput[chat]": 0.10, "slo_rate[rag.v2]": 0.20} and limits.bare == 0.03
    assert limits.decode == {"total_tok_s": 0.03, "per_request_tok_s": 0.03, "ttft_ms": 0.15}
    for bad in ("total_tok_s[chat]=3%", "goodput[]=3%", "goodput[chat]=3", "goodput[chat]=1%,goodput[chat]=2%"):
        with pytest.raises(ParamsError):
            split_limits(bad)
    q = class_quantity("slo_rate", "chat")
    assert (q.name, quantity_text(q), q.higher_is_better, is_rate(q)) == (
        "slo_rate[chat]", "highest rate meeting the SLO[chat]", True, True)  # fmt: skip


def test_a_steps_total_goodput_interval_adds_its_classes_half_widths_in_quadrature() -> None:
    chat = figures(0.95, 0.94, 0.96, goodput=1.9)  # goodput / fraction = 2 req/s: half-widths 0.02 either side
    rag = figures(0.0, 0.0, 0.02, goodput=0.0, achieved_rate=1.5)  # none met: scaled by its arrivals, 0.03 above
    none = figures(0.0, 0.0, 1.0, goodput=0.0, requests=0)  # drew no arrival: left out
    total, low, high = mix_interval({"chat": chat, "rag": rag, "code": none}) or (0, 0, 0)
    assert (total, low) == pytest.approx((1.9, 1.88)) and high == pytest.approx(1.9 + math.hypot(0.02, 0.03))
    assert mix_interval({"chat": chat, "rag": {**rag, "slo_fraction_low": None}}) is None
    # two steps at 4 req/s: the mean of their logs; each error a step's from the total's interval
    rows = [{"offered_rate": 4.0, "classes": {"chat": chat, "rag": rag}}] * 2
    log, se = mix_goodputs(rows)[4.0] or (0, 0)
    assert log == pytest.approx(math.log(1.9)) and se == pytest.approx(step_log_se(1.9, low, high) / math.sqrt(2))
    # a total that may be 0 has no log
    assert mix_goodputs([{"offered_rate": 2.0, "classes": {"rag": rag}}]) == {2.0: None}


def test_a_class_bracket_comes_from_its_own_verdicts_at_the_rates_run() -> None:
    meets, fails = figures(0.99, 0.985, 0.995, 1.0), figures(0.5, 0.45, 0.55, 1.0)
    rows = [{"offered_rate": r, "classes": {"chat": meets, "rag": meets if r < 4 else fails}} for r in (2, 2, 4, 4, 8)]
    assert class_bracket(rows, "rag", 0.9) == (2.0, 4.0)  # met on two steps at 2, failed at 4
    assert class_bracket(rows, "chat", 0.9) == "bracket open above: no finite rate shown to fail chat's SLO"
    low = [{"offered_rate": r, "classes": {"rag": fails}} for r in (2, 4)]
    assert class_bracket(low, "rag", 0.9) == "bracket open below: no rate shown to meet rag's SLO"
    sweep = {"classes": [{"name": "chat", "slo_ttft_ms": 200, "slo_tpot_ms": None}, {"name": "rag", "slo_e2e_ms": 9e3}]}
    assert class_levels(sweep, 0.9) == {
        "chat": ServiceLevel(200, None, None, 0.9),
        "rag": ServiceLevel(None, None, 9e3, 0.9),
    }
    assert class_levels({}, 0.9) == {}


def test_the_rates_behind_a_failure_are_each_sides_mean_and_their_ratio() -> None:
    base = [{"offered_rate": 2.0, "goodput": 1.8}, {"offered_rate": 2.0, "goodput": 2.0},
            {"offered_rate": 4, "goodput": 3.8}, {"offered_rate": 8.0, "goodput": 7.0}]  # fmt: skip
    cand = [{"offered_rate": 2.0000000001, "goodput": 1.52}, {"offered_rate": 4.0, "goodput": None}]
    rows = rate_rows(base, cand, "goodput")
    assert rows == (RateRow(2.0, 1.9, 1.52, "goodput"), RateRow(4.0, 3.8, None, "goodput"))  # 8: the baseline's only
    assert rows[0].ratio == pytest.approx(0.8) and rows[1].ratio is None
    q = class_quantity("goodput", "rag")
    failed = Judged(q, 0.05, None, Verdict.FAIL, 2, rate_rows=rows)
    assert failing_rates(failed) == rows and failing_rates(Judged(q, 0.05, None, Verdict.PASS, 2, rate_rows=rows)) == ()
    text = summary_markdown([failed], GateContext("apart", "base", "cand", 0, 0.95))
    assert "| goodput[rag] | 2 | goodput (req/s) | 1.9 | 1.52 | 0.800× | yes |" in text
    assert "| goodput[rag] | 4 | goodput (req/s) | 3.8 | — | — |  |" in text
