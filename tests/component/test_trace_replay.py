"""A Mooncake trace replayed against the fault server: arrivals follow the trace (at 1x and 2x), prompts that share
hash_ids start with the same text, and the step says what it replayed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faultserver import FaultServer
from toolkit.cli import main
from toolkit.rates.files import read_records, read_steps, read_sweep
from toolkit.rates.traces import read_trace

pytestmark = pytest.mark.component
TRACE = Path(__file__).parents[1] / "fixtures" / "traces" / "mooncake.jsonl"
# a shared machine: the scheduling lag flag is 5 ms at p99; the median send within 50 ms here and every one within a
# second (one send 50 ms late failed the fast tier's five workers on 2 cores beside a vLLM start)
LAG_BOUND_S = 0.05


@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_arrivals_follow_the_trace_and_shared_blocks_share_their_text(tmp_path: Path, scale: float) -> None:
    out = tmp_path / "run"
    with FaultServer(token_interval_s=0.002) as server:
        args = ["rates", "--base-url", server.base_url, "--trace", str(TRACE), "--trace-format", "mooncake",
                "--time-scale", str(scale), "--endpoint", "completions", "--out", str(out),
                "--warmup", "1"]  # fmt: skip
        assert main(args) == 0
        prompts = [e["prompt"] for e in server.completion_requests()]
    trace = read_trace(TRACE, "mooncake")
    records = read_records(out).sort_values("scheduled_s")
    assert list(records["scheduled_s"].round(6)) == [round(r.at_s / scale, 6) for r in trace]
    lag = records["sent_s"] - records["scheduled_s"]
    assert (lag >= 0).all() and lag.median() < LAG_BOUND_S and (lag < 1.0).all(), list(lag)
    assert list(records["input_tokens"]) == [r.input_tokens for r in trace]  # exact lengths, as the server counts
    assert list(records["warmup"]) == [r.at_s / scale < 1.0 for r in trace]  # the first second: kept, not summed
    head = {i: p[: p.index("[rate sweep")] for i, p in enumerate(prompts)}  # the blocks before each unique rest
    assert head[0] == head[3] and head[1] == head[9] and head[0] != head[1] and head[2] == head[4] != head[8]
    assert head[0].startswith(head[1])  # 0 and 3 send blocks 1, 2 and 3 (1,600 tokens); 1 and 9 only 1 and 2
    (row,) = read_steps(out)
    assert row["requests"] == 12 and row["completed"] == 12 and row["warmup_requests"] == (3 if scale == 1 else 4)
    assert read_sweep(out)["replay_source"] == "mooncake trace (mooncake.jsonl)" + (" at 2x" if scale == 2 else "")


def test_a_malformed_trace_is_one_line_before_anything_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(TRACE.read_text() + '{"timestamp": 9000, "input_length": "long"}\n')
    with FaultServer() as server:
        args = ["rates", "--base-url", server.base_url, "--trace", str(bad), "--trace-format", "mooncake",
                "--out", str(tmp_path / "run")]  # fmt: skip
        assert main(args) == 2
        assert server.completion_requests() == []
    err = capsys.readouterr().err.strip()
    assert err == f"error: trace: {bad}:13: input_length is not a whole number >= 1 (got 'long')"
