"""`import-results` and the reconciliation, on `vllm bench serve` output made against the embedded vLLM.

tests/fixtures/peers/vllm-bench-4rps.json: `vllm bench serve --save-result --save-detailed` at 4 req/s (Poisson),
24 requests of 64 prompt and 16 output tokens; toolkit-4rps/: `toolkit rates` at the same rate, lengths and count
against the same server (scripts/peer_fixtures.py made both); guidellm-4rps.json and aiperf-4rps/: the same
workload by GuideLLM and AIPerf (scripts/peer_fixtures_tools.py; tests/fixtures/peers/README.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.rate_folders import write_rate_sweep
from toolkit.base.errors import ParamsError, ResultsError
from toolkit.cli import main
from toolkit.folder_check import check_folder
from toolkit.method.goodput import summarize_step
from toolkit.method.multiplicity import adjusted_p_values
from toolkit.rates.imported import NO_LIMITS, import_results
from toolkit.reports.reconcile import NO_MATCH, reconciliation, reconciliation_markdown
from toolkit.results.peers.read import read_peer_result
from toolkit.results.rate_runs import load_rate_sweep, load_rate_sweeps

PEERS = Path(__file__).resolve().parents[1] / "fixtures" / "peers"
VLLM = PEERS / "vllm-bench-4rps.json"


@pytest.mark.parametrize("name", ["ttft_p50_ms", "tpot_p50_ms", "itl_p50_ms", "output_tok_s", "completed"])
def test_vllm_bench_figures_are_reproduced_from_its_own_request_data(name: str) -> None:
    step = read_peer_result(VLLM)
    reported, reproduced = step.reported[name], step.reproduced[name]
    assert reported is not None and reproduced is not None
    assert abs(reproduced / reported - 1) < 0.01, (name, reproduced, reported)


def test_the_records_hold_every_request_as_sent() -> None:
    step = read_peer_result(VLLM)
    data = json.loads(VLLM.read_text())
    records = step.records
    assert records is not None and len(records) == data["completed"] == 24
    assert step.source.startswith("vllm bench serve ") and step.offered_rate == 4.0 and step.model == "tiny-llama"
    assert records["error"].isna().all() and (records["output_tokens"] == 16).all()
    assert records["sent_s"].min() == 0.0
    assert all(len(times) == 16 for times in records["chunk_times_s"])  # 1 first token + 15 gaps


def test_import_writes_a_run_folder_our_readers_and_check_accept(tmp_path: Path) -> None:
    out = tmp_path / "vllm"
    (row,) = import_results([VLLM], out)
    assert check_folder(out) == []
    sweep = load_rate_sweep(out)
    assert list(sweep.steps["offered_rate"]) == [4.0] and len(sweep.records) == 24
    assert sweep.sweep["source"] == row["source"] and sweep.sweep["imported_from"] == [VLLM.name]
    ours = summarize_step(sweep.records, NO_LIMITS)
    assert row["ttft_p50_ms"] == pytest.approx(ours.percentiles["ttft_p50_ms"]) and row["figures_by"] == "toolkit"
    data = json.loads(VLLM.read_text())
    assert row["ttft_p50_ms_as_reported"] == data["median_ttft_ms"]
    assert row["output_tok_s_as_reported"] == data["output_throughput"]
    assert row["ttft_p50_ms_reproduced"] == pytest.approx(data["median_ttft_ms"], rel=0.01)


def damaged(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_malformed_or_unknown_file_is_one_line_naming_it(tmp_path: Path) -> None:
    whole = json.loads(VLLM.read_text())
    cut = damaged(tmp_path, "cut.json", VLLM.read_text()[:300])
    with pytest.raises(ResultsError, match=rf"^{cut}:\d+: not JSON \(.*\); expected vllm bench serve's"):
        read_peer_result(cut)
    other = damaged(tmp_path, "other.json", json.dumps({"model": "m", "tps": 3.5}))
    with pytest.raises(ResultsError, match=rf"^{other}: not a result file this toolkit reads \(it holds model, tps\)"):
        read_peer_result(other)
    short = damaged(tmp_path, "short.json", json.dumps({**whole, "ttfts": whole["ttfts"][:-1]}))
    with pytest.raises(ResultsError, match=rf"^{short}: its per-request lists differ in length \(ttfts 23, itls 24"):
        read_peer_result(short)
    with pytest.raises(ResultsError, match=rf"^{tmp_path / 'none.json'}: cannot read: No such file"):
        read_peer_result(tmp_path / "none.json")
    for path in (cut, other, short):
        with pytest.raises(ResultsError) as raised:
            read_peer_result(path)
        assert "\n" not in str(raised.value)


def test_the_command_imports_and_refuses_a_folder_holding_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "vllm"
    assert main(["import-results", str(VLLM), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("step 0 (4 req/s, vllm bench serve ") and "TTFT p50 " in printed[0]
    assert main(["import-results", str(VLLM), "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"error: out: {out} already holds a run; choose another folder\n"


def test_reconciliation_of_our_step_and_vllm_bench(tmp_path: Path) -> None:
    import_results([VLLM], tmp_path / "vllm")
    sweeps = load_rate_sweeps([PEERS / "toolkit-4rps", tmp_path / "vllm"], ["toolkit", "vllm"])
    table = reconciliation(sweeps)
    assert set(table["quantity"]) >= {"output tok/s", "TTFT p50 ms", "TPOT p50 ms", "e2e p50 ms"}
    ttft = table[table["quantity"] == "TTFT p50 ms"].iloc[0]
    assert ttft["ratio"] == pytest.approx(ttft["value"] / ttft["toolkit"])
    assert ttft["low"] <= ttft["ratio"] <= ttft["high"] and 0 <= ttft["p_value"] <= 1
    assert ttft["as_reported"] == json.loads(VLLM.read_text())["median_ttft_ms"]
    assert "vllm bench serve" in reconciliation_markdown(sweeps)


def test_the_same_records_reconcile_to_one_and_other_rates_do_not_match(tmp_path: Path) -> None:
    a = write_rate_sweep(tmp_path / "a", rates=(2.0, 4.0), requests=30)
    b = Path(shutil.copytree(a, tmp_path / "b"))
    table = reconciliation(load_rate_sweeps([a, b], ["a", "b"]))
    assert len(table) == 2 * 5 and (table.dropna(subset=["ratio"])["ratio"] == 1.0).all()
    assert (table.dropna(subset=["ratio"])["p_value"] == 1.0).all()
    c = write_rate_sweep(tmp_path / "c", rates=(3.0,), requests=30)
    sweeps = load_rate_sweeps([a, c], ["a", "c"])
    assert reconciliation(sweeps).empty and NO_MATCH in reconciliation_markdown(sweeps)


@pytest.mark.parametrize(
    ("name", "source"),
    [("guidellm-4rps.json", "GuideLLM 0.8.1"), ("aiperf-4rps/profile_export.jsonl", "AIPerf 0.13.0")],
)
def test_guidellm_and_aiperf_import_as_run_folders_our_readers_accept(name: str, source: str, tmp_path: Path) -> None:
    (row,) = import_results([PEERS / name], tmp_path / "out")
    assert check_folder(tmp_path / "out") == []
    assert row["source"] == source and row["figures_by"] == "toolkit" and row["completed"] == 24
    assert row["ttft_p50_ms_reproduced"] == pytest.approx(row["ttft_p50_ms_as_reported"], rel=0.01)
    assert len(load_rate_sweep(tmp_path / "out").records) == 24


def test_one_folder_holds_one_tool(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match=r"^files: from GuideLLM 0.8.1 and vllm bench serve .*; import one tool's"):
        import_results([VLLM, PEERS / "guidellm-4rps.json"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_table_is_one_family_of_tests(tmp_path: Path) -> None:
    for name, folder in (("vllm-bench-4rps.json", "vllm"), ("guidellm-4rps.json", "guidellm")):
        import_results([PEERS / name], tmp_path / folder)
    sweeps = load_rate_sweeps([PEERS / "toolkit-4rps", tmp_path / "vllm", tmp_path / "guidellm"])
    table = reconciliation(sweeps).dropna(subset=["p_value"])
    expected = adjusted_p_values(list(table["p_value"]))
    assert list(table["q_value"]) == pytest.approx(expected) and (table["q_value"] >= table["p_value"]).all()


def test_the_replayed_fixture_sent_vllm_benchs_own_requests() -> None:
    peer = read_peer_result(VLLM).records
    assert peer is not None
    ours = load_rate_sweep(PEERS / "toolkit-replay-4rps").records.sort_values("request")
    theirs = peer.sort_values("scheduled_s", kind="stable")
    assert list(ours["scheduled_s"]) == pytest.approx(list(theirs["scheduled_s"] - theirs["scheduled_s"].min()))
    assert list(ours["output_tokens"]) == list(theirs["output_tokens"])
    # Input lengths as the server counted them: our cold prompts' unique prefixes (request numbers) can tokenize one
    # token longer than the prefix the filler was sized with, as in our own steps (toolkit-4rps: 64, then 65s).
    off = [a - b for a, b in zip(ours["input_tokens"], theirs["input_tokens"], strict=True)]
    assert off[0] == 0 and set(off) <= {0, 1}, off


def test_an_escape_sequence_in_a_files_version_reaches_no_terminal_and_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads((PEERS / "vllm-bench-4rps.json").read_text())
    data["vllm_version"] = "0.32\x1b[2J\x1b]0;owned\x07"
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(data))
    assert main(["import-results", str(hostile), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "vllm bench serve 0.32[2J]0;owned" in printed and "\x1b" not in printed and "\x07" not in printed
    written = [
        p for p in (tmp_path / "out").rglob("*.json*") if b"\\u001b" in p.read_bytes() or b"\x1b" in p.read_bytes()
    ]
    assert written == []
