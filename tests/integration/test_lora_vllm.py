"""The embedded vLLM serving tiny-llama and its LoRA adapter `tiny-lora` on one server (issue 47)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from toolkit.method.goodput import CLASS_COLUMN, MODEL_COLUMN, VERDICTS, request_latencies, steady_mask
from toolkit.rates.files import read_records, read_steps, read_sweep
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.servers.embedded.server import LORA_NAME, SERVED_MODEL_NAME, EmbeddedServer

PROMPT = "hello there ba ce di fo"


def _first_logprob(base_url: str, model: str) -> float:
    body = {"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0, "logprobs": 1}
    reply = httpx.post(base_url + "/v1/completions", json=body, timeout=60).json()
    return float(reply["choices"][0]["logprobs"]["token_logprobs"][0])


def _samples(base_url: str, family: str) -> list[Any]:
    families = text_string_to_metric_families(httpx.get(base_url + "/metrics", timeout=10).text)
    return [s for f in families if f.name == family for s in f.samples if not s.name.endswith("_created")]


def _labels(base_url: str, family: str) -> list[dict[str, str]]:
    return [dict(s.labels) for s in _samples(base_url, family)]


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


def test_a_mix_of_base_and_adapter_at_50_50_gives_each_model_its_figures(
    lora_server: EmbeddedServer, tmp_path: Path
) -> None:
    """Issue 47's LoRA mix: two classes that differ only in their model, drawn 50/50, the sweep's own model the
    adapter (its /v1/models card has no max_model_len: its parent's is used). Each class's requests name their
    model; each class has its figures; the server's request counter (which counts the adapter's under the base
    model's name) grew by exactly the requests both sent, and its log received each class's on its model."""
    shape = {"weight": 1, "input_tokens": 64, "output_tokens": 16, "slo_ttft_ms": 5000}
    classes = [{"name": "base", "model": SERVED_MODEL_NAME, **shape}, {"name": "lora", "model": LORA_NAME, **shape}]
    before = sum(float(s.value) for s in _samples(lora_server.base_url, "vllm:request_success"))
    params = make_rate_params({"base_url": lora_server.base_url, "model": LORA_NAME, "rates": [8],
                               "requests_per_step": 24, "classes": classes, "seed": 47, "results_dir": str(tmp_path),
                               "api_key_env": "LORA_TEST_NO_KEY", "server_log": str(lora_server.log_path)})  # fmt: skip
    out = run_rates(params, say=lambda line: None)
    after = sum(float(s.value) for s in _samples(lora_server.base_url, "vllm:request_success"))
    records, (row,) = read_records(out), read_steps(out)
    assert records["error"].isna().all() and len(records) == 24 and after - before == 24
    counts = records[CLASS_COLUMN].value_counts().to_dict()
    assert counts.keys() == {"base", "lora"} and row["classes"]["lora"]["requests"] == counts["lora"]
    assert row["classes"]["base"]["requests"] + row["classes"]["lora"]["requests"] == row["completed"] == 24
    low, high = row["classes"]["lora"]["share_low"], row["classes"]["lora"]["share_high"]
    assert low <= 0.5 <= high  # the drawn share within its interval of the weight's
    assert read_sweep(out)["model"] == LORA_NAME
    assert row["server_log_requests"] == {"base": counts["base"], "adapters": {LORA_NAME: counts["lora"]}}


def test_a_model_mix_at_50_50_without_classes_gives_each_model_its_figures(
    lora_server: EmbeddedServer, tmp_path: Path
) -> None:
    """`--model tiny-llama=1,tiny-lora=1` (issue 47): each arrival's model drawn 50/50 from the seed, named in its
    record; the step's `models` figures per model beside its total, each model's counts and median TTFT those of
    its records; the server's request counter (the adapter's under the base's name) grew by exactly the 24 sent,
    and the server's own log (`server_log`) received as many for each model as the client sent it."""
    before = sum(float(s.value) for s in _samples(lora_server.base_url, "vllm:request_success"))
    params = make_rate_params({"base_url": lora_server.base_url, "model": f"{SERVED_MODEL_NAME}=1,{LORA_NAME}=1",
                               "rates": [8], "requests_per_step": 24, "input_tokens": 64, "output_tokens": 16,
                               "slo_ttft_ms": 5000, "seed": 47, "results_dir": str(tmp_path),
                               "api_key_env": "LORA_TEST_NO_KEY", "server_log": str(lora_server.log_path)})  # fmt: skip
    said: list[str] = []
    out = run_rates(params, say=said.append)
    after = sum(float(s.value) for s in _samples(lora_server.base_url, "vllm:request_success"))
    records, (row,) = read_records(out), read_steps(out)
    assert records["error"].isna().all() and len(records) == 24 and after - before == 24
    assert (records["output_tokens"] == 16).all() and read_sweep(out)["models"] == {SERVED_MODEL_NAME: 1.0,
                                                                                    LORA_NAME: 1.0}  # fmt: skip
    latencies = request_latencies(records)
    steady = steady_mask(records, params.steady_trim)
    assert list(row["models"]) == [SERVED_MODEL_NAME, LORA_NAME] and row["completed"] == 24
    for name, figures in row["models"].items():
        mine = records[MODEL_COLUMN] == name
        assert figures["requests"] == figures["completed"] == mine.sum() > 0
        assert figures["share_low"] <= 0.5 <= figures["share_high"]  # the drawn share within its interval
        assert figures["achieved_rate"] > 0 and figures["tpot_p50_ms"] > 0 and figures["slo_verdict"] in VERDICTS
        assert figures["ttft_sched_p50_ms"] == pytest.approx(latencies.loc[mine & steady, "ttft_sched_ms"].median())
    assert sum(m["requests"] for m in row["models"].values()) == row["requests"]
    assert any(line.startswith("step 0 models: tiny-llama ") and f"; {LORA_NAME} " in line for line in said)
    # the one place vLLM names the adapter: its lora_requests_info gauge, read for the step's window
    assert LORA_NAME in row["lora_adapters"]["running"] and row["lora_adapters"]["max_lora"] == 1, row["lora_adapters"]
    # each request's adapter as the server logged it on receipt: the split the client drew, exactly
    sent = records[MODEL_COLUMN].value_counts().to_dict()
    assert row["server_log_requests"] == {"base": sent[SERVED_MODEL_NAME], "adapters": {LORA_NAME: sent[LORA_NAME]}}
    base, adapter = sent[SERVED_MODEL_NAME], sent[LORA_NAME]
    assert f"step 0 server log: received {base} for the base model, {adapter} for tiny-lora" in said, said
