"""`toolkit interleave` against two fault servers: rounds in alternating order, run folders, the paired report with
its order-adjusted ratio and its minimum detectable effect; a response format carried by both sides' decode requests,
each side's share of valid replies beside the ratios (worked out here from what the servers logged they spelled)."""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.component.test_matrix_requests import INVALID, SCHEMA, VALID, matched
from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.batch.interleave import REPORT, TABLE, round_folder, run_interleaved
from toolkit.cli.entry import main
from toolkit.matrix import runner as matrix_runner
from toolkit.params import make_params
from toolkit.reports.tables import REPLY_SHARE_NOTE

KEY_ENV = "INTERLEAVE_TEST_KEY"  # unset: the fault servers need no key


def test_two_servers_in_alternating_rounds_give_a_paired_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INTERLEAVE_TEST_KEY", raising=False)
    said: list[str] = []
    with FaultServer(token_interval_s=0.02) as slow, FaultServer(token_interval_s=0.012) as fast:
        common = tiny_params(concurrency=[1, 2], duration_s=0.75, max_output=16, api_key_env="INTERLEAVE_TEST_KEY")
        params = {
            label: make_params({**common, "base_url": server.base_url, "run_label": label})
            for label, server in (("slow", slow), ("fast", fast))
        }
        report = run_interleaved(params, 4, tmp_path, say=said.append)
    assert [line.split(":")[0] for line in said] == [
        "round 1 slow", "round 1 fast", "round 2 fast", "round 2 slow", "round 3 slow", "round 3 fast",
        "round 4 fast", "round 4 slow"]  # fmt: skip
    starts = {(label, r): json.loads((round_folder(tmp_path, label, r) / "run.json").read_text())["started_at"]
              for label in ("slow", "fast") for r in (1, 2, 3, 4)}  # fmt: skip
    assert starts[("fast", 2)] < starts[("slow", 2)] and starts[("slow", 3)] < starts[("fast", 3)]
    assert starts[("fast", 4)] < starts[("slow", 4)]
    table = pd.read_csv(tmp_path / TABLE)
    assert list(table["concurrency"]) == [1, 2] and (table["rounds"] == 4).all()
    # Tokens every 12 ms against every 20 ms: about 1.67x, measured as a ratio per round and paired.
    assert (table["total_tok_s_ratio"] > 1.3).all() and table["total_tok_s_significant"].all()
    text = report.read_text()
    assert report.name == REPORT and text.startswith("# Interleaved comparison: fast / slow")
    assert (
        "Overall, fast / slow (geometric mean over the cells, its interval over the rounds, 95 %): Total tok/s 1."
        in (text)
    )
    assert "Order-adjusted, fast / slow (" in text and "2 degrees of freedom): Total tok/s 1." in text
    # The smallest difference these 4 rounds could see, from their own spread: printed for every quantity, and
    # below the true difference in throughput (a token every 12 ms against 20 ms: +67 %).
    found = re.search(r"^Minimum detectable effect at 80 % power \(two-sided 95 %; this run's round-to-round spread, "
                      r"4 rounds\): Total tok/s ±([\d.]+) % \(5 % needs about ([\d,]+|more than 1,000) rounds, 10 % "
                      r"about .*; Per request tok/s ±([\d.]+) % .*; TTFT ±", text, re.MULTILINE)  # fmt: skip
    assert found is not None, text
    true_difference = 100 * (0.020 / 0.012 - 1)
    assert float(found[1]) < true_difference and float(found[3]) < true_difference, found[0]


def interleave(base: Path, a: FaultServer, b: FaultServer, *extra: str) -> int:
    return main(["interleave", "--a-url", a.base_url, "--b-url", b.base_url, "--rounds", "2", "--contexts", "64",
                 "--concurrency", "1,2", "--duration", "0.25", "--max-output", "8", "--control-window", "0",
                 "--read-timeout", "5", "--api-key-env", KEY_ENV, "--out", str(base / "out"), *extra])  # fmt: skip


def test_both_sides_carry_the_schema_and_the_report_shows_each_sides_valid_share_per_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_fault_server: Callable[..., FaultServer],
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # the schema named relative to the current folder
    (tmp_path / "answer.json").write_text(json.dumps(SCHEMA))
    servers = {"A": make_fault_server(token_interval_s=0.002), "B": make_fault_server(token_interval_s=0.002)}
    texts = {1: (VALID, INVALID), 2: (INVALID, VALID)}  # per cell (streams): what A and B spell
    shares: dict[tuple[str, int], list[float]] = defaultdict(list)  # (side, streams) -> each round's matched share
    measure = matrix_runner.measure_decode_cell

    async def spied(client: Any, api: Any, spec: Any, **kwargs: Any) -> Any:
        n = len(spec.prompts)
        for server, text in zip(servers.values(), texts[n], strict=True):
            server.reply_text = text
        starts = {side: len(server.log) for side, server in servers.items()}
        result = await measure(client, api, spec, **kwargs)
        for side, server in servers.items():
            done = [e for e in server.log[starts[side] :] if e["path"] == "/v1/chat/completions" and e["done"]]
            if done:
                shares[(side, n)].append(sum(matched(e["reply_text"]) for e in done) / len(done))
        return result

    monkeypatch.setattr(matrix_runner, "measure_decode_cell", spied)
    assert interleave(tmp_path, *servers.values(), "--response-format", "json_schema:answer.json") == 0
    expected = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}
    for server in servers.values():  # every decode request (and warm-up) of every round, on both sides
        decode = [e for e in server.completion_requests() if json.loads(e["body"])["max_tokens"] == 8]
        assert len(decode) > 4 and all(e["response_format"] == expected for e in decode)
    assert all(len(shares[(side, n)]) == 2 for side in servers for n in (1, 2))  # each side's cell in both rounds
    table = pd.read_csv(tmp_path / "out" / TABLE)
    assert list(table["concurrency"]) == [1, 2]
    for side in ("a", "b"):
        assert list(table[f"schema_valid_share_{side}"]) == [statistics.fmean(shares[(side.upper(), n)])
                                                             for n in (1, 2)]  # fmt: skip
    assert list(table["schema_valid_share_a"]) == [1.0, 0.0] and list(table["schema_valid_share_b"]) == [0.0, 1.0]
    assert "tool_called_share_a" not in table.columns
    text = (tmp_path / "out" / REPORT).read_text()
    assert "| Context | Requests at once | Total tok/s | Per request tok/s | TTFT | A valid | B valid |" in text
    rows = [line for line in text.splitlines() if line.startswith("| 64 |")]
    assert [row.split(" | ")[-2:] for row in rows] == [["100%", "0% |"], ["0%", "100% |"]]
    assert text.endswith(f"\n\n{REPLY_SHARE_NOTE}\n") and text in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--tool-choice", "auto"], "tool_choice: needs tools"),
        (["--response-format", "json_schema:missing.json"], "response_format: cannot read the schema file"),
        (["--tools", "answer.json"], "tools: the tools file does not hold a list of tools"),
    ],
)
def test_a_bad_request_option_stops_interleave_in_one_line_before_anything_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_fault_server: Callable[..., FaultServer],
    capsys: pytest.CaptureFixture[str], extra: list[str], said: str,
) -> None:  # fmt: skip
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "answer.json").write_text(json.dumps(SCHEMA))
    a, b = make_fault_server(), make_fault_server()
    assert interleave(tmp_path, a, b, *extra) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and said in err, err
    assert a.log == [] and b.log == [] and not (tmp_path / "out").exists()
