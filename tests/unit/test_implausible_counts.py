"""The pure checks behind issue 40's refusals: a usage's prompt and cached tokens against the request sent, a reply's
kept text against its byte bound, a counter between two scrapes, the cache sizes of vllm:cache_config_info."""

from __future__ import annotations

import orjson
import pytest

from toolkit.loadgen.stream_events import (
    REPLY_BYTES_PER_TOKEN,
    TEMPLATE_TOKENS_MAX,
    StreamResult,
    apply_chunk,
    keep_text,
    prompt_tokens_max,
)
from toolkit.matrix.prometheus import GENERATION_TOKENS, MetricsSnapshot, cache_config, counter_growth, delta
from toolkit.matrix.verdict import MAX_STREAM_TOKENS_PER_S, WindowEdges, window_generation

pytestmark = pytest.mark.unit


def usage_event(prompt: int, cached: int | None = None, completion: int = 1) -> bytes:
    usage: dict[str, object] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return orjson.dumps({"choices": [{"index": 0, "text": " x"}], "usage": usage})


def test_a_prompt_count_is_held_to_the_bytes_sent_and_a_cached_count_to_the_prompt() -> None:
    assert prompt_tokens_max(500) == 500 + TEMPLATE_TOKENS_MAX
    ok = StreamResult(prompt_tokens_max=prompt_tokens_max(500))
    assert apply_chunk(usage_event(prompt_tokens_max(500), cached=100), 1.0, ok) and ok.error is None
    assert ok.prompt_tokens == 1524 and ok.cached_tokens == 100 and ok.completion_tokens == 1
    for event, message in [
        (usage_event(2**62), f"usage.prompt_tokens is {2**62}, more than the 1,524 its request can hold"),
        (usage_event(20, cached=21), "usage.prompt_tokens_details.cached_tokens is 21, more than the 20 prompt tokens"),
        (usage_event(20, cached=2**63 - 1), f"cached_tokens is {2**63 - 1}, more than the 20 prompt tokens"),
    ]:
        result = StreamResult(prompt_tokens_max=prompt_tokens_max(500))
        assert not apply_chunk(event, 1.0, result)
        assert result.error is not None and message in result.error and "\n" not in result.error
        assert result.prompt_tokens is None and result.cached_tokens is None and result.completion_tokens == 0


def test_a_replys_kept_text_stops_at_its_byte_bound_and_says_so() -> None:
    result = StreamResult(max_tokens=2, text=[])
    bound = 2 * REPLY_BYTES_PER_TOKEN
    keep_text(result, "a" * (bound - 1))
    assert result.text_note is None
    keep_text(result, "é" * 3)  # two bytes a character: one more byte fits, no half character is kept
    keep_text(result, "b" * 10_000)
    assert "".join(result.text) == "a" * (bound - 1)
    assert result.text_kept_bytes == bound - 1 and result.text_bytes == bound - 1 + 6 + 10_000
    assert result.text_note == (f"reply cut to its first {bound - 1:,} bytes of {bound + 10_005:,} "
                                f"({REPLY_BYTES_PER_TOKEN:,} bytes a token asked for)")  # fmt: skip


def snapshot(generated: float) -> MetricsSnapshot:
    return MetricsSnapshot({"vllm:generation_tokens_total": [({}, generated)]})


def test_a_counter_that_went_back_is_unknown_and_one_that_jumped_past_the_bound_is_refused() -> None:
    assert counter_growth(snapshot(10), snapshot(15), GENERATION_TOKENS) == (5, None)
    assert counter_growth(snapshot(1_000_000), snapshot(204), GENERATION_TOKENS) == (
        None, "vllm:generation_tokens_total went back by 999,796")  # fmt: skip
    assert delta(snapshot(1_000_000), snapshot(204), GENERATION_TOKENS) is None
    assert counter_growth(snapshot(0), snapshot(101), GENERATION_TOKENS, most=100) == (
        None, "vllm:generation_tokens_total grew by 101")  # fmt: skip
    edges = WindowEdges(10.0, 12.0, 9.9, 10.0, 12.0, 12.1, snapshot(0), snapshot(1_000_000), 10.0)
    most = MAX_STREAM_TOKENS_PER_S * 2 * 2.2
    assert window_generation(edges, 2) == (None, (
        f"vllm:generation_tokens_total grew by 1,000,000 between the window's scrapes, more than the {most:,.0f} that "
        "2 stream(s) at 10,000 tok/s decode in 2.20 s"))  # fmt: skip
    fine = WindowEdges(10.0, 12.0, 9.9, 10.0, 12.0, 12.1, snapshot(0), snapshot(most - 1), 10.0)
    assert window_generation(fine, 2) == (most - 1, None)


@pytest.mark.parametrize("bad", ["-5", "0", "nan", "inf", "-inf", "1e400", "2.5", "many"])
def test_a_cache_size_that_is_no_whole_number_of_one_or_more_is_never_used(bad: str) -> None:
    labels = {"block_size": "16", "num_gpu_blocks": bad, "kv_cache_size_tokens": bad, "enable_prefix_caching": "True"}
    config = cache_config(MetricsSnapshot({"vllm:cache_config_info": [(labels, 1.0)]}))
    assert config.kv_cache_size_tokens is None and config.num_blocks is None and config.block_size == 16
    assert config.budget_tokens == (None, "unknown")
    assert config.problem == (f"vllm:cache_config_info: kv_cache_size_tokens {bad!r} is not a whole number >= 1, "
                              f"num_gpu_blocks {bad!r} is not a whole number >= 1: treated as unknown")  # fmt: skip
    good = cache_config(MetricsSnapshot({"vllm:cache_config_info": [(labels | {"num_gpu_blocks": "10.0"}, 1.0)]}))
    assert good.budget_tokens == (160, "num_gpu_blocks × block_size") and "num_gpu_blocks" not in (good.problem or "")
