"""Trace files (Mooncake JSONL, Azure CSV): arrivals, lengths, blocks, windows, and one line per malformed line."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.base.errors import DatasetError, ParamsError
from toolkit.method.prefix_cache import expected_conversation_hit_rate, expected_trace_hit_rate
from toolkit.rates.replay import load_trace
from toolkit.rates.traces import TraceWindow, read_trace, window

pytestmark = pytest.mark.unit
TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


def test_the_mooncake_fixture_reads_as_written() -> None:
    requests = read_trace(TRACES / "mooncake.jsonl", "mooncake")
    assert len(requests) == 12 and requests[0].at_s == 0 and requests[-1].at_s == pytest.approx(5.8)
    assert (requests[3].input_tokens, requests[3].output_tokens, requests[3].hash_ids) == (1600, 8, (1, 2, 3))


def test_the_azure_fixture_reads_its_seven_digit_timestamps() -> None:
    requests = read_trace(TRACES / "azure.csv", "azure")
    assert [r.input_tokens for r in requests[:3]] == [374, 396, 879] and requests[0].hash_ids == ()
    assert requests[1].at_s == pytest.approx(47.01442 - 46.68059, abs=1e-6)
    assert requests[-1].at_s == pytest.approx(50.448119 - 46.68059, abs=1e-6)


def test_a_window_replayed_twice_as_fast() -> None:
    requests = read_trace(TRACES / "mooncake.jsonl", "mooncake")
    chosen = window(requests, TraceWindow(start_s=1.0, duration_s=3.0, time_scale=2.0))
    assert [round(r.at_s, 3) for r in chosen] == [0.25, 0.55, 0.8, 1.0, 1.3]  # 1.5 .. 3.6 s, from 1 s, halved
    replay = load_trace(TRACES / "mooncake.jsonl", "mooncake", TraceWindow(time_scale=2.0), 512)
    assert replay.due[-1] == pytest.approx(2.9) and replay.rate == pytest.approx(11 / 2.9)
    assert replay.hash_ids is not None and replay.hash_ids[1] == (1, 2, 4) and "at 2x" in replay.source
    with pytest.raises(ParamsError, match=r"mooncake.jsonl: no request arrives between 100 s and its end"):
        load_trace(TRACES / "mooncake.jsonl", "mooncake", TraceWindow(start_s=100), 512)


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1, "input_len',
         r"trace: .*t:2: not a JSON object \(the Mooncake layout has one per line\)"),
        ("mooncake", '{"timestamp": -3, "input_length": 5, "output_length": 2}',
         r"trace: .*t:1: timestamp is not a number of milliseconds >= 0 \(got -3\)"),
        ("mooncake", '\n{"timestamp": 3, "input_length": 0, "output_length": 2}',
         r"trace: .*t:2: input_length is not a whole number >= 1 \(got 0\)"),
        ("mooncake", '{"timestamp": 3, "input_length": 5, "output_length": 2, "hash_ids": [1, "x"]}',
         r"trace: .*t:1: hash_ids is not a list of whole numbers"),
        ("azure", "TIMESTAMP,Context\n", r"trace: .*t:1: the Azure layout needs a header with TIMESTAMP, "),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,4\nyesterday,3,4\n",
         r"trace: .*t:3: TIMESTAMP 'yesterday' is not a date and time"),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3\n",
         r"trace: .*t:2: 2 fields, the header has 3"),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,many\n",
         r"trace: .*t:2: GeneratedTokens is not a whole number >= 1 \(got 'many'\)"),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n", r"trace: .*t holds no request"),
    ],
)  # fmt: skip
def test_a_malformed_line_is_one_error_naming_the_file_and_line(
    tmp_path: Path, kind: str, text: str, message: str
) -> None:
    path = tmp_path / "t"
    path.write_text(text)
    with pytest.raises(DatasetError, match=message) as caught:
        read_trace(path, kind)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_the_expected_trace_hit_rate_counts_blocks_sent_before_in_whole_server_blocks() -> None:
    # the second request finds block 1 (512 tokens); the third finds 1 and 2, capped by its own length's blocks
    rate = expected_trace_hit_rate([(1, 2), (1, 3), (1, 2)], [1100, 1100, 1000], 512, 128)
    assert rate == pytest.approx((512 + 896) / 3200)  # 1000 tokens hold 7 whole blocks of 128 before the last
    assert expected_trace_hit_rate([(1,)], [600], 512, None) is None


def test_the_expected_conversation_hit_rate_is_each_later_turns_history_in_whole_blocks() -> None:
    rate = expected_conversation_hit_rate([1, 2, 3], [0, 300, 700], [250, 450, 900], 128)
    assert rate == pytest.approx((256 + 640) / 1600)
