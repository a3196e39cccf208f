"""Interleaving with power: even rounds only, the order-adjusted estimate (a crossover's period effect) and the
minimum detectable effect an interleaved report prints, against hand computations."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from toolkit.batch.interleave import run_interleaved
from toolkit.batch.sweep import SweepError, expand
from toolkit.cli.entry import main
from toolkit.method.gate_plan import rounds_needed
from toolkit.method.paired import (
    a_first,
    minimum_detectable,
    order_adjusted_ratio,
    paired_ratio,
    round_log_sd,
    rounds_problem,
)
from toolkit.params import ParamsError, make_params
from toolkit.reports.interleaved import interleaved_markdown, overall, overall_design, paired_table

T2 = 4.302652729749462  # Student's t, 2 degrees of freedom, 97.5 %
ODD = "an odd count leaves the order unbalanced: one side goes first once more, and a drift from run to run biases"


def trended(
    rounds: int, ratio: float, per_slot: float, noise: dict[int, float] | None = None
) -> tuple[list[float], list[float]]:
    """A and B over `rounds` alternating rounds (A B, B A, …) on a machine whose speed changes by `per_slot` from
    one run to the next; B is `ratio` times A, times `noise[r]` in round r."""
    a: list[float] = []
    b: list[float] = []
    for r in range(1, rounds + 1):
        first, second = (1 + per_slot) ** (2 * r - 2), (1 + per_slot) ** (2 * r - 1)
        a_speed, b_speed = (first, second) if a_first(r) else (second, first)
        a.append(100.0 * a_speed)
        b.append(100.0 * ratio * b_speed * (noise or {}).get(r, 1.0))
    return a, b


def test_four_rounds_recover_the_period_effect_and_the_adjusted_interval_leaves_the_order_out() -> None:
    """B 10 % faster; the machine slows 4 % from each run to the next; B reads 2 % high in round 3 and 1 % low in
    round 4. By hand: the A-first rounds' log ratios are ln 1.1 + ln 0.96 (+ ln 1.02), the B-first rounds'
    ln 1.1 - ln 0.96 (+ ln 0.99); the adjusted log ratio is their means' mean, ln 1.1 + (ln 1.02 + ln 0.99) / 4,
    the period effect half their difference, ln 0.96 + (ln 1.02 - ln 0.99) / 4; the residuals are ±ln 1.02 / 2 and
    ±ln 0.99 / 2, so s² = (ln² 1.02 + ln² 0.99) / 2 / 2 and se = sqrt(s² / 4 (1/2 + 1/2)) = s / 2."""
    a, b = trended(4, 1.1, -0.04, {3: 1.02, 4: 0.99})
    found = order_adjusted_ratio(a, b, [a_first(r) for r in range(1, 5)])
    assert found is not None and found.orders == (2, 2) and found.ratio.interval.dof == 2
    assert found.ratio.interval.value == pytest.approx(1.1 * (1.02 * 0.99) ** 0.25) == pytest.approx(1.102686, abs=1e-6)
    assert found.period == pytest.approx(0.96 * (1.02 / 0.99) ** 0.25) == pytest.approx(0.967192, abs=1e-6)
    s = math.sqrt((math.log(1.02) ** 2 + math.log(0.99) ** 2) / 4)
    assert found.ratio.interval.half_width == pytest.approx(found.ratio.interval.value * math.expm1(T2 * s / 2))
    plain = paired_ratio(a, b)
    assert plain is not None
    assert plain.interval.value == pytest.approx(found.ratio.interval.value)  # balanced: the same point
    assert plain.interval.half_width > 2 * found.ratio.interval.half_width  # the order's ±4 % is the plain's noise
    assert found.ratio.p_value < 0.01 < plain.p_value


def test_with_an_odd_count_the_plain_ratio_is_biased_by_the_trend_and_the_adjusted_one_is_not() -> None:
    """Three rounds (A B, B A, A B) on a machine slowing 5 % a run, B 10 % faster, no other noise: the rounds' log
    ratios are ln 1.1 + ln 0.95 twice and ln 1.1 - ln 0.95 once, so the plain mean is off by a third of the
    per-run change (1.1 × 0.95^(1/3) = 1.08135); the order-adjusted one is 1.1 and the period effect 0.95."""
    a, b = trended(3, 1.1, -0.05)
    plain = paired_ratio(a, b)
    found = order_adjusted_ratio(a, b, [True, False, True])
    assert plain is not None and plain.interval.value == pytest.approx(1.1 * 0.95 ** (1 / 3)) == pytest.approx(
        1.08135, abs=1e-5
    )
    assert found is not None and found.ratio.interval.value == pytest.approx(1.1)
    assert found.period == pytest.approx(0.95) and found.orders == (2, 1) and found.ratio.interval.dof == 1
    assert found.ratio.interval.half_width == pytest.approx(0.0, abs=1e-9)
    even = paired_ratio(*trended(4, 1.1, -0.05))
    assert even is not None and even.interval.value == pytest.approx(1.1)  # four rounds: the trend cancels


def test_the_order_adjusted_ratio_needs_both_orders_and_three_rounds() -> None:
    assert order_adjusted_ratio([100.0, 100.0], [110.0, 111.0], [True, False]) is None  # no residual dof
    assert order_adjusted_ratio([100.0] * 3, [110.0, 111.0, 109.0], [True] * 3) is None  # one order only
    assert order_adjusted_ratio([100.0, math.nan, 100.0, 100.0], [110.0] * 4, [True, False, True, False]) is not None
    assert order_adjusted_ratio([100.0, math.nan, 100.0], [110.0] * 3, [True, False, True]) is None  # B-first gone


def test_the_minimum_detectable_effect_by_hand_and_as_the_inverse_of_the_gate_plan() -> None:
    """The docs' noise, a per-round log-ratio sd of 0.189 over 4 rounds: δ = (t(3, 97.5 %) + t(3, 80 %)) 0.189 / 2
    = (3.18245 + 0.97847) × 0.0945 = 0.39321, e^δ - 1 = 48.17 %; at 10 rounds (2.26216 + 0.88335) 0.189 / √10 =
    0.18800, 20.68 %. 10 % needs 33 rounds (34 even), 5 % 120."""
    four = minimum_detectable(0.189, 4)
    assert four.effect == pytest.approx(100 * math.expm1((3.1824463 + 0.9784723) * 0.189 / 2))
    assert four.effect == pytest.approx(48.17, abs=0.01) and four.rounds == 4 and four.sd == 0.189
    assert minimum_detectable(0.189, 10).effect == pytest.approx(20.68, abs=0.01)
    assert four.needed == ((0.05, 120), (0.10, 34))
    delta = math.log1p(four.effect / 100)  # exactly what 4 rounds resolve: a hair more is enough, a hair less not
    assert rounds_needed(0.189**2, delta * 1.001, 0.95) == 4 and rounds_needed(0.189**2, delta * 0.999, 0.95) == 5
    assert minimum_detectable(0.0, 4).effect == 0.0 and minimum_detectable(0.0, 4).needed == ((0.05, 2), (0.10, 2))
    assert minimum_detectable(5.0, 4).needed == ((0.05, None), (0.10, None))  # more than 1,000 rounds
    with pytest.raises(ValueError, match="rounds 1"):
        minimum_detectable(0.1, 1)
    assert round_log_sd([100.0, 100.0], [110.0, 121.0]) == pytest.approx(math.log(1.1) / math.sqrt(2))
    assert round_log_sd([100.0], [110.0]) is None


def frame(total: float, per_request: float, ttft: float) -> pd.DataFrame:
    rows = [{"phase": "decode", "context_tokens": 64, "context": "64", "concurrency": n, "status": "Valid",
             "total_tok_s": total * n, "per_request_tok_s": per_request, "ttft_ms": ttft, "disturbed": None}
            for n in (1, 2)]  # fmt: skip
    return pd.DataFrame(rows)


def test_an_aa_of_four_rounds_prints_its_minimum_detectable_effect_and_marks_nothing() -> None:
    """A against itself with a little noise per round: no cell marked, and the report says what it could have
    seen (the rounds' spread of total tok/s: log ratios ln 1.01, ln 0.99, ln 1.005, ln 0.992)."""
    noise = [1.01, 0.99, 1.005, 0.992]
    a = {r: frame(100, 50, 80) for r in range(1, 5)}
    b = {r: frame(100 * n, 50 * n, 80 / n) for r, n in enumerate(noise, 1)}
    table = paired_table(a, b)
    assert not any(table[f"{q}_significant"].any() for q in ("total_tok_s", "per_request_tok_s", "ttft_ms"))
    design = overall_design(a, b)
    sd = math.sqrt(sum((math.log(n) - sum(map(math.log, noise)) / 4) ** 2 for n in noise) / 3)
    assert design["total_tok_s"].detectable is not None
    assert design["total_tok_s"].detectable.effect == pytest.approx(minimum_detectable(sd, 4).effect)
    text = interleaved_markdown(table, ["A", "B"], 4, overall(a, b), design)
    line = next(x for x in text.split("\n\n") if x.startswith("Minimum detectable effect at 80 % power"))
    effect = minimum_detectable(sd, 4).effect
    assert f"this run's round-to-round spread, 4 rounds): Total tok/s ±{effect:.1f} % (5 % needs about" in line
    assert text.count(" n.s. |") == 6  # both cells, every quantity: not significant
    assert "Order-adjusted, B / A (" in text and "2 degrees of freedom): Total tok/s 0.999× ±0.01, a round" in text


def test_the_report_prints_the_order_adjusted_ratio_beside_the_plain_one() -> None:
    """Four rounds, B 20 % faster, the machine 3 % slower from each run to the next."""
    speed = {r: (0.97 ** (2 * r - 2), 0.97 ** (2 * r - 1)) for r in range(1, 5)}
    a = {r: frame(100 * s[0 if a_first(r) else 1], 50, 80) for r, s in speed.items()}
    b = {r: frame(120 * s[1 if a_first(r) else 0], 60, 80) for r, s in speed.items()}
    design = overall_design(a, b)
    adjusted = design["total_tok_s"].adjusted
    assert adjusted is not None and adjusted.period == pytest.approx(0.97) and adjusted.orders == (2, 2)
    text = interleaved_markdown(paired_table(a, b), ["A", "B"], 4, overall(a, b), design)
    assert (
        "Overall, B / A (geometric mean over the cells, its interval over the rounds, 95 %): Total tok/s 1.20× ±"
        in (text)
    )
    assert "Total tok/s 1.20× ±0.00, a round's second run 0.970× its first" in text
    assert "Total tok/s 1.20× ±0.00 (2 cells)" not in text  # the plain interval holds the order's ±3 %
    two = interleaved_markdown(paired_table(a, b), ["A", "B"], 2, overall(a, b), overall_design(
        {r: a[r] for r in (1, 2)}, {r: b[r] for r in (1, 2)}))  # fmt: skip
    assert "Order-adjusted: needs three rounds or more" in two and "2 rounds): Total tok/s ±" in two


@pytest.mark.parametrize("rounds", [3, 5])
def test_an_odd_interleave_is_refused_in_the_sweep(rounds: int) -> None:
    with pytest.raises(SweepError, match=rf"^sweep: interleave: {rounds}; allowed: true \(4 rounds\) or an even "):
        expand({"variants": [{"label": "a"}, {"label": "b"}], "interleave": rounds})
    assert rounds_problem(rounds) is not None and ODD in str(rounds_problem(rounds))
    assert rounds_problem(4) is None and rounds_problem(2) is None
    assert [v.round for v in expand({"variants": [{"label": "a"}, {"label": "b"}], "interleave": True})] == [
        1, 1, 2, 2, 3, 3, 4, 4]  # fmt: skip


def test_odd_rounds_are_refused_by_the_command_and_run_interleaved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    status = main(["interleave", "--a-url", "http://127.0.0.1:9", "--b-url", "http://127.0.0.1:9", "--rounds", "3",
                   "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith("error: rounds: 3; allowed: an even number of rounds, 2 or more (") and ODD in err
    assert not out.exists()  # refused before anything was measured or written
    params = {label: make_params({"base_url": "http://127.0.0.1:9", "run_label": label}) for label in ("A", "B")}
    with pytest.raises(ParamsError, match=r"^rounds: 5; allowed: an even number"):
        run_interleaved(params, 5, out, say=lambda _: None)
    assert not out.exists()


@pytest.mark.parametrize(("field", "b_value", "said"), [
    ("response_format", "json_object", "response_format differ (None and 'json_object')"),
    ("concurrency", [1, 2], "concurrency differ ([1, 4] and [1, 2])"),
    ("max_output", 64, "max_output differ (4096 and 64)"),
])  # fmt: skip
def test_run_interleaved_refuses_sides_that_send_different_requests(
    tmp_path: Path, field: str, b_value: object, said: str
) -> None:
    """Only the servers may differ between the sides: a paired ratio of different requests would be read as the
    servers' difference. Refused in one line before anything is measured."""
    base = {"base_url": "http://127.0.0.1:9", "concurrency": [1, 4]}
    params = {"A": make_params({**base, "run_label": "A"}),
              "B": make_params({**base, field: b_value, "run_label": "B"})}  # fmt: skip
    out = tmp_path / "out"
    with pytest.raises(ParamsError) as caught:
        run_interleaved(params, 2, out, say=lambda _: None)
    assert str(caught.value) == (f"interleave: the sides' {said}; a paired comparison sends the same requests to "
                                 "both servers")  # fmt: skip
    assert not out.exists()
