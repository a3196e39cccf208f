"""`vllm-speedtest gate` on two traffic-class rate sweeps in this process (folders written directly, no server):
each class judged against its own SLO beside the mix's total, all in one family; a class whose goodput truly falls
20 % fails, named, with the rates behind it; identical sweeps never fail; sweeps of other classes are one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gate_folders import ClassSteps, write_gate_class_sweep, write_gate_sweep
from toolkit.cli.entry import main

LEVELS = {"chat": {"slo_ttft_ms": 200.0}, "rag": {"slo_e2e_ms": 5000.0}}
MEETS, WORSE = (0.95, 0.94, 0.96), (0.76, 0.75, 0.77)  # a class's SLO fraction and its 95 % interval
FAILS = (0.5, 0.45, 0.55)


def step(rate: float, chat: tuple[float, float, float], rag: tuple[float, float, float]) -> ClassSteps:
    """One step: each class drew half the arrivals, its goodput its fraction of them."""
    return [(rate, {"chat": (chat[0] * rate / 2, *chat), "rag": (rag[0] * rate / 2, *rag)})]


BASE = [s for r in (2.0, 4.0, 8.0) for s in step(r, MEETS, MEETS)]
CAND = [s for r in (2.0, 4.0, 8.0) for s in step(r, MEETS, WORSE)]  # rag: 20 % fewer of its requests meet its SLO


def gate(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    status = main(["gate", *args])
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err


def test_one_class_whose_goodput_falls_20_percent_fails_named_with_its_rates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_gate_class_sweep(tmp_path / "a", BASE, LEVELS, (8.0, 10.0))
    b = write_gate_class_sweep(tmp_path / "b", CAND, LEVELS, (8.0, 10.0))
    summary, document = tmp_path / "gate.md", tmp_path / "gate.json"
    status, lines, _ = gate([str(a), str(b), "--max-regression", "goodput=5%", "--between-runs", "10%", "--summary",
                             str(summary), "--json", str(document)], capsys)  # fmt: skip
    # three quantities in the family: each interval at 1 - 5 %/3, z = 2.3940. rag as tests/component/test_gate_rates:
    # se 0.0049940 over 3 rates, 0.8 e^∓0.011956 = [0.79049, 0.80963], ×÷ 1.1 = [0.71863, 0.89058].
    # chat: each rate √2 · 0.0053991; 3 rates 0.0044083; e^∓0.010554 ×÷ 1.1 = [0.89955, 1.11167].
    # The total, 0.95 r against 0.855 r: each step's classes' half-widths 0.01 · r/2 in quadrature, 0.0070711 r:
    # ln(0.95 / 0.94293) / 1.96 = 0.0038118 and ln(0.855 / 0.84793) / 1.96 = 0.0042371, 3 rates 0.0032906:
    # 0.9 e^∓0.0078775 ×÷ 1.1 = [0.81176, 0.99783].
    assert (status, lines) == (1, [
        "INCONCLUSIVE goodput: 0.900× [0.812, 0.998] over 3 common rates, all classes, allowed −5 %; measured apart, "
        "widened by ±10 % between runs",
        "INCONCLUSIVE goodput[chat]: 1.000× [0.900, 1.112] over 3 common rates, allowed −5 %; measured apart, widened "
        "by ±10 % between runs",
        "FAIL goodput[rag]: 0.800× [0.719, 0.891] over 3 common rates, allowed −5 %; measured apart, widened by ±10 % "
        "between runs",
    ])  # fmt: skip
    text = summary.read_text()
    assert "each interval at 98.33 % (95 % over the 3 quantities gated together, Bonferroni)" in text
    assert "## Rates behind a failure" in text
    for rate, base, cand in (("2", "0.95", "0.76"), ("4", "1.9", "1.52"), ("8", "3.8", "3.04")):
        assert f"| goodput[rag] | {rate} | goodput (req/s) | {base} | {cand} | 0.800× | yes |" in text
    assert "| goodput[chat] |" not in text.split("## Rates behind a failure")[1]  # only the failed quantity's
    saved = {q["name"]: q for q in json.loads(document.read_text())["quantities"]}
    assert list(saved) == ["goodput", "goodput[chat]", "goodput[rag]"]
    assert saved["goodput[rag]"]["verdict"] == "fail" and saved["goodput[chat]"]["failing_rates"] == []
    rows = saved["goodput[rag]"]["failing_rates"]
    assert [(r["rate"], r["value"], r["baseline"], r["candidate"]) for r in rows] == [
        (2.0, "goodput", 0.95, 0.76), (4.0, "goodput", 1.9, 1.52), (8.0, "goodput", 3.8, 3.04)]  # fmt: skip
    assert all(r["ratio"] == pytest.approx(0.8) for r in rows)
    # a class's own limit: rag allowed 30 % passes, the others keep goodput's 5 %
    status, lines, _ = gate([str(a), str(b), "--max-regression", "goodput=5%,goodput[rag]=30%", "--between-runs",
                             "10%"], capsys)  # fmt: skip
    assert status == 3 and lines[2].startswith("PASS goodput[rag]: 0.800× [0.719, 0.891]") and "−30 %" in lines[2]


def searched(rag_at_4: tuple[float, float, float]) -> ClassSteps:
    """Two steps at each of 2, 4 and 8 req/s (a meeting rate is confirmed on two), one at 16 where both classes
    fail; rag's fraction at 4 and 8 as given."""
    steps = [s for r in (2.0, 2.0) for s in step(r, MEETS, MEETS)]
    steps += [s for r in (4.0, 4.0, 8.0, 8.0) for s in step(r, MEETS, rag_at_4)]
    return steps + step(16.0, FAILS, FAILS)


def test_identical_class_sweeps_never_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_gate_class_sweep(tmp_path / "a", searched(MEETS), LEVELS, (8.0, 16.0))
    b = write_gate_class_sweep(tmp_path / "b", searched(MEETS), LEVELS, (8.0, 16.0))
    for limit in ("1%", "3%", "10%", "50%"):
        for between in ("1%", "10%"):
            status, lines, _ = gate([str(a), str(b), "--max-regression", limit, "--between-runs", between], capsys)
            assert status in (0, 3) and len(lines) == 6 and not any(x.startswith("FAIL") for x in lines), lines
    # six quantities: the totals and each class's; each class's bracket from its own verdicts, [8, 16] req/s, whose
    # ratio lies in [8/16, 16/8], ×÷ 1.1: [0.455, 2.200] straddles even a 50 % limit
    assert [x.split(":")[0] for x in lines] == [
        "PASS goodput", "PASS goodput[chat]", "PASS goodput[rag]", "INCONCLUSIVE highest rate meeting the SLO",
        "INCONCLUSIVE highest rate meeting the SLO[chat]", "INCONCLUSIVE highest rate meeting the SLO[rag]",
    ]  # fmt: skip
    assert "1.000× [0.455, 2.200] from the brackets [8, 16] and [8, 16] req/s, allowed −50 %" in lines[5]


def test_a_class_whose_highest_rate_falls_fails_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_gate_class_sweep(tmp_path / "a", searched(MEETS), LEVELS, (8.0, 16.0))
    b = write_gate_class_sweep(tmp_path / "b", searched(WORSE), LEVELS, (2.0, 4.0))
    summary = tmp_path / "gate.md"
    status, lines, _ = gate([str(a), str(b), "--max-regression", "slo_rate=10%", "--between-runs", "10%",
                             "--summary", str(summary)], capsys)  # fmt: skip
    # rag: [8, 16] against [2, 4]: [2/16, 4/8] = [0.125, 0.5], ×÷ 1.1; chat's bracket is the baseline's
    assert status == 1 and lines[2] == (
        "FAIL highest rate meeting the SLO[rag]: 0.250× [0.114, 0.550] from the brackets [8, 16] and [2, 4] req/s, "
        "allowed −10 %; measured apart, widened by ±10 % between runs")  # fmt: skip
    assert lines[1].startswith("INCONCLUSIVE highest rate meeting the SLO[chat]: 1.000× [0.455, 2.200]")
    text = summary.read_text().split("## Rates behind a failure")[1]
    assert "| highest rate meeting the SLO[rag] | 4 | fraction meeting the SLO | 0.95 | 0.76 | 0.800× |  |" in text
    assert "| highest rate meeting the SLO[rag] | 2 | fraction meeting the SLO | 0.95 | 0.95 | 1.000× |  |" in text


@pytest.mark.parametrize(
    ("candidate", "limit", "said"),
    [
        ("other-classes", "goodput=5%", "error: gate: the rate sweeps' traffic classes differ (baseline: chat, rag; "
         "candidate: chat, code): each class is judged against its own SLO; gate sweeps of one set of classes"),
        ("other-classes", "3%", "error: gate: the rate sweeps' traffic classes differ (baseline: chat, rag; "),
        ("no-classes", "goodput=5%", "error: gate: the rate sweeps' traffic classes differ (baseline: chat, rag; "
         "candidate: none)"),
        ("other-slo", "goodput=5%", "error: gate: class rag was judged against different SLOs (end-to-end ≤ 5000 ms "
         "for 90 % of requests; end-to-end ≤ 9000 ms for 90 % of requests); judge both against one"),
        ("same", "goodput[code]=5%", "error: max-regression: goodput[code]: no class code in the rate sweeps "
         "(classes: chat, rag)"),
    ],
)  # fmt: skip
def test_sweeps_that_cannot_be_compared_are_one_line_and_exit_2(
    candidate: str, limit: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_gate_class_sweep(tmp_path / "a", BASE, LEVELS, None)
    b = tmp_path / candidate
    if candidate == "no-classes":
        write_gate_sweep(b, {r: (0.95 * r, *MEETS) for r in (2.0, 4.0, 8.0)}, None)
    else:
        levels = {"same": LEVELS, "other-slo": {**LEVELS, "rag": {"slo_e2e_ms": 9000.0}},
                  "other-classes": {"chat": LEVELS["chat"], "code": {"slo_tpot_ms": 50.0}}}[candidate]  # fmt: skip
        steps = [(rate, dict(zip(levels, figures.values(), strict=True))) for rate, figures in BASE]
        write_gate_class_sweep(b, steps, levels, None)
    status, lines, err = gate([str(a), str(b), "--max-regression", limit], capsys)
    assert status == 2 and lines == [] and err.startswith(said) and err.count("\n") == 1, err


def test_class_sweeps_in_interleaved_rounds_pair_each_class_over_the_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch with `interleave: 4` and a class `rate_sweep:`: rag's goodput ratio 0.800, 0.779, 0.821, 0.800 over the
    rounds, chat's 1 in each; each class paired over the rounds, no between-run allowance."""
    for number, rag in enumerate((0.76, 0.74, 0.78, 0.76), 1):
        fraction = (rag, rag - 0.01, rag + 0.01)
        write_gate_class_sweep(tmp_path / f"base-round{number}", BASE, LEVELS, (8.0, 10.0))
        cand = [s for r in (2.0, 4.0, 8.0) for s in step(r, MEETS, fraction)]
        write_gate_class_sweep(tmp_path / f"cand-round{number}", cand, LEVELS, (8.0, 10.0))
    status, lines, _ = gate([str(tmp_path), "--max-regression", "5%"], capsys)
    # rag: log ratios' mean −0.22332, sd 0.021493, se 0.010746; three quantities: t(3, 1 − 0.05/6) = 4.8567:
    # e^∓0.05219 around 0.79986 = [0.7592, 0.8427]
    assert status == 1 and lines[2] == ("FAIL goodput[rag]: 0.800× [0.759, 0.843] over 3 common rates, 4 rounds "
                                        "paired, allowed −5 %")  # fmt: skip
    assert lines[0].startswith("FAIL goodput: 0.900× [") and ", all classes, 4 rounds paired" in lines[0]
    assert lines[1].startswith("PASS goodput[chat]: 1.000×") and len(lines) == 3  # no bracket gated interleaved
