"""vLLM's vllm:lora_requests_info gauge read for a step: the adapters seen running and waiting inside its window."""

from __future__ import annotations

from toolkit.matrix.lora_info import lora_adapters_seen
from toolkit.matrix.prometheus import parse_metrics

# as vLLM 0.32 exports it on a LoRA server after a mix (each label set valued with the time it was last seen)
METRICS = """# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""} 1000.5
vllm:lora_requests_info{max_lora="1",running_lora_adapters="tiny-lora",waiting_lora_adapters="tiny-lora"} 1000.4
vllm:lora_requests_info{max_lora="1",running_lora_adapters="a,tiny-lora",waiting_lora_adapters=""} 990.0
"""


def test_the_adapters_seen_inside_the_window_and_none_before_it() -> None:
    snapshot = parse_metrics(METRICS)
    assert lora_adapters_seen(snapshot, 995.0, 1001.0) == {"running": ["tiny-lora"], "waiting": ["tiny-lora"],
                                                            "max_lora": 1}  # fmt: skip
    assert lora_adapters_seen(snapshot, 980.0, 1001.0) == {"running": ["a", "tiny-lora"], "waiting": ["tiny-lora"],
                                                            "max_lora": 1}  # fmt: skip
    assert lora_adapters_seen(snapshot, 1000.45, 1001.0) == {"running": [], "waiting": [], "max_lora": 1}
    assert lora_adapters_seen(snapshot, 2000.0, 2001.0) == {"running": [], "waiting": [], "max_lora": None}


def test_a_server_without_the_gauge_gives_none() -> None:
    assert lora_adapters_seen(parse_metrics("vllm:num_requests_running 0\n"), 0.0, 1e10) is None
    assert lora_adapters_seen(None, 0.0, 1e10) is None
