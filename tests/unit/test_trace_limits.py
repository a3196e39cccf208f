"""Memory and time a trace file can take (issue 40): the file, its lines and requests, the window's span, requests and
prompt tokens, and the /tokenize calls its prompts take are bounded, each refused in one line naming the file (and
line); the file is read a line at a time, so its window costs memory, not its length."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from toolkit.base.errors import DatasetError, ParamsError
from toolkit.rates import traces
from toolkit.rates.params import make_rate_params
from toolkit.rates.replay import load_trace
from toolkit.rates.traces import (
    MAX_REQUEST_TOKENS,
    MAX_TRACE_LINE_BYTES,
    MAX_TRACE_REQUESTS,
    MAX_TRACE_TOKENIZE_CALLS,
    TraceWindow,
    read_trace,
    read_window,
)

pytestmark = pytest.mark.unit
WHOLE = TraceWindow()
STREAMED_PEAK = 8 * 1024 * 1024  # bytes: a read block and its lines, and the window's requests


def mooncake(path: Path, lines: int, *, step_ms: int = 1) -> Path:
    """A Mooncake trace of `lines` requests, `step_ms` apart."""
    path.write_text("".join(f'{{"timestamp": {i * step_ms}, "input_length": 100, "output_length": 10, '
                            f'"hash_ids": [{i}]}}\n' for i in range(lines)))  # fmt: skip
    return path


def refusal(error: type[Exception], call: object, *args: object) -> str:
    with pytest.raises(error) as caught:
        call(*args)  # type: ignore[operator]
    text = str(caught.value)
    assert "\n" not in text
    return text


def test_a_window_that_spans_more_than_a_step_may_last_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "span.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 20, "output_length": 2}\n'
                    '{"timestamp": 1e15, "input_length": 20, "output_length": 2}\n')  # fmt: skip
    assert refusal(ParamsError, load_trace, path, "mooncake", WHOLE, 512) == (
        f"trace: {path}: the requests between 0 s and its end arrive over 1,000,000,000,000 s, more than the 86,400 s "
        "a step may last; choose trace_start_s and trace_duration_s (or time_scale) to replay less"
    )
    assert load_trace(path, "mooncake", TraceWindow(duration_s=1), 512).due == [0.0]  # its first second is fine


def test_a_million_line_trace_is_refused_whole_at_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    line = b'{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [7]}\n'
    path.write_bytes(line * 1_000_000 + b"not a request\n")  # never read: the reader stops at the limit
    assert refusal(ParamsError, read_trace, path, "mooncake") == (
        f"trace: {path}: the requests between 0 s and its end are more than {MAX_TRACE_REQUESTS:,}, each a prompt "
        "built before the step sends; choose trace_start_s and trace_duration_s (or time_scale) to replay less"
    )


def test_a_window_of_a_long_trace_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    path = mooncake(tmp_path / "long.jsonl", 50_000)  # 4 MB, held whole as text and objects: ~20 MB
    tracemalloc.start()
    try:
        chosen = read_window(path, "mooncake", TraceWindow(start_s=10, duration_s=1, time_scale=2))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < STREAMED_PEAK, f"peak {peak / 2**20:.1f} MiB"
    assert len(chosen) == 1000 and chosen[0].at_s == 0 and chosen[-1].at_s == pytest.approx(0.4995)
    assert chosen[0].hash_ids == (10_000,)


def test_a_trace_out_of_order_is_read_again_from_its_first_arrival(tmp_path: Path) -> None:
    path = tmp_path / "unordered.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 100, "output_length": 5}) + "\n"
                            for t in (500, 1500, 0, 1000)))  # fmt: skip
    assert [r.at_s for r in read_trace(path, "mooncake")] == [0, 0.5, 1.0, 1.5]
    assert [r.at_s for r in read_window(path, "mooncake", TraceWindow(start_s=1))] == [0, 0.5]


def test_the_file_its_lines_and_a_request_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    long_line = tmp_path / "line.jsonl"
    long_line.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n'
                         + '{"timestamp": 1, "pad": "' + "x" * MAX_TRACE_LINE_BYTES + '"}\n')  # fmt: skip
    assert refusal(DatasetError, read_trace, long_line, "mooncake") == (
        f"trace: {long_line}:2: a line longer than {MAX_TRACE_LINE_BYTES:,} bytes"
    )
    huge = tmp_path / "huge.csv"
    huge.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,{MAX_REQUEST_TOKENS + 1},4\n")
    assert refusal(DatasetError, read_trace, huge, "azure") == (
        f"trace: {huge}:2: ContextTokens is 10,000,001 tokens, more than the 10,000,000 a request may ask for"
    )
    path = mooncake(tmp_path / "t.jsonl", 10)
    monkeypatch.setattr(traces, "MAX_TRACE_LINES", 9)
    assert refusal(DatasetError, read_trace, path, "mooncake") == (
        f"trace: {path}: more than 9 lines; cut out the part to replay"
    )
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", 100)
    assert refusal(DatasetError, read_trace, path, "mooncake") == (
        f"trace: {path}: {path.stat().st_size:,} bytes, more than the 100 a trace may hold; cut out the part to "
        "replay")  # fmt: skip


def test_the_window_prompt_tokens_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = mooncake(tmp_path / "t.jsonl", 10)
    monkeypatch.setattr(traces, "MAX_TRACE_PROMPT_TOKENS", 999)
    assert "ask for more than 999 prompt tokens, whose texts the step holds at once" in refusal(
        ParamsError, read_trace, path, "mooncake"
    )
    assert len(read_window(path, "mooncake", TraceWindow(duration_s=0.009))) == 9  # 900 tokens


def test_blocks_too_short_or_too_many_to_build_are_refused_before_the_server_is_asked(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match=r"^trace_block_tokens: Input should be greater than or equal to 64 \(got 1"):
        make_rate_params({"trace": "t.jsonl", "trace_format": "mooncake", "trace_block_tokens": 1})
    path = tmp_path / "blocks.jsonl"
    path.write_text("".join(json.dumps({"timestamp": i, "input_length": 70 * 512 + 16, "output_length": 2,
                                        "hash_ids": list(range(i * 70, i * 70 + 70))}) + "\n"
                            for i in range(100)))  # fmt: skip
    calls = 3 * 7000 + 100 + 1  # 7,000 distinct blocks, 100 distinct lists of them, an empty text
    assert calls > MAX_TRACE_TOKENIZE_CALLS
    assert refusal(ParamsError, load_trace, path, "mooncake", WHOLE, 512) == (
        f"trace: {path}: building the prompts of the requests between 0 s and its end takes at least {calls:,} "
        f"/tokenize calls (its distinct 512-token blocks), more than {MAX_TRACE_TOKENIZE_CALLS:,}; choose "
        "trace_start_s and trace_duration_s to replay less, or larger trace_block_tokens"
    )
    assert len(load_trace(path, "mooncake", TraceWindow(duration_s=0.05), 512).due) == 50  # half of them can
