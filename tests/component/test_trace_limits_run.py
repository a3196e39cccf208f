"""A trace past its limits is refused by `rates` in one line before any request is sent (issue 40): a window that
would take a step 10^12 s, blocks of a token, and prompts whose building takes more /tokenize calls than allowed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.faultserver import FaultServer
from toolkit.cli import main
from toolkit.rates import workload

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]
HASH_IDS = 4000


def rates(server: FaultServer, trace: Path, out: Path, *extra: str) -> int:
    return main(["rates", "--base-url", server.base_url, "--trace", str(trace), "--trace-format", "mooncake",
                 "--endpoint", "completions", "--out", str(out), *extra])  # fmt: skip


def tokenize_calls(server: FaultServer) -> int:
    return sum(e["path"] == "/tokenize" for e in server.log)


def test_a_trace_spanning_ten_to_the_twelve_seconds_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "span.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 20, "output_length": 2}\n'
                     '{"timestamp": 1e15, "input_length": 20, "output_length": 2}\n')  # fmt: skip
    started = time.monotonic()
    with FaultServer() as server:
        assert rates(server, trace, tmp_path / "run") == 2
        assert server.completion_requests() == [] and tokenize_calls(server) == 0
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(
            f"error: trace: {trace}: the requests between 0 s and its end arrive over "
            "1,000,000,000,000 s, more than the 86,400 s a step may last"
        )
        and "\n" not in err
    )


def test_blocks_of_one_token_are_refused_before_the_server_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "blocks.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 4100, "output_length": 2,
                                 "hash_ids": list(range(HASH_IDS))}) + "\n")  # fmt: skip
    with FaultServer(max_model_len=300_000) as server:
        assert rates(server, trace, tmp_path / "run", "--trace-block-tokens", "1") == 2
        assert server.log == []
    assert capsys.readouterr().err.strip() == (
        "error: trace_block_tokens: Input should be greater than or equal to 64 (got 1)"
    )


def test_prompts_past_their_tokenize_calls_are_refused_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workload, "MAX_TRACE_TOKENIZE_CALLS", 300)  # the estimate before it (>= 3 a block) passes
    trace = tmp_path / "blocks.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 64 * HASH_IDS + 16, "output_length": 2,
                                 "hash_ids": list(range(HASH_IDS))}) + "\n")  # fmt: skip
    with FaultServer(max_model_len=300_000) as server:
        assert rates(server, trace, tmp_path / "run", "--trace-block-tokens", "64") == 2
        assert server.completion_requests() == [] and 300 < tokenize_calls(server) <= 305
    assert capsys.readouterr().err.strip() == (
        "error: trace: building the window's prompts took more than 300 /tokenize calls; choose trace_start_s and "
        "trace_duration_s to replay less, or larger trace_block_tokens"
    )
