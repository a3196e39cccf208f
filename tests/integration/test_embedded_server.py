"""The skeleton's promises, shown against the real embedded vLLM."""

from __future__ import annotations

import json
import os

import httpx

from tests.conftest import TEST_API_KEY
from tests.fake_vllm import DIST_STORE  # the file store vLLM names so (vllm.utils.network_utils)
from toolkit.matrix.prometheus import cache_config, parse_metrics
from toolkit.servers.embedded.server import BLOCK_SIZE_TOKENS, EmbeddedServer, ServerConfig

AUTH = {"Authorization": f"Bearer {TEST_API_KEY}"}


def test_models_lists_served_model_with_max_model_len(vllm_server: EmbeddedServer) -> None:
    data = httpx.get(vllm_server.base_url + "/v1/models", headers=AUTH).json()["data"]
    assert [m["id"] for m in data] == ["tiny-llama"]
    assert data[0]["max_model_len"] == 4096


def test_its_sockets_and_temporary_files_are_in_a_folder_of_its_own(vllm_server: EmbeddedServer) -> None:
    """VLLM_RPC_BASE_PATH and TMPDIR, which ManagedServer removes when the server stops (tests/component: the fault
    server): vLLM's sockets and its torch.distributed file store are there, not in the machine's /tmp."""
    assert vllm_server.managed is not None and vllm_server.managed.launch_tmp is not None
    left = list(vllm_server.managed.launch_tmp.iterdir())
    assert any(path.is_socket() for path in left)
    assert [p for p in left if p.name.startswith(DIST_STORE)]


def test_tokenize_counts_tokens(vllm_server: EmbeddedServer) -> None:
    url = vllm_server.base_url + "/tokenize"
    one = httpx.post(url, json={"model": "tiny-llama", "prompt": "hello world"}).json()
    two = httpx.post(url, json={"model": "tiny-llama", "prompt": "hello world hello world"}).json()
    assert one["count"] == len(one["tokens"]) > 0
    assert two["count"] > one["count"]


def test_stream_of_exactly_64_tokens_ends_with_usage(vllm_server: EmbeddedServer) -> None:
    body = {"model": "tiny-llama", "messages": [{"role": "user", "content": "count"}], "max_tokens": 64,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    events = []
    with httpx.stream("POST", vllm_server.base_url + "/v1/chat/completions", json=body, headers=AUTH) as r:
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["choices"] == []
    assert last["usage"]["completion_tokens"] == 64


def test_metrics_kv_size_equals_kv_blocks_times_block_size(constrained_server: EmbeddedServer) -> None:
    config = cache_config(parse_metrics(httpx.get(constrained_server.base_url + "/metrics").text))
    assert config.block_size == BLOCK_SIZE_TOKENS
    assert config.num_blocks == 104
    assert config.kv_cache_size_tokens == 104 * BLOCK_SIZE_TOKENS


def test_request_without_api_key_is_refused(vllm_server: EmbeddedServer) -> None:
    body = {"model": "tiny-llama", "prompt": "x", "max_tokens": 1}
    assert httpx.post(vllm_server.base_url + "/v1/completions", json=body).status_code == 401
    assert httpx.post(vllm_server.base_url + "/v1/completions", json=body, headers=AUTH).status_code == 200


def test_server_refuses_kv_blocks_too_small_for_max_model_len() -> None:
    import pytest

    with pytest.raises(ValueError, match="kv_blocks: 8 blocks"):
        EmbeddedServer(ServerConfig(max_model_len=2048, kv_blocks=8))
    assert os.environ.get("VLLM_API_KEY") != TEST_API_KEY
