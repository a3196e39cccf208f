"""`vllm-speedtest gate` on two rate sweeps in this process (folders written directly, no server): a true 20 %
goodput regression with tight intervals fails at 5 % and passes at 30 %, measured apart or in interleaved rounds,
identical sweeps never fail, and bad input is one line with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.gate_folders import Step, write_gate_run, write_gate_sweep
from toolkit.cli.entry import main

BASE: dict[float, Step] = {r: (0.95 * r, 0.95, 0.94, 0.96) for r in (2.0, 4.0, 8.0)}
CAND: dict[float, Step] = {r: (0.76 * r, 0.76, 0.75, 0.77) for r in (2.0, 4.0, 8.0)}  # 20 % fewer meet the SLO


def gate(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    status = main(["gate", *args])
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err


def test_a_true_20_percent_goodput_regression_fails_at_5_and_passes_at_30(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = write_gate_sweep(tmp_path / "a", BASE, (8.0, 10.0)), write_gate_sweep(tmp_path / "b", CAND, (6.0, 8.0))
    junit, summary, document = tmp_path / "gate.xml", tmp_path / "gate.md", tmp_path / "gate.json"
    status, lines, _ = gate([str(a), str(b), "--max-regression", "goodput=5%", "--between-runs", "10%", "--junit",
                             str(junit), "--summary", str(summary), "--json", str(document)], capsys)  # fmt: skip
    # each rate ln 0.8 ± 0.0086498; three rates: se 0.0049940, 95 %: 0.8 e^∓0.0097881 = [0.7922, 0.8079], ×÷ 1.1
    assert (status, lines) == (1, ["FAIL goodput: 0.800× [0.720, 0.889] over 3 common rates, allowed −5 %; "
                                   "measured apart, widened by ±10 % between runs"])  # fmt: skip
    case = ElementTree.parse(junit).getroot().find("testsuite/testcase")
    assert case is not None and case.get("name") == "goodput" and case.find("failure").get("message") == lines[0]  # type: ignore[union-attr]
    assert (
        "| FAIL | goodput | 0.800× | [0.720, 0.889] | −5 % (0.950×) | 3 | over 3 common rates; " in summary.read_text()
    )
    saved = json.loads(document.read_text())["quantities"][0]
    assert (saved["name"], saved["cells"], saved["basis"], saved["line"]) == ("goodput", 3, "over 3 common rates",
                                                                              lines[0])  # fmt: skip
    status, lines, _ = gate([str(a), str(b), "--max-regression", "goodput=30%", "--between-runs", "10%"], capsys)
    assert (status, lines) == (0, ["PASS goodput: 0.800× [0.720, 0.889] over 3 common rates, allowed −30 %; "
                                   "measured apart, widened by ±10 % between runs"])  # fmt: skip


def test_identical_sweeps_never_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = write_gate_sweep(tmp_path / "a", BASE, (8.0, 10.0)), write_gate_sweep(tmp_path / "b", BASE, (8.0, 10.0))
    status, lines, _ = gate([str(a), str(b), "--max-regression", "3%", "--between-runs", "10%"], capsys)
    # a bare limit gates both rate quantities (no decode cell here): 97.5 % each, z 2.2414, se √6 · 0.0053991 / 3
    assert (status, lines) == (3, [
        "INCONCLUSIVE goodput: 1.000× [0.900, 1.111] over 3 common rates, allowed −3 %; measured apart, widened by "
        "±10 % between runs",
        "INCONCLUSIVE highest rate meeting the SLO: 1.000× [0.727, 1.375] from the brackets [8, 10] and [8, 10] "
        "req/s, allowed −3 %; measured apart, widened by ±10 % between runs",
    ])  # fmt: skip
    status, lines, _ = gate([str(a), str(b), "--max-regression", "20%", "--between-runs", "10%"], capsys)
    assert status == 3 and lines[0].startswith("PASS goodput: 1.000× [0.900, 1.111]")  # 0.900 ≥ 0.80


@pytest.mark.parametrize(
    ("candidate", "limit", "said"),
    [
        ("matrix", "goodput=5%", "error: max-regression: goodput: {b} holds no rate sweep (no rates/sweep.json)"),
        ("no-slo", "slo_rate=5%", "error: max-regression: slo_rate: {b}'s rate sweep has no SLO (slo_ttft_ms, "),
        (
            "other-rates",
            "goodput=5%",
            "error: gate: the rate sweeps share no offered rate with a goodput (2, 4, 8 "
            "and 3 req/s); nothing to compare",
        ),
    ],
)
def test_bad_rate_input_is_one_line_and_exit_2(
    candidate: str, limit: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_gate_sweep(tmp_path / "a", BASE, (8.0, 10.0))
    b = tmp_path / candidate
    if candidate == "matrix":
        write_gate_run(b, {1: (100.0, 100.0)})
    else:
        write_gate_sweep(b, {3.0: BASE[2.0]} if candidate == "other-rates" else BASE, None,
                         slo_ttft_ms=None if candidate == "no-slo" else 200.0)  # fmt: skip
    status, lines, err = gate([str(a), str(b), "--max-regression", limit], capsys)
    assert status == 2 and lines == [] and err.startswith(said.format(b=b)) and err.count("\n") == 1, err


def test_goodput_in_interleaved_rounds_is_paired_over_the_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch with `interleave: 4` and a `rate_sweep:` block: a sweep in each round's run folder. The rounds'
    goodput ratios 0.80, 0.78, 0.82, 0.80, paired: no between-run allowance needed."""
    for number, ratio in enumerate((0.80, 0.78, 0.82, 0.80), 1):
        write_gate_sweep(tmp_path / f"base-round{number}", BASE, (8.0, 10.0))
        f = 0.95 * ratio
        write_gate_sweep(tmp_path / f"cand-round{number}", {r: (f * r, f, f - 0.01, f + 0.01) for r in BASE}, None)
    # log ratios' mean −0.22330, sd 0.020417 over 4 rounds, se 0.010209; t(3, 97.5 %) = 3.1824: e^∓0.032488
    # around 0.79989 = [0.7743, 0.8263]
    status, lines, _ = gate([str(tmp_path), "--max-regression", "goodput=5%"], capsys)
    assert (status, lines) == (1, ["FAIL goodput: 0.800× [0.774, 0.826] over 3 common rates, 4 rounds paired, "
                                   "allowed −5 %"])  # fmt: skip
    status, lines, _ = gate([str(tmp_path), "--max-regression", "goodput=30%"], capsys)
    assert status == 0 and lines[0].startswith("PASS goodput: 0.800× [0.774, 0.826]")
    # a bare limit gates goodput, not the brackets; naming them is one line
    status, lines, _ = gate([str(tmp_path), "--max-regression", "3%"], capsys)
    assert status == 1 and len(lines) == 1 and lines[0].startswith("FAIL goodput: 0.800×")
    status, lines, err = gate([str(tmp_path), "--max-regression", "slo_rate=5%"], capsys)
    assert (status, lines) == (2, []) and err.startswith("error: max-regression: slo_rate: not gated in an "
                                                         "interleaved folder") and err.count("\n") == 1  # fmt: skip
