"""`vllm-speedtest gate` in this process: known truth over a real network (two fault servers, the candidate's
token step 15 % longer: a true 13 % regression, 0.870×, interleaved), an A/A that never fails, folders measured
apart, CI outputs, and bad input as one line with exit status 2.

The steps are 20 and 23 ms and the rounds 6, not the issue's 10 and 11.5 ms over 4 rounds: on a loaded machine
(the suite's workers on 2 cores) the fault server's 10 ms timers lose precision unevenly (0.79–0.82× measured under
load, which makes a 20 % limit inconclusive), and one disturbed round of 4 widens t(3) past the 20 % limit now and
then; 20 and 23 ms over 6 rounds gave the right verdict in 8 of 8 lines under load. The issue's exact pair and its
20 A/A gates are benchmarks/gate_aa.py's (too slow for a test; benchmarks/README.md has the counts)."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import pandas as pd
import pytest

from tests.faultserver import FaultServer
from tests.gate_folders import write_gate_run
from tests.tiny_params import tiny_params
from toolkit.batch.interleave import run_interleaved
from toolkit.cli.entry import main
from toolkit.method.spread import t_quantile
from toolkit.params import make_params
from toolkit.results.store import RESULTS_FILE, write_json_atomic

KEY_ENV = "GATE_TEST_KEY"
STEP_S, SLOWER_STEP_S = 0.020, 0.023
COMMON = tiny_params(duration_s=0.5, max_output=64, api_key_env=KEY_ENV)


def interleaved_pair(out: Path, intervals_s: tuple[float, float], rounds: int) -> Path:
    """Two fault servers streaming a token every `intervals_s` (baseline, candidate), measured interleaved."""
    with FaultServer(token_interval_s=intervals_s[0]) as a, FaultServer(token_interval_s=intervals_s[1]) as b:
        params = {
            label: make_params({**COMMON, "base_url": server.base_url, "run_label": label})
            for label, server in (("base", a), ("cand", b))
        }
        run_interleaved(params, rounds, out, say=lambda _: None)
    return out


@pytest.fixture(scope="module")
def regressed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 ms against 23 ms a token: a true 13 % per-request regression (0.870×), 6 rounds."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(KEY_ENV, raising=False)
        return interleaved_pair(tmp_path_factory.mktemp("regressed"), (STEP_S, SLOWER_STEP_S), rounds=6)


def gate(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    status = main(["gate", *args])
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err


def test_a_true_13_percent_regression_fails_at_5_and_passes_at_20(
    regressed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    step = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    junit, summary, document = tmp_path / "gate.xml", tmp_path / "gate.md", tmp_path / "gate.json"
    status, lines, _ = gate([str(regressed), "--max-regression", "5%", "--junit", str(junit), "--summary",
                             str(summary), "--json", str(document)], capsys)  # fmt: skip
    assert status == 1, lines
    assert lines[1].startswith("FAIL decode per-request tok/s: ") and not lines[0].startswith("PASS"), lines
    ratio = float(lines[1].split(": ")[1].split("×")[0])
    assert 0.80 < ratio < 0.92 and lines[1].endswith("], allowed −5 %")  # 20 / 23 = 0.870
    cases = ElementTree.parse(junit).getroot().findall("testsuite/testcase")
    assert cases[1].find("failure").get("message") == lines[1]  # type: ignore[union-attr]
    text = summary.read_text()
    assert "**FAIL** (exit 1): " in text and "## Cells that drove a failure" in text
    assert step.read_text().strip() == text.strip()
    saved = json.loads(document.read_text())
    assert saved["exit_status"] == 1 and saved["design"] == "interleaved" and saved["rounds"] == 6
    status, lines, _ = gate([str(regressed), "--max-regression", "20%"], capsys)
    assert status == 0, lines
    assert [line.split(":")[0] for line in lines] == ["PASS decode total tok/s", "PASS decode per-request tok/s"]
    status, lines, _ = gate([str(regressed), "--max-regression", "tpot_ms=5%"], capsys)  # TPOT, lower is better
    assert status == 1 and lines[0].startswith("FAIL decode TPOT: 1.1") and lines[0].endswith("allowed +5 %")


def test_a_plan_from_the_interleaved_rounds(regressed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", "plan", str(regressed), "--detect", "3%,10%"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gate plan from cand / base, interleaved: rounds A B B A")
    assert "decode total tok/s: a cell ±" in out and " s around each) over 1 cell; between rounds" in out
    assert "(6 interleaved rounds)" in out
    assert "  detect 3 %: " in out and "  detect 10 %: " in out and "interleaved rounds of " in out


def test_identical_servers_do_not_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.delenv(KEY_ENV, raising=False)
    folder = interleaved_pair(tmp_path, (STEP_S, STEP_S), rounds=4)
    status, lines, _ = gate([str(folder), "--max-regression", "3%"], capsys)
    assert status in (0, 3), lines
    assert not any(line.startswith("FAIL") for line in lines)
    status, _, _ = gate([str(folder), "--max-regression", "3%", "--inconclusive", "pass"], capsys)
    assert status == 0


def test_folders_measured_apart_need_a_between_run_allowance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_gate_run(tmp_path / "a", {1: (100.0, 100.0), 2: (190.0, 95.0)}, url="http://10.0.0.1:8000")
    b = write_gate_run(tmp_path / "b", {1: (80.0, 80.0), 2: (152.0, 76.0)}, url="http://10.0.0.2:8000")
    status, lines, _ = gate([str(a), str(b), "--max-regression", "3%"], capsys)
    assert status == 3 and lines[0].startswith("INCONCLUSIVE decode total tok/s: 0.800× [")
    assert (
        "measured apart: the machine's change between the runs is in no interval; to settle it, measure them "
        "interleaved: vllm-speedtest interleave --a-url http://10.0.0.1:8000 --b-url http://10.0.0.2:8000" in lines[0]
    )
    status, lines, _ = gate([str(a), str(b), "--max-regression", "3%", "--between-runs", "10%"], capsys)
    assert status == 1 and lines[0].endswith("allowed −3 %; measured apart, widened by ±10 % between runs")
    status, lines, _ = gate([str(a), str(a), "--max-regression", "3%", "--between-runs", "10%"], capsys)
    assert status == 3  # the same run twice: 1.00×, but ±10 % between runs straddles −3 %


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--max-regression", "3"], "error: max-regression: '3' is not a percentage above 0; write it with %"),
        (["--max-regression", "−5 %"], "error: max-regression: '−5 %' is not a percentage above 0"),
        (["--max-regression", "speed=3%"], "error: max-regression: unknown quantity 'speed'; allowed: "),
        (["--max-regression", "3%", "--between-runs", "ten"], "error: between-runs: 'ten' is not a percentage"),
    ],
)
def test_bad_limits_are_one_line_and_exit_2(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = write_gate_run(tmp_path / "a", {1: (100.0, 100.0)}), write_gate_run(tmp_path / "b", {1: (100.0, 100.0)})
    status, lines, err = gate([str(a), str(b), *args], capsys)
    assert status == 2 and lines == [] and err.startswith(said) and err.count("\n") == 1


def test_a_plan_from_one_run_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two cells ±2 % (standard error) in 10 s windows, nothing measured between rounds: one round's variance
    2 × 0.02² / 2 = 0.0004 at 10 s; to detect 10 % (δ = 0.1053605) 4 rounds suffice (the least); 3 % needs
    (t(R-1, 98.75 %) + t(R-1, 80 %)) √(0.0004 / R) <= 0.0304592: 7 rounds at 10 s (0.02929; 6: 0.03334)."""
    run = write_gate_run(tmp_path / "run", {1: (100.0, 100.0), 2: (190.0, 95.0)})
    frame = pd.read_json(run / RESULTS_FILE, lines=True)
    assert list(frame["total_tok_s_ci"] / frame["total_tok_s"]) == pytest.approx([0.02 * t_quantile(1.5)] * 2)
    assert main(["gate", "plan", str(run), "--detect", "3%,10%"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == (
        "decode total tok/s: a cell ±2.0 % (standard error) in 10 s windows (+0 s around each) over 2 cells; "
        "between rounds not measured (one round, no control: the plan is a lower bound)"
    )
    assert lines[2].startswith("  detect 3 %: 7 interleaved rounds of 10 s windows (at the 10 s measured: 7 rounds)")
    assert lines[3].startswith("  detect 10 %: 4 interleaved rounds of 10 s windows")


def test_bad_folders_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_gate_run(tmp_path / "a", {1: (100.0, 100.0)})
    other = write_gate_run(tmp_path / "other", {4: (300.0, 75.0)})
    newer = write_gate_run(tmp_path / "newer", {1: (100.0, 100.0)}, schema=99)
    cases = [
        ([str(a), str(other)], "no decode cell in common"),
        ([str(a), str(newer)], "schema_version 99 is newer than this toolkit reads"),
        ([str(a), str(tmp_path / "missing")], "missing: not a folder"),
        ([str(tmp_path)], "not an interleaved comparison"),
    ]
    for folders, said in cases:
        status, lines, err = gate([*folders, "--max-regression", "3%"], capsys)
        assert status == 2 and lines == [] and said in err and err.count("\n") == 1, (folders, err)


def test_an_interleaved_folders_sides_and_their_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A batch's folder: configurations in batch.json's order (round 1 first measured is the baseline); named
    with --baseline / --candidate; three configurations need the candidate named."""
    steps = {"fast": 100.0, "slow": 80.0, "mid": 90.0}
    for label, speed in steps.items():
        for r in (1, 2, 3, 4):
            write_gate_run(tmp_path / f"{label}-round{r}", {1: (speed * (1 + r / 100), speed * (1 + r / 100))})
    order = [f"{label}-round{r}" for r in (1, 2, 3, 4) for label in ("slow", "fast", "mid")]
    write_json_atomic(tmp_path / "batch.json", {"labels": order, "variants": {}})
    status, lines, err = gate([str(tmp_path), "--max-regression", "5%"], capsys)
    assert status == 2 and "holds 3 configurations; name the candidate (--candidate): fast, mid" in err
    status, lines, _ = gate([str(tmp_path), "--candidate", "fast", "--max-regression", "5%"], capsys)
    assert status == 0 and lines[0].startswith("PASS decode total tok/s: 1.250× [1.250, 1.250]")  # fast / slow
    status, lines, _ = gate([str(tmp_path), "--baseline", "fast", "--candidate", "slow", "--max-regression", "5%"],
                            capsys)  # fmt: skip
    assert status == 1 and lines[0].startswith("FAIL decode total tok/s: 0.800× [0.800, 0.800]")
    status, _, err = gate([str(tmp_path), "--candidate", "quick", "--max-regression", "5%"], capsys)
    assert status == 2 and "'quick' is not a configuration of" in err and "allowed: slow, fast, mid" in err
    (tmp_path / "slow-round4" / RESULTS_FILE).write_text("")  # a failed round: its folder, no results
    status, lines, _ = gate([str(tmp_path), "--candidate", "fast", "--max-regression", "5%", "--json",
                             str(tmp_path / "gate.json")], capsys)  # fmt: skip
    assert status == 0 and json.loads((tmp_path / "gate.json").read_text())["rounds"] == 3
    for r in (2, 3):
        (tmp_path / f"slow-round{r}" / RESULTS_FILE).write_text("")
    status, _, err = gate([str(tmp_path), "--candidate", "fast", "--max-regression", "5%"], capsys)
    assert status == 2 and "slow and fast have results in 1 common round(s); a paired gate needs two or more" in err
