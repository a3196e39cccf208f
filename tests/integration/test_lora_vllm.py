"""The embedded vLLM serving tiny-llama and its LoRA adapter `tiny-lora` on one server (issue 47)."""

from __future__ import annotations

import json

import httpx
from prometheus_client.parser import text_string_to_metric_families

from toolkit.servers.embedded.server import LORA_NAME, SERVED_MODEL_NAME, EmbeddedServer

PROMPT = "hello there ba ce di fo"


def _first_logprob(base_url: str, model: str) -> float:
    body = {"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0, "logprobs": 1}
    reply = httpx.post(base_url + "/v1/completions", json=body, timeout=60).json()
    return float(reply["choices"][0]["logprobs"]["token_logprobs"][0])


def _labels(base_url: str, family: str) -> list[dict[str, str]]:
    families = text_string_to_metric_families(httpx.get(base_url + "/metrics", timeout=10).text)
    return [dict(s.labels) for f in families if f.name == family for s in f.samples]


def test_the_adapter_is_listed_streams_and_changes_the_model_a_little(lora_server: EmbeddedServer) -> None:
    url = lora_server.base_url
    cards = {m["id"]: m for m in httpx.get(url + "/v1/models", timeout=10).json()["data"]}
    assert sorted(cards) == sorted([SERVED_MODEL_NAME, LORA_NAME])
    assert cards[LORA_NAME]["parent"] == SERVED_MODEL_NAME and cards[SERVED_MODEL_NAME]["parent"] is None
    assert cards[LORA_NAME]["max_model_len"] is None and cards[SERVED_MODEL_NAME]["max_model_len"] == 2048

    body = {"model": LORA_NAME, "prompt": PROMPT, "max_tokens": 16, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as reply:
        chunks = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: {")]
    assert len([c for c in chunks if c["choices"] and c["choices"][0]["text"]]) == 16
    assert {c["model"] for c in chunks} == {LORA_NAME}

    base, adapted = _first_logprob(url, SERVED_MODEL_NAME), _first_logprob(url, LORA_NAME)
    assert base != adapted and abs(base - adapted) < 0.5, (base, adapted)


def test_the_server_names_the_adapter_in_its_lora_gauge_but_counts_its_requests_under_the_base_model(
    lora_server: EmbeddedServer,
) -> None:
    """vLLM 0.32 has no counter per adapter: vllm:lora_requests_info is a gauge whose labels name the adapters
    running and waiting at a step (its value is that step's time); the request and token counters carry only
    model_name="tiny-llama"."""
    body = {"model": LORA_NAME, "prompt": PROMPT, "max_tokens": 8}
    assert httpx.post(lora_server.base_url + "/v1/completions", json=body, timeout=60).status_code == 200
    lora_info = _labels(lora_server.base_url, "vllm:lora_requests_info")
    assert {"max_lora": "1", "running_lora_adapters": LORA_NAME} in [
        {k: v for k, v in labels.items() if k != "waiting_lora_adapters"} for labels in lora_info
    ], lora_info
    succeeded = _labels(lora_server.base_url, "vllm:request_success")
    assert succeeded and {labels["model_name"] for labels in succeeded} == {SERVED_MODEL_NAME}
