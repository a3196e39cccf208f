"""Speculative decoding on the embedded CPU vLLM (the ngram method, no draft model): the spec-decode columns of a
decode cell are filled from its counters, and run.json records the launched server's speculative config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.results.store import RUN_FILE
from toolkit.servers.embedded.server import ServerConfig, launched_embedded

pytestmark = pytest.mark.timeout(300)
NGRAM = '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}'


def test_ngram_speculation_fills_the_spec_decode_columns(tmp_path: Path) -> None:
    config = ServerConfig(max_model_len=2048, speculative_config=NGRAM)
    params = make_params({"contexts": ["512"], "concurrency": [1], "duration_s": 3, "max_output": 256,
                          "readiness_timeout_s": 60, "control_window_s": 0, "endpoint": "completions"})  # fmt: skip
    with launched_embedded(params, tmp_path, config) as launched:
        cells = {m.phase: m for m in run_matrix(launched, tmp_path, progress=False)}
    decode = cells["decode"]
    assert decode.status == "Valid", decode.error
    assert decode.spec_drafts is not None and decode.spec_draft_tokens is not None  # counters read, not absent
    assert decode.spec_accepted_tokens is not None and decode.spec_draft_tokens <= 2 * decode.spec_drafts
    if decode.spec_draft_tokens:
        assert decode.spec_acceptance_rate is not None and 0 <= decode.spec_acceptance_rate <= 1
    info = json.loads((tmp_path / RUN_FILE).read_text())
    assert info["environment"]["speculative_config"] == json.loads(NGRAM)
    assert info["engine"]["Speculative decoding"] == "ngram, 2 tokens"
    assert cells["prefill"].spec_drafts is None  # a prefill measures no speculation: absent, not zero
