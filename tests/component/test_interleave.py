"""`toolkit interleave` against two fault servers: rounds in alternating order, run folders, the paired report with
its order-adjusted ratio and its minimum detectable effect."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.batch.interleave import REPORT, TABLE, round_folder, run_interleaved
from toolkit.params import make_params


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
