"""Speculative decoding on the embedded CPU vLLM (the ngram method, no draft model): the spec-decode columns of a
decode cell are filled from its counters and, per draft position, from the acceptance histograms of the requests that
ended in the window; run.json records the speculative config of the server's launch command (the session's
speculative server, tests/conftest.py: a run that launches its server is tested by the batch and the notebook that
starts the embedded server itself)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import NGRAM
from toolkit.loadgen.server_timing import read_server_timing
from toolkit.matrix.runner import run_matrix
from toolkit.method.speculation import position_rates, read_positions
from toolkit.params import make_params
from toolkit.results.store import RUN_FILE
from toolkit.servers.embedded.server import SERVED_MODEL_NAME, EmbeddedServer

pytestmark = pytest.mark.timeout(300)
K = 2


def test_ngram_speculation_fills_the_spec_decode_columns(tmp_path: Path, speculative_server: EmbeddedServer) -> None:
    # requests of 256 tokens take about 0.4 s here: several end inside the 3 s window with their acceptance histograms
    server, command = speculative_server.base_url, shlex.join(speculative_server.command)
    params = make_params({"base_url": server, "launch_command": command, "contexts": ["512"], "concurrency": [1],
                          "duration_s": 3, "max_output": 256, "readiness_timeout_s": 60, "control_window_s": 0,
                          "endpoint": "completions"})  # fmt: skip
    cells = {m.phase: m for m in run_matrix(params, tmp_path, progress=False)}
    spec = one_request_s_spec(speculative_server.base_url, None)
    decode = cells["decode"]
    assert decode.status == "Valid", decode.error
    assert decode.spec_drafts is not None and decode.spec_draft_tokens is not None  # counters read, not absent
    assert decode.spec_accepted_tokens is not None and decode.spec_draft_tokens <= K * decode.spec_drafts
    if decode.spec_draft_tokens:
        assert decode.spec_acceptance_rate is not None and 0 <= decode.spec_acceptance_rate <= 1
    # per draft position, from the histograms of the requests that ended in the window
    rates = read_positions(decode.spec_acceptance_by_position)
    print(f"decode cell: by position {decode.spec_acceptance_by_position} over {decode.spec_request_steps} verify "
          f"steps; counters: acceptance {decode.spec_acceptance_rate}, {decode.spec_draft_tokens} draft tokens in "
          f"{decode.spec_drafts} steps, {decode.completed} requests completed")  # fmt: skip
    assert decode.spec_request_steps is not None and decode.spec_request_steps > 0, decode
    assert rates is not None and len(rates) == K and all(0 <= r <= 1 for r in rates), decode
    assert list(rates) == sorted(rates, reverse=True)  # position k is accepted only after position k - 1
    assert decode.spec_acceptance_rate is not None and rates[0] >= decode.spec_acceptance_rate - 0.05, decode
    # one request's own object: its histogram is read whole, and the mean of its position rates is its accepted
    # drafts / (K x verify steps), the acceptance rate accepted / drafted when every step drafted K tokens
    histogram = read_server_timing({"speculative_decoding": spec}).acceptance_histogram  # type: ignore[union-attr]
    assert histogram == tuple(spec["acceptance_histogram"]) and len(histogram) == K + 1 == spec["num_spec_tokens"] + 1
    steps, accepted = sum(histogram), sum(j * n for j, n in enumerate(histogram))
    assert (steps, accepted) == (spec["num_spec_steps"], spec["num_accepted_draft_tokens"]) and steps > 0
    own = position_rates(histogram)
    assert own is not None and sum(own) / K == pytest.approx(accepted / (K * steps), abs=1e-12)
    print(f"one request: histogram {list(histogram)}, by position {[round(r, 3) for r in own]}, mean "
          f"{sum(own) / K:.4f}; vLLM's acceptance {spec['draft_acceptance_rate']:.4f} = {accepted} accepted / "
          f"{spec['num_draft_tokens']} drafted ({K * steps} if every step drafted {K})")  # fmt: skip
    assert spec["num_draft_tokens"] <= K * steps
    assert sum(own) / K == pytest.approx(spec["draft_acceptance_rate"] * spec["num_draft_tokens"] / (K * steps))
    info = json.loads((tmp_path / RUN_FILE).read_text())
    assert info["environment"]["speculative_config"] == json.loads(NGRAM)
    assert info["engine"]["Speculative decoding"] == "ngram, 2 tokens"
    assert cells["prefill"].spec_drafts is None  # a prefill measures no speculation: absent, not zero
    assert cells["prefill"].spec_acceptance_by_position is None and cells["prefill"].spec_request_steps is None


def one_request_s_spec(base_url: str, key: str | None) -> dict[str, Any]:
    """The `metrics.speculative_decoding` object on the final chunk of one streamed completion (a repetitive prompt,
    so that the ngram method finds matches)."""
    body = {"model": SERVED_MODEL_NAME, "prompt": "one two three four " * 40, "max_tokens": 64, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True, "temperature": 0.0}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    metrics = None
    with httpx.stream("POST", base_url + "/v1/completions", json=body, headers=headers, timeout=60) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                metrics = json.loads(line[6:]).get("metrics") or metrics
    assert metrics is not None and "speculative_decoding" in metrics, metrics
    return metrics["speculative_decoding"]
