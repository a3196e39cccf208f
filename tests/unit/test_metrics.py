"""Parsing vLLM's /metrics: only the families we read, old and new names."""

from __future__ import annotations

import pytest

from toolkit.matrix.prometheus import (
    GENERATION_TOKENS,
    KV_USAGE,
    PREFIX_HITS,
    RUNNING,
    cache_config,
    delta,
    parse_metrics,
    used_lines,
)

TEXT = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
# HELP vllm:gpu_prefix_cache_hits_total Old name.
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{model_name="m"} 512.0
# HELP vllm:gpu_cache_usage_perc Old name.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",enable_prefix_caching="True"} 1.0
"""


def test_only_used_families_are_kept() -> None:
    kept = used_lines(TEXT)
    assert "time_to_first_token" not in kept
    assert "vllm:generation_tokens_total{" in kept and "vllm:num_requests_running{" in kept


def test_values_with_old_names() -> None:
    snap = parse_metrics(TEXT)
    assert snap.value(RUNNING) == 3.0
    assert snap.value(GENERATION_TOKENS) == 1234.0
    assert snap.value(PREFIX_HITS) == 512.0
    assert snap.value(KV_USAGE) == 0.25


def test_budget_falls_back_to_blocks_times_block_size_before_0_25() -> None:
    config = cache_config(parse_metrics(TEXT))
    assert config.kv_cache_size_tokens is None
    assert config.budget_tokens == (16_000, "num_gpu_blocks × block_size")
    assert config.prefix_caching is True


def test_delta_of_counters() -> None:
    later = parse_metrics(TEXT.replace("} 1234.0", "} 1300.0"))
    assert delta(parse_metrics(TEXT), later, GENERATION_TOKENS) == 66.0
    assert delta(None, later, GENERATION_TOKENS) is None


ITL = """# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="m"} 90.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 100.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} {count}
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} {total}
"""


def test_mean_inter_token_latency_between_two_scrapes() -> None:
    from toolkit.matrix.prometheus import ITL_COUNT, ITL_SUM, mean_delta

    before = parse_metrics(ITL.replace("{count}", "100.0").replace("{total}", "0.8"))
    after = parse_metrics(ITL.replace("{count}", "500.0").replace("{total}", "4.0"))
    assert "_bucket" not in used_lines(ITL)  # buckets are not read
    assert mean_delta(before, after, ITL_SUM, ITL_COUNT) == 3.2 / 400
    assert mean_delta(before, before, ITL_SUM, ITL_COUNT) is None  # no observation in between
    assert mean_delta(None, after, ITL_SUM, ITL_COUNT) is None


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
def test_a_sample_that_is_not_finite_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match=rf"sample vllm:num_requests_running is {value.lower().lstrip('+')}"):
        parse_metrics(TEXT.replace("} 3.0", f"}} {value}"))
    # a histogram's le="+Inf" bucket is a label, not a value, and is not read anyway
    assert parse_metrics(TEXT.replace('le="0.001"', 'le="+Inf"')).value(RUNNING) == 3.0


def test_a_negative_sample_or_a_series_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match=r"sample vllm:num_requests_running is -3\.0"):
        parse_metrics(TEXT.replace("} 3.0", "} -3.0"))
    running = next(line for line in TEXT.splitlines() if line.startswith("vllm:num_requests_running{"))
    with pytest.raises(ValueError, match=r"sample vllm:num_requests_running\{.*\} appears twice"):
        parse_metrics(TEXT.replace(running, f"{running}\n{running}"))
